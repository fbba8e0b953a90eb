"""footprint: owners touched, live actors, resident memory per live owner, both placements.

Touches ``--owners`` owners (``--facts`` facts and one status each, 64 writes in
flight) with a cap above that number, so all stay live, then reads every
actor's RSS. ``sharded``: memory per live owner is the growth of the shard
hosts' RSS divided by the owners; ``dedicated``: every owner is a process, its
unique memory (USS) is the cost (``--dedicated-owners`` of them, a handful: each is a process).
The extrapolation to 10,000 owners is printed beside the measurement.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from .stats import command, machine

TARGET_OWNERS = 10_000
NODE_BYTES = 24 * 1024**3
MB = 1024 * 1024


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from .runtime_args import add_runtime_arguments

    add_runtime_arguments(parser)
    parser.add_argument("--owners", type=int, default=2000, help="owners touched (sharded)")
    parser.add_argument("--dedicated-owners", type=int, default=6,
                        help="owners touched in dedicated placement (one process each)")
    parser.add_argument("--facts", type=int, default=3, help="facts written per owner")
    parser.add_argument("--only", choices=["sharded", "dedicated"], default=None,
                        help="measure one placement (default: both)")


async def _touch(system: Any, owners: list[str], facts: int) -> float:
    from dream_memory_actor.storage.ops import AddFact, SetStatus

    sem = asyncio.Semaphore(64)

    async def one(owner: str) -> None:
        async with sem:
            ops = [*(AddFact(f"{owner} fact {i}: prefers concise answers in code review")
                     for i in range(facts)), SetStatus("project", f"{owner}-project")]
            await system.owner(owner).apply_async(ops)
            await system.owner(owner).snapshot_async()

    t0 = time.perf_counter()
    await asyncio.gather(*(one(o) for o in owners))
    return time.perf_counter() - t0


def _holders(stats: dict[str, Any]) -> list[dict[str, Any]]:
    return list(stats.get("hosts") or stats.get("owners") or [])


async def _measure(args: argparse.Namespace, placement: str) -> dict[str, Any]:
    from dream_memory_actor.runtime.local import local_system

    n = args.owners if placement == "sharded" else args.dedicated_owners
    with local_system(backend=args.backend, placement=placement,
                      postgres_dsn=args.postgres_dsn, name=f"bench-footprint-{placement}",
                      shards=args.shards, max_live_owners=2 * max(n, args.shards),
                      idle_timeout_s=3600.0) as system:
        before = system.stats(detail=True)
        base_rss = sum(h["rss_bytes"] for h in _holders(before))
        seconds = await _touch(system, [f"fp-{i}" for i in range(n)], args.facts)
        after = system.stats(detail=True)
    holders = _holders(after)
    rss = sum(h["rss_bytes"] for h in holders)
    uss = sum(h["uss_bytes"] for h in holders)
    index_rss = sum(i["rss_bytes"] for i in after.get("indexes", []))
    out: dict[str, Any] = {
        "owners_touched": n,
        "live_owners": after["live_owners"],
        "live_actors": after["live_actors"],
        "touch_s": round(seconds, 2),
        "owners_per_s": round(n / seconds, 1),
        "holders_rss_mb": round(rss / MB, 1),
        "holders_uss_mb": round(uss / MB, 1),
        "index_rss_mb": round(index_rss / MB, 1),
    }
    if placement == "sharded":
        per_owner = max(rss - base_rss, 0) / n
        out.update(
            hosts_baseline_rss_mb=round(base_rss / MB, 1),
            bytes_per_live_owner=round(per_owner),
            extrapolated_rss_mb_for_10000=round((base_rss + per_owner * TARGET_OWNERS) / MB, 1),
        )
    else:
        # A process per owner: its unique memory (USS) is what each owner adds; RSS also
        # counts the shared libraries, which the node holds once.
        per_owner = uss / max(len(holders), 1)
        out.update(
            rss_bytes_per_owner_actor=round(rss / max(len(holders), 1)),
            bytes_per_live_owner=round(per_owner),
            extrapolated_rss_mb_for_10000=round(per_owner * TARGET_OWNERS / MB, 1),
            max_live_owners_on_24gb_node=int(NODE_BYTES // per_owner) if per_owner else None,
        )
    return out


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from dream_memory_actor.runtime.local import local_ray

    placements = [args.only] if args.only else ["sharded", "dedicated"]
    result: dict[str, Any] = {"benchmark": "footprint", "backend": args.backend,
                              "shards": args.shards, "facts_per_owner": args.facts}
    with local_ray():
        for placement in placements:
            result[placement] = await _measure(args, placement)
    result["machine"] = machine()
    result["command"] = command()
    return result
