"""Remove a worker node during a write load; run by ``test_node_loss.py`` in a subprocess.

``ray.cluster_utils.Cluster`` starts its own head node and cannot share a process
with the test session's ``ray.init``, hence the subprocess. One cluster (head +
2 workers) serves both placements: the owner-holding actors are pinned to the
workers (resource ``dm_worker``), the registry and the VectorIndex to the head;
the node holding the owner is removed ungracefully (its raylet killed, like a
crashed machine) while four writers write; they write on until the cluster has
marked the node dead, so the load spans the restart. A fresh worker joins before the
second placement. Writes one JSON object to RESULT_FILE (stdout carries Ray's logs).

    python -m tests.runtime.node_loss_scenario POSTGRES_DSN RESULT_FILE
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import sys
import time
import uuid
from typing import Any

import ray
from ray.cluster_utils import Cluster

from dream_memory_actor.config import MemorySettings
from dream_memory_actor.runtime import MemorySystem
from dream_memory_actor.storage.ops import AddFact
from tests.runtime.embedders import TopicEmbedder, reworded
from tests.runtime.holders import holder_of

WRITERS = 4
STEPS = 15
NODE_ARGS: dict[str, Any] = {"num_cpus": 1, "object_store_memory": 80 * 1024 * 1024,
                             "resources": {"dm_worker": 100}}


def _alive(node_id: str) -> bool:
    """Whether the cluster still counts the node as alive (its health checks)."""
    return any(n["NodeID"] == node_id and n["Alive"] for n in ray.nodes())


async def scenario(cluster: Cluster, workers: list[Any], dsn: str, placement: str
                   ) -> dict[str, Any]:
    settings = MemorySettings(
        backend="postgres", postgres_dsn=dsn, postgres_schema=f"t_{uuid.uuid4().hex[:12]}",
        postgres_pool_max=3, placement=placement, shards=2, max_live_owners=10)
    system = MemorySystem.start(
        settings, name=f"node-loss-{placement}", embedder_factory=TopicEmbedder,
        actor_options={"resources": {"dm_worker": 1}},
        system_actor_options={"resources": {"dm_head": 1}})
    owner = f"nl-{placement}"
    h = system.owner(owner)
    await h.add_fact_async("before the load")
    actor = holder_of(system, owner)
    before = await actor.info.remote()
    node = next(w for w in workers if w.node_id == before["node_id"])
    acked: list[str] = []
    stores: list[str] = []
    node_dead = asyncio.Event()

    async def load(w: int) -> None:
        # At least STEPS writes each, and on until two more after the cluster has
        # marked the node dead: those go to the restarted actor, whatever the timing.
        after_death = 0
        for k in itertools.count():
            if k >= STEPS and after_death >= 2:
                return
            dead_before = node_dead.is_set()
            fid = f"nl-{w}-{k}"
            await h.apply_async([AddFact(f"node loss fact {w} {k}", id=fid)])
            acked.append(fid)
            stores.append((await h.store_async(reworded(6, w, k, "a node loss note"))).memory.id)
            after_death += dead_before

    async def remove_node() -> tuple[float, float]:
        while len(acked) < WRITERS * STEPS // 3:
            await asyncio.sleep(0.01)
        t0 = time.monotonic()
        await asyncio.to_thread(cluster.remove_node, node, False)
        deadline = t0 + 60
        while await asyncio.to_thread(_alive, node.node_id):
            if time.monotonic() > deadline:
                raise TimeoutError(f"node {node.node_id} still alive 60 s after removal")
            await asyncio.sleep(0.05)
        node_dead.set()
        return t0, time.monotonic() - t0

    t_start = time.monotonic()
    remover = asyncio.ensure_future(remove_node())
    await asyncio.gather(*(load(w) for w in range(WRITERS)))
    removed_at, death_seen_s = await remover
    after = await actor.info.remote()
    snap = await h.snapshot_async()
    memories = await h.list_async()
    facts = [f.id for f in snap.facts if f.id.startswith("nl-")]
    result = {
        "acked": len(acked),
        "missing": sorted(set(acked) - set(facts)),
        "twice": len(facts) - len(set(facts)),
        "unacked_present": sorted(set(facts) - set(acked)),
        "version": snap.version,
        "expected_version": 1 + len(acked),
        "min_acked": WRITERS * STEPS,
        "memories": len(memories),
        "merge_count": memories[0].metadata.get("merge_count") if memories else None,
        "stores": len(stores),
        "moved_node": after["node_id"] != before["node_id"],
        "removed_node": node.node_id,
        "load_s": round(time.monotonic() - t_start, 2),
        "load_after_removal_s": round(time.monotonic() - removed_at, 2),
        "death_seen_after_s": round(death_seen_s, 2),
    }
    system.shutdown(grace_period_s=1)
    workers.remove(node)
    return result


def main() -> None:
    dsn, result_file = sys.argv[1], sys.argv[2]
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "object_store_memory": 80 * 1024 * 1024, "include_dashboard": False,
        "resources": {"dm_head": 100},
        # Notice a dead node within about a second instead of the default ~30 s.
        "_system_config": {"health_check_initial_delay_ms": 0, "health_check_period_ms": 300,
                           "health_check_failure_threshold": 3},
    })
    try:
        workers = [cluster.add_node(**NODE_ARGS) for _ in range(2)]
        ray.init(address=cluster.address, logging_level=logging.ERROR)
        cluster.wait_for_nodes()
        out: dict[str, Any] = {}
        for placement in ("sharded", "dedicated"):
            out[placement] = asyncio.run(scenario(cluster, workers, dsn, placement))
            workers.append(cluster.add_node(**NODE_ARGS))
            cluster.wait_for_nodes()
        with open(result_file, "w", encoding="utf-8") as f:
            json.dump(out, f)
    finally:
        ray.shutdown()
        cluster.shutdown()  # type: ignore[no-untyped-call]


if __name__ == "__main__":
    main()
