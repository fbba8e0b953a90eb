"""batch-ingest: memories per second, ``store_many`` against one ``store`` per memory.

Both paths run through ``MemoryEngine`` with a real embedding model (default the
local ``multilingual-e5-small``), on fresh owners holding the same number of
earlier memories, with new texts every time (no embedding is served from a cache).
Measured as alternating pairs in one run: pair ``i`` stores ``--items`` texts one by
one into one owner and as one batch into another, the order swapped every pair, so
a change in machine load falls on both sides. The ratio of each pair is the batch
rate over the one-by-one rate; wall-clock and process CPU time both recorded. The
load average (``uptime``) is recorded before and after: on a shared machine the
wall-clock figures move with it, the CPU-time ratio much less.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import time
import uuid
from typing import Any

from .stats import command, machine

#: The target: batch ingest at least this many times the one-by-one rate.
TARGET_RATIO = 5.0

_WORDS = [
    "deploy",
    "cluster",
    "helm",
    "kubernetes",
    "review",
    "security",
    "java",
    "project",
    "prefers",
    "green",
    "tea",
    "meeting",
    "friday",
    "release",
    "rollback",
    "database",
    "index",
    "latency",
    "cache",
    "agent",
    "memory",
    "note",
    "bug",
    "fix",
    "test",
    "build",
    "pipeline",
    "docker",
    "image",
    "version",
    "branch",
    "merge",
    "customer",
    "invoice",
    "budget",
    "report",
    "travel",
    "flight",
    "hotel",
    "dinner",
    "birthday",
    "sister",
    "garden",
    "bicycle",
    "weekend",
    "python",
    "notebook",
    "dashboard",
    "alert",
    "oncall",
    "incident",
    "postmortem",
    "migration",
    "schema",
    "backup",
]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--backend",
        choices=["memory", "postgres"],
        default="memory",
        help="postgres without --postgres-dsn uses the embedded server",
    )
    p.add_argument("--postgres-dsn", default=None)
    p.add_argument("--model", default="local:multilingual-e5-small")
    p.add_argument("--items", type=int, default=32, help="memories per side of a pair")
    p.add_argument("--pairs", type=int, default=6)
    p.add_argument(
        "--existing", type=int, default=100, help="memories each owner holds before it is measured"
    )
    p.add_argument("--seed", type=int, default=7)


def _texts(rng: random.Random, n: int) -> list[str]:
    return [
        " ".join(rng.choice(_WORDS) for _ in range(rng.randint(8, 18)))
        + f" ({rng.randrange(10**9)})"
        for _ in range(n)
    ]


def _uptime() -> str:
    try:
        return subprocess.run(
            ["uptime"], capture_output=True, text=True, timeout=5, check=False
        ).stdout.strip()
    except OSError:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from dream_memory_actor.config import MemorySettings
    from dream_memory_actor.engine import MemoryEngine

    schema = f"bench_{uuid.uuid4().hex[:8]}"
    kw: dict[str, Any] = {
        "backend": args.backend,
        "embedding_model": args.model,
        "postgres_schema": schema,
    }
    if args.postgres_dsn:
        kw["postgres_dsn"] = args.postgres_dsn
    result: dict[str, Any] = {
        "benchmark": "batch-ingest",
        "backend": args.backend,
        "model": args.model,
        "items_per_pair": args.items,
        "pairs": args.pairs,
        "existing": args.existing,
        "target_ratio": TARGET_RATIO,
        "nice": os.nice(0),
        "uptime_before": _uptime(),
        "machine": machine(),
        "command": command(),
        "data": "synthetic texts of 8-18 words, each new (no embedding cache hit)",
    }
    rng = random.Random(args.seed)
    engine = await MemoryEngine.open(MemorySettings(**kw))
    one, batch, ratios, cpu_ratios = [], [], [], []
    merged = {"one_by_one": 0, "batch": 0}
    try:
        await engine.store_many("warm-up", _texts(rng, 8))  # loads the model
        for i in range(args.pairs):
            owners = {"one_by_one": f"one-{i}", "batch": f"batch-{i}"}
            for o in owners.values():
                await engine.store_many(o, _texts(rng, args.existing))
            timing: dict[str, tuple[float, float]] = {}
            order = ["one_by_one", "batch"] if i % 2 == 0 else ["batch", "one_by_one"]
            for mode in order:
                texts = _texts(rng, args.items)
                w0, c0 = time.perf_counter(), time.process_time()
                if mode == "batch":
                    results = await engine.store_many(owners[mode], texts)
                else:
                    results = [await engine.store(owners[mode], t) for t in texts]
                timing[mode] = (time.perf_counter() - w0, time.process_time() - c0)
                merged[mode] += sum(r.merged for r in results)
            one.append(args.items / timing["one_by_one"][0])
            batch.append(args.items / timing["batch"][0])
            ratios.append(timing["one_by_one"][0] / timing["batch"][0])
            cpu_ratios.append(timing["one_by_one"][1] / timing["batch"][1])
    finally:
        if args.backend == "postgres":
            from dream_memory_actor.storage.postgres.vector import PostgresVectorStore

            store = engine.vector
            if isinstance(store, PostgresVectorStore):
                async with store.backend.connection() as conn:
                    await conn.execute(f"DROP SCHEMA {schema} CASCADE")
        await engine.close()
    result["one_by_one"] = {
        "items_per_s": round(statistics.median(one), 2),
        "per_pair": [round(x, 2) for x in one],
    }
    result["batch"] = {
        "items_per_s": round(statistics.median(batch), 2),
        "per_pair": [round(x, 2) for x in batch],
    }
    result["ratios"] = {
        "median": round(statistics.median(ratios), 3),
        "min": round(min(ratios), 3),
        "max": round(max(ratios), 3),
        "per_pair": [round(x, 3) for x in ratios],
        "cpu_median": round(statistics.median(cpu_ratios), 3),
        "cpu_per_pair": [round(x, 3) for x in cpu_ratios],
    }
    result["meets_target"] = result["ratios"]["median"] >= TARGET_RATIO
    result["merged"] = merged
    result["uptime_after"] = _uptime()
    return result
