"""locomo-ingest: how many LoCoMo turns a second ``MemoryEngine`` stores on PostgreSQL.

Every turn of the conversations (each its own owner, ingested concurrently, as
``compare-mem0`` does) is stored with its session's time, one ``store_many`` per
session (``--batch conversation``: one a conversation, hundreds of turns; ``--ingest
store``: one ``store`` per turn), on a fresh schema each round, with the embeddings
served from the disk cache: the figure is the memory system's own write path
(judgement, SQL, indexes), not the model's. Compare two versions of
the code by running it on each, alternating; the load average is recorded with
every round, and the process's CPU share of the wall clock (near 1: the Python side
bounds the rate; lower: the database does).
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from .corpus import bench_settings, ingest_engine
from .embed_cache import DiskCachedEmbedder
from .locomo import load_locomo
from .retrieval import DEFAULT_PATH
from .stats import command, machine


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--path", default=DEFAULT_PATH, help="LoCoMo JSON file")
    p.add_argument("--model", default="multilingual-e5-small")
    p.add_argument("--cache-dir", default=".bench/embeddings",
                   help="embedding cache (filled on the first run)")
    p.add_argument("--ingest", choices=["store", "store_many"], default="store_many")
    p.add_argument("--batch", choices=["session", "conversation"], default="session",
                   help="what one store_many holds: a session's turns, or a whole "
                        "conversation's (an import of a history, hundreds of turns)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--dsn", default=None, help="PostgreSQL DSN (default: the embedded server)")


async def run(args: argparse.Namespace) -> dict[str, Any]:
    data = load_locomo(args.path)
    embedder = DiskCachedEmbedder(args.model, args.cache_dir)
    rounds = []
    for _ in range(args.rounds):
        settings = bench_settings("postgres", args.dsn, 0.85, args.model)
        cpu, wall = time.process_time(), time.perf_counter()
        corpus = await ingest_engine(data.conversations, settings, embedder,
                                     many=args.ingest == "store_many", batch=args.batch)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        try:
            done = corpus.describe()
        finally:
            await corpus.close()
        rounds.append({"stores_per_s": done["stores_per_s"], "ingest_s": done["ingest_s"],
                       "memories": done["memories"], "merges": done["merges"],
                       "cpu_share": round(cpu / wall, 2),
                       "load_average": [round(x, 2) for x in os.getloadavg()]})
    rates = sorted(r["stores_per_s"] for r in rounds)
    return {"benchmark": "locomo-ingest", "command": command(), "machine": machine(),
            "data": data.describe(), "ingest": args.ingest, "batch": args.batch,
            "model": args.model,
            "turns": sum(len(c.turns) for c in data.conversations),
            "rounds": rounds, "median_stores_per_s": rates[len(rates) // 2]}
