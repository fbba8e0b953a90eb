"""Many nodes on one machine: agents on every node of a Ray cluster sharing owners.

A ``ray.cluster_utils.Cluster`` (a head and up to four workers, each its own raylet)
and one PostgreSQL. The owner-holding actors run on the workers (resource
``dm_worker``, spread), the registry and the VectorIndex on the head; an agent actor
is pinned to every node and writes facts to owners every agent shares.

* **Throughput by workers**: with 1, 2, then 3 workers (a system started on each
  count, its hosts spread over the workers), every agent writes rounds of facts;
  acknowledged writes per second are recorded. On one machine the nodes share its
  CPUs, so the rates are for the record: a correctness run, not a scaling figure.
* **Churn**: on the three-worker system, while the agents write, a fourth worker
  joins (an agent starts on it) and a worker holding owners leaves ungracefully
  (its raylet killed). Then every acknowledged write is in the owner's snapshot,
  none twice, the snapshots every agent reads agree, and the owners of the lost
  worker are held on a live one.

    python -m benchmarks multi-node --json [--postgres-dsn DSN]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import time
import uuid
from functools import lru_cache
from typing import Any

from .stats import command, machine

HEAD_ARGS: dict[str, Any] = {
    "num_cpus": 1, "object_store_memory": 80 * 1024 * 1024, "include_dashboard": False,
    "resources": {"dm_head": 100},
    # Notice a dead node within about a second instead of the default ~30 s.
    "_system_config": {"health_check_initial_delay_ms": 0, "health_check_period_ms": 300,
                       "health_check_failure_threshold": 3},
}
WORKER_ARGS: dict[str, Any] = {"num_cpus": 1, "object_store_memory": 80 * 1024 * 1024,
                               "resources": {"dm_worker": 100}}
OWNERS = [f"shared-{i}" for i in range(6)]
SHARDS = 3


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--postgres-dsn", default=None,
                        help="PostgreSQL to use (default: the embedded server)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds of writes per worker count (default 3)")
    parser.add_argument("--batch", type=int, default=12,
                        help="concurrent writes of one agent in a round (default 12)")
    parser.add_argument("--churn-only", action="store_true",
                        help="skip the throughput rounds: start three workers, then churn")


@lru_cache(maxsize=1)
def agent_class() -> Any:
    import ray

    @ray.remote(num_cpus=0, max_concurrency=64)
    class Agent:
        """An agent on one node: joins memory systems by name, writes and reads owners."""

        def __init__(self) -> None:
            self._systems: dict[str, Any] = {}

        def node_id(self) -> str:
            return str(ray.get_runtime_context().get_node_id())

        async def _system(self, name: str) -> Any:
            from dream_memory_actor.runtime import MemorySystem

            if name not in self._systems:
                self._systems[name] = await asyncio.to_thread(MemorySystem.connect, name)
            return self._systems[name]

        async def write(self, system: str, tag: str, n: int) -> list[tuple[str, str]]:
            """``n`` concurrent fact writes over the shared owners; the acknowledged ones."""
            from dream_memory_actor.storage.ops import AddFact

            s = await self._system(system)

            async def one(i: int) -> tuple[str, str]:
                owner, fid = OWNERS[i % len(OWNERS)], f"{tag}-{i}"
                await s.owner(owner).apply_async([AddFact(f"fact {tag} {i}", id=fid)])
                return owner, fid

            return list(await asyncio.gather(*(one(i) for i in range(n))))

        async def read(self, system: str) -> dict[str, tuple[int, list[str]]]:
            s = await self._system(system)
            out = {}
            for owner in OWNERS:
                snap = await s.owner(owner).snapshot_async()
                out[owner] = (snap.version, sorted(f.id for f in snap.facts))
            return out

    return Agent


def _pinned(node_id: str) -> Any:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return agent_class().options(scheduling_strategy=NodeAffinitySchedulingStrategy(
        node_id, soft=False)).remote()


def _start(settings: Any, name: str) -> Any:
    from dream_memory_actor.runtime import MemorySystem

    return MemorySystem.start(
        settings, name=name, shards=SHARDS, placement="sharded",
        actor_options={"resources": {"dm_worker": 1}, "scheduling_strategy": "SPREAD"},
        system_actor_options={"resources": {"dm_head": 1}})


def _host_nodes(system: Any) -> dict[str, str]:
    """owner -> the node id of the actor holding it now."""
    import ray

    from dream_memory_actor.runtime.placement import NAMESPACE, host_name, shard_of

    out = {}
    for owner in OWNERS:
        actor = ray.get_actor(host_name(system.name, shard_of(owner, SHARDS)),
                              namespace=NAMESPACE)
        out[owner] = ray.get(actor.info.remote(), timeout=60)["node_id"]
    return out


def _dispatch(agents: dict[str, Any], system: str, tag: str, batch: int) -> dict[str, Any]:
    return {node: a.write.remote(system, f"{tag}-{node[:8]}", batch)
            for node, a in agents.items()}


async def _collect(refs: dict[str, Any]) -> tuple[list[tuple[str, str]], list[str]]:
    """(acknowledged writes, nodes whose agent failed) of one dispatched round."""
    import ray

    acked: list[tuple[str, str]] = []
    failed: list[str] = []
    for node, ref in refs.items():
        try:
            acked += await ref
        except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError):
            failed.append(node)
    return acked, failed


async def _round(agents: dict[str, Any], system: str, tag: str, batch: int
                 ) -> tuple[list[tuple[str, str]], list[str]]:
    return await _collect(_dispatch(agents, system, tag, batch))


async def throughput(agents: dict[str, Any], system: str, rounds: int, batch: int
                     ) -> dict[str, Any]:
    await _round(agents, system, "warm", 2)  # connections, held snapshots
    t0 = time.perf_counter()
    acked = 0
    for r in range(rounds):
        got, failed = await _round(agents, system, f"tp{r}", batch)
        assert not failed, failed
        acked += len(got)
    elapsed = time.perf_counter() - t0
    return {"agents": len(agents), "writes": acked, "seconds": round(elapsed, 2),
            "writes_per_s": round(acked / elapsed, 1)}


async def churn(cluster: Any, system: Any, agents: dict[str, Any], workers: list[Any],
                batch: int) -> dict[str, Any]:
    """Write while a worker joins and one holding owners leaves; then check everything."""
    import ray

    before = _host_nodes(system)
    leaving = next(w for w in workers if w.node_id in before.values())
    acked: list[tuple[str, str]] = []
    attempted_failed: list[str] = []
    joined: dict[str, Any] = {}

    async def leave() -> None:
        await asyncio.to_thread(cluster.remove_node, leaving, False)
        deadline = time.monotonic() + 60
        while any(n["NodeID"] == leaving.node_id and n["Alive"] for n in ray.nodes()):
            assert time.monotonic() < deadline, "the removed node was never marked dead"
            await asyncio.sleep(0.05)

    t0 = time.perf_counter()
    # round 0: a worker joins while the round's writes run (a node starts in the main
    # thread: Ray sets signal handlers); round 1: one holding owners leaves meanwhile
    refs = _dispatch(agents, system.name, "ch0", batch)
    node = cluster.add_node(**WORKER_ARGS)
    cluster.wait_for_nodes()
    joined["node"] = node
    rounds = [await _collect(refs)]
    agents[node.node_id] = _pinned(node.node_id)
    refs = _dispatch(agents, system.name, "ch1", batch)
    await leave()
    rounds.append(await _collect(refs))
    for r in range(2, 5):  # on after the node is marked dead: the owners' new holders
        for dead in rounds[-1][1]:
            agents.pop(dead, None)
        rounds.append(await _round(agents, system.name, f"ch{r}", batch))
    for got, failed in rounds:
        acked += got
        attempted_failed += failed
    agents.pop(leaving.node_id, None)
    workers.remove(leaving)
    workers.append(node)
    seconds = time.perf_counter() - t0

    truth: dict[str, tuple[int, list[str]]] = {}
    for owner in OWNERS:
        snap = await system.owner(owner).snapshot_async()
        truth[owner] = (snap.version, sorted(f.id for f in snap.facts))
    facts = {fid for _, ids in truth.values() for fid in ids}
    converged, deadline = False, time.monotonic() + 30
    while not converged and time.monotonic() < deadline:
        views = await asyncio.gather(*(a.read.remote(system.name) for a in agents.values()))
        converged = all({k: (v[0], list(v[1])) for k, v in view.items()} == truth
                        for view in views)
        if not converged:
            await asyncio.sleep(0.2)
    after = _host_nodes(system)
    alive = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    return {
        "acked": len(acked),
        "missing": sorted(fid for _, fid in acked if fid not in facts),
        "twice": sum(len(ids) - len(set(ids)) for _, ids in truth.values()),
        "agents_lost_with_the_node": len(attempted_failed),
        "agents_at_end": len(agents),
        "joined_node_writes": sum(1 for _, fid in acked
                                  if f"-{joined['node'].node_id[:8]}-" in fid),
        "converged": converged,
        "owners_on_leaving_node": sorted(o for o, n in before.items() if n == leaving.node_id),
        "replaced_on_live_nodes": all(n in alive and n != leaving.node_id
                                      for n in after.values()),
        "rounds": len(rounds),
        "seconds": round(seconds, 2),
    }


async def scenario(dsn: str, rounds: int, batch: int, churn_only: bool = False
                   ) -> dict[str, Any]:
    import ray
    from ray.cluster_utils import Cluster

    from dream_memory_actor.config import MemorySettings

    cluster = Cluster(initialize_head=True, head_node_args=HEAD_ARGS)
    try:
        ray.init(address=cluster.address, logging_level=logging.ERROR, log_to_driver=False)
        head = ray.get_runtime_context().get_node_id()
        agents = {head: _pinned(head)}
        workers: list[Any] = []
        settings = MemorySettings(backend="postgres", postgres_dsn=dsn, postgres_pool_max=3,
                                  postgres_schema=f"mn_{uuid.uuid4().hex[:10]}",
                                  max_live_owners=100)
        by_workers: dict[str, Any] = {}
        system = None
        timings: dict[str, float] = {}
        t0 = time.perf_counter()
        for k in (1, 2, 3):
            workers.append(cluster.add_node(**WORKER_ARGS))
            cluster.wait_for_nodes()
            agents[workers[-1].node_id] = _pinned(workers[-1].node_id)
            if churn_only and k < 3:
                continue
            if system is not None:
                system.shutdown(grace_period_s=1)
            system = _start(settings, f"mn-{k}")
            by_workers[str(k)] = await throughput(agents, system.name, rounds, batch)
            timings[f"to_{k}_workers_s"] = round(time.perf_counter() - t0, 1)
        assert system is not None
        result = await churn(cluster, system, agents, workers, batch)
        timings["churn_s"] = round(time.perf_counter() - t0, 1)
        system.shutdown(grace_period_s=1)
        return {"throughput_by_workers": by_workers, "churn": result, "timings": timings}
    finally:
        ray.shutdown()
        cluster.shutdown()  # type: ignore[no-untyped-call]


async def _run(dsn: str | None, rounds: int, batch: int, churn_only: bool
               ) -> dict[str, Any]:
    if dsn is not None:
        return await scenario(dsn, rounds, batch, churn_only)
    import tempfile

    from dream_memory_actor.storage.postgres.embedded import start_embedded

    server = start_embedded(tempfile.mkdtemp(prefix="dm-bench-pg-"), cleanup="delete")
    try:
        return await scenario(server.get_uri(), rounds, batch, churn_only)
    finally:
        server.cleanup()


async def run(args: argparse.Namespace) -> dict[str, Any]:
    t0 = time.perf_counter()
    out = await _run(args.postgres_dsn, args.rounds, args.batch, args.churn_only)
    return {
        "benchmark": "multi-node",
        "backend": "postgres",
        "shards": SHARDS,
        "owners": len(OWNERS),
        "rounds": args.rounds,
        "batch": args.batch,
        **out,
        "wall_s": round(time.perf_counter() - t0, 1),
        "note": "one machine: the nodes share its CPUs; the rates are for the record",
        "machine": machine(),
        "command": command(),
    }
