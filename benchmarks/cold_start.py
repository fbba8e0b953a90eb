"""cold-start: p50/p95 of the first access to a passivated owner, both placements.

Owners get some state, are passivated (``MemorySystem.passivate``), then read
once each, one after the other: in ``dedicated`` that first read activates a
new actor process (registry, process start, pool, load); in ``sharded`` the
owner's shard host loads it from the backend. A warm read of the same owners
is measured beside it.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from .stats import command, machine, percentiles_ms


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from .runtime_args import add_runtime_arguments

    add_runtime_arguments(parser)
    parser.add_argument("--owners", type=int, default=200, help="owners (sharded)")
    parser.add_argument("--dedicated-owners", type=int, default=8,
                        help="owners in dedicated placement (each start is a process)")
    parser.add_argument("--only", choices=["sharded", "dedicated"], default=None)


def _measure(args: argparse.Namespace, placement: str) -> dict[str, Any]:
    from dream_memory_actor.runtime.local import local_system
    from dream_memory_actor.storage.ops import AddFact, AddRule, SetStatus

    if args.backend == "memory" and placement == "dedicated":
        return {"skipped": "backend memory keeps a dedicated owner's state in its actor, "
                           "so passivation loses it; use --backend postgres"}
    n = args.owners if placement == "sharded" else args.dedicated_owners
    owners = [f"cold-{i}" for i in range(n)]
    with local_system(backend=args.backend, placement=placement,
                      postgres_dsn=args.postgres_dsn, name=f"bench-cold-{placement}",
                      shards=args.shards, max_live_owners=2 * max(n, args.shards),
                      idle_timeout_s=3600.0) as system:
        for o in owners:
            system.owner(o).apply([AddRule(f"{o}: review security first"),
                                   AddFact(f"{o}: writes Java"), SetStatus("project", o)])
        passivated = system.passivate(owners)
        cold, warm = [], []
        for o in owners:
            h = system.owner(o)
            t0 = time.perf_counter()
            snap = h.snapshot()
            cold.append(time.perf_counter() - t0)
            if snap.version != 1:
                raise AssertionError(f"{o} came back at version {snap.version}, not 1")
            t0 = time.perf_counter()
            h.snapshot()
            warm.append(time.perf_counter() - t0)
    return {"owners": n, "passivated": passivated, "cold_read": percentiles_ms(cold),
            "warm_read": percentiles_ms(warm)}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from dream_memory_actor.runtime.local import local_ray

    placements = [args.only] if args.only else ["sharded", "dedicated"]
    result: dict[str, Any] = {"benchmark": "cold-start", "backend": args.backend}
    with local_ray():
        for placement in placements:
            result[placement] = _measure(args, placement)
    result["machine"] = machine()
    result["command"] = command()
    return result
