"""Owners beyond the cap, idle owners, and calls racing a passivation (both placements)."""

from __future__ import annotations

import asyncio
import time

import pytest
import ray

from dream_memory_actor.runtime import MemorySystem
from dream_memory_actor.runtime.placement import NAMESPACE
from dream_memory_actor.storage.ops import AddFact
from tests.runtime.conftest import CAP, start_system


def owner_actors(system: MemorySystem) -> int:
    prefix = f"_owner.{system.name}."
    return sum(a["name"].startswith(prefix) and a["namespace"] == NAMESPACE
               for a in ray.util.list_named_actors(all_namespaces=True))


def test_live_owners_never_exceed_the_cap(system: MemorySystem) -> None:
    owners = [f"cap-{i}" for i in range(CAP + 3)]
    for o in owners:
        system.owner(o).add_fact(f"fact of {o}")
        stats = system.stats()
        assert stats["live_owners"] <= CAP and stats["high_water"] <= CAP
        if system.settings.placement == "dedicated":
            assert owner_actors(system) <= CAP
    assert system.stats()["passivated"] >= 3
    for o in owners:  # the passivated ones come back with their state
        assert [f.content for f in system.owner(o).snapshot().facts] == [f"fact of {o}"]
    assert system.stats()["high_water"] <= CAP


async def test_calls_racing_a_passivation_are_retried(system: MemorySystem) -> None:
    h = system.owner("racer")
    acked: list[str] = []

    async def load(w: int) -> None:
        for k in range(8):
            await h.apply_async([AddFact(f"race {w} {k}", id=f"race-{w}-{k}")])
            acked.append(f"race-{w}-{k}")

    async def passivate_repeatedly() -> None:
        for n in (4, 12, 20):
            while len(acked) < n:
                await asyncio.sleep(0.005)
            await asyncio.to_thread(system.passivate, ["racer"])

    await asyncio.gather(*(load(w) for w in range(4)), passivate_repeatedly())
    snap = await h.snapshot_async()
    assert sorted(f.id for f in snap.facts) == sorted(acked) and len(acked) == 32
    assert snap.version == 32


@pytest.mark.parametrize("placement", ["sharded", "dedicated"])
def test_idle_owners_are_passivated_and_come_back(placement: str, ray_runtime: None,
                                                  pg_dsn: str) -> None:
    s = start_system(pg_dsn, placement, f"test-idle-{placement}", shards=1,
                     idle_timeout_s=1.0)
    try:
        h = s.owner("sleepy")
        h.set_status("state", "awake")
        deadline = time.monotonic() + 15
        # an owner leaves the live count when its drain starts, and its actor is killed
        # once the drain ends: wait for both
        while (s.stats()["live_owners"] or (placement == "dedicated" and owner_actors(s))
               ) and time.monotonic() < deadline:
            time.sleep(0.2)
        stats = s.stats()
        assert stats["live_owners"] == 0 and stats["passivated"] >= 1
        if placement == "dedicated":
            assert owner_actors(s) == 0
        assert dict(h.snapshot().status) == {"state": "awake"}
    finally:
        s.shutdown(grace_period_s=1)
