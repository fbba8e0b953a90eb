"""Query-embedding latency and ingest rate of each local embedding model.

``python -m benchmarks embedding-speed --json``: for each model, one search query
embedded at a time (the query role, no cache: every text is new) gives the
query-embedding p50/p95; memories stored one at a time through
``MemoryEngine.store`` on the in-memory backend (embedding, dedup check and
write) give the ingest rate in memories per second; the queries again, while one
writer stores the memories meanwhile, give the query embedding among stores. The texts are the
library's own labelled pairs (``embedding/data/*.tsv``), English and Chinese
half and half, so the run needs no data from outside the package: queries are
the texts of the held-apart pairs, memories those of the others.

The machine is shared, so the models take turns: the run is cut into rounds,
and in each round every model (in a rotating order) embeds its share of the
queries and then stores its share of the memories. A slow spell then hits
every model alike. The load average (``uptime``) before and after the run, and
the process's nice value, are recorded with the figures. Model loading is
timed apart (``load_s``: the first call, not counted in the figures).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import time
from collections.abc import Sequence
from typing import Any

from dream_memory_actor.config import MemorySettings
from dream_memory_actor.embedding import CachedEmbedder, open_inner_embedder
from dream_memory_actor.embedding.calibration import labelled_pairs
from dream_memory_actor.engine import MemoryEngine
from dream_memory_actor.storage.memory import InMemoryStructuredStore, InMemoryVectorStore

from .stats import command, machine, percentiles_ms

MODELS = ("local:multilingual-e5-small", "local:use-multilingual", "local:all-MiniLM-L6-v2")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--models", default=",".join(MODELS),
                   help="comma-separated embedding_model values (local models)")
    p.add_argument("--queries", type=int, default=160, help="queries per model")
    p.add_argument("--memories", type=int, default=320, help="memories stored per model")
    p.add_argument("--rounds", type=int, default=4, help="turns each model takes")


def uptime() -> str:
    """``uptime``'s line (load averages), or /proc/loadavg where there is no ``uptime``."""
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, timeout=5,
                              check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        try:
            with open("/proc/loadavg", encoding="ascii") as f:
                return "loadavg " + f.read().strip()
        except OSError:
            return "unknown"


def texts(queries: int, memories: int) -> tuple[list[str], list[str]]:
    """Queries and memories from the shipped pairs, alternating English and Chinese."""
    def mixed(items: Sequence[str]) -> list[str]:
        by_lang: dict[bool, list[str]] = {True: [], False: []}
        for t in dict.fromkeys(items):
            by_lang[t.isascii()].append(t)
        out = [t for pair in zip(by_lang[True], by_lang[False], strict=False) for t in pair]
        return out

    test, fit = labelled_pairs("test"), labelled_pairs("fit")
    q = mixed([t for p in test for t in (p.a, p.b)])
    m = mixed([t for p in fit for t in (p.a, p.b)])
    if len(q) < queries or len(m) < memories:
        raise SystemExit(f"the shipped pairs give {len(q)} queries and {len(m)} memories; "
                         f"asked for {queries} and {memories}")
    return q[:queries], m[:memories]


class Subject:
    """One model: its embedder, an engine on the in-memory backend, its timings."""

    def __init__(self, model: str, engine: MemoryEngine, load_s: float) -> None:
        self.model = model
        self.engine = engine
        self.load_s = load_s
        self.query_s: list[float] = []
        self.among_s: list[float] = []
        self.store_s = 0.0
        self.stored = 0
        self.merged = 0
        self.round_rates: list[float] = []

    @classmethod
    async def open(cls, model: str) -> Subject:
        settings = MemorySettings(backend="memory", embedding_model=model)
        inner = await open_inner_embedder(settings)
        assert inner is not None
        t0 = time.perf_counter()
        await inner.embed(["warm up"])  # loads the model
        load_s = time.perf_counter() - t0
        embedder = CachedEmbedder(inner, max_entries=0)  # no cache hits: every call embeds
        engine = MemoryEngine(settings, InMemoryStructuredStore(),
                              InMemoryVectorStore(inner.dim), embedder)
        return cls(model, engine, load_s)

    async def queries(self, batch: Sequence[str]) -> None:
        for text in batch:
            t0 = time.perf_counter()
            await self.engine.embed_query(text)
            self.query_s.append(time.perf_counter() - t0)

    async def ingest(self, batch: Sequence[str]) -> None:
        t0 = time.perf_counter()
        for text in batch:
            result = await self.engine.store("bench", text)
            self.merged += int(result.merged)
        took = time.perf_counter() - t0
        self.store_s += took
        self.stored += len(batch)
        self.round_rates.append(round(len(batch) / took, 2))

    async def queries_among_stores(self, batch: Sequence[str], memories: Sequence[str]) -> None:
        """``batch`` embedded as queries while one writer stores ``memories`` meanwhile,
        again and again: a search among stores, where a query may wait for the model."""
        done = asyncio.Event()

        async def writer() -> None:
            i = 0
            while not done.is_set():
                await self.engine.store("bench-among", memories[i % len(memories)])
                i += 1

        task = asyncio.create_task(writer())
        try:
            await asyncio.sleep(0)
            for text in batch:
                t0 = time.perf_counter()
                await self.engine.embed_query(text)
                self.among_s.append(time.perf_counter() - t0)
        finally:
            done.set()
            await task

    def result(self) -> dict[str, Any]:
        return {
            "model": self.model, "dim": self.engine.embedder.dim if self.engine.embedder else None,
            "load_s": round(self.load_s, 3),
            "query_embedding": percentiles_ms(self.query_s),
            "query_embedding_among_stores": percentiles_ms(self.among_s),
            "ingest": {"memories": self.stored, "seconds": round(self.store_s, 3),
                       "memories_per_s": round(self.stored / self.store_s, 2),
                       "merged": self.merged, "per_round_memories_per_s": self.round_rates},
        }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    models = [m for m in args.models.split(",") if m]
    queries, memories = texts(args.queries, args.memories)
    before = uptime()
    subjects = [await Subject.open(m) for m in models]
    rounds = max(1, args.rounds)
    started = time.perf_counter()
    for r in range(rounds):
        q = queries[r * len(queries) // rounds:(r + 1) * len(queries) // rounds]
        m = memories[r * len(memories) // rounds:(r + 1) * len(memories) // rounds]
        for s in subjects[r % len(subjects):] + subjects[:r % len(subjects)]:
            await s.queries(q)
            await s.ingest(m)
            await s.queries_among_stores(q, m)
    elapsed = time.perf_counter() - started
    for s in subjects:
        await s.engine.close()
    return {
        "benchmark": "embedding-speed", "command": command(), "machine": machine(),
        "uptime": {"before": before, "after": uptime()}, "nice": os.nice(0),
        "rounds": rounds, "seconds": round(elapsed, 1),
        "texts": {"queries": len(queries), "memories": len(memories),
                  "query_mean_chars": round(sum(map(len, queries)) / len(queries), 1),
                  "memory_mean_chars": round(sum(map(len, memories)) / len(memories), 1),
                  "languages": "en and zh, alternating"},
        "models": [s.result() for s in subjects],
    }
