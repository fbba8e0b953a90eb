"""Actors killed in the middle of a write load: nothing acknowledged lost, nothing twice.

The owner's actor (its shard host, in ``sharded``) and then the VectorIndex are
killed with ``ray.kill(..., no_restart=False)`` while four writers keep writing;
Ray restarts them, the client and Ray retry the calls in flight with the same
operation ids, and the backend applies each once.
"""

from __future__ import annotations

import asyncio
from typing import Any

import ray

from dream_memory_actor.runtime import MemorySystem
from dream_memory_actor.runtime.placement import NAMESPACE, index_name
from dream_memory_actor.storage.ops import AddFact
from tests.runtime.embedders import reworded
from tests.runtime.holders import holder_of

WRITERS = 4
STEPS = 12


async def test_kill_actors_during_a_write_load(system: MemorySystem) -> None:
    owner = f"fault-{system.settings.placement}"
    h = system.owner(owner)
    base = await h.snapshot_async()
    acked_facts: list[str] = []
    acked_stores: list[str] = []

    async def load(w: int) -> None:
        for k in range(STEPS):
            fid = f"fault-{w}-{k}"
            await h.apply_async([AddFact(f"fault fact {w} {k}", id=fid)])
            acked_facts.append(fid)
            r = await h.store_async(reworded(5, w, k, "a fault note"))
            acked_stores.append(r.memory.id)

    async def kill_when(n: int, actor: Any) -> int:
        while len(acked_facts) < n:
            await asyncio.sleep(0.01)
        pid: int = (await actor.info.remote())["pid"]
        ray.kill(actor, no_restart=False)
        return pid

    holder = holder_of(system, owner)
    index = ray.get_actor(index_name(system.name, 0), namespace=NAMESPACE)
    results = await asyncio.gather(
        *(load(w) for w in range(WRITERS)),
        kill_when(WRITERS * STEPS // 4, holder),
        kill_when(WRITERS * STEPS // 2, index),
    )
    old_holder_pid, old_index_pid = results[-2], results[-1]
    assert (await holder.info.remote())["pid"] != old_holder_pid  # it really restarted
    assert (await index.info.remote())["pid"] != old_index_pid

    final = await h.snapshot_async()
    facts = [f.id for f in final.facts]
    assert sorted(facts) == sorted(acked_facts)  # none lost, none twice
    assert len(acked_facts) == WRITERS * STEPS
    assert final.version == base.version + WRITERS * STEPS  # each apply counted once
    memories = await h.list_async()
    assert len(memories) == 1 and set(acked_stores) == {memories[0].id}
    assert memories[0].metadata["merge_count"] == WRITERS * STEPS - 1  # each store merged once
