"""Hybrid search latency by store size (query embedding excluded, reported apart).

Data is synthetic but shaped like memories: texts drawn from topic vocabularies
and embeddings clustered around topic centroids (uniform random vectors would be
an unrealistically hard case for HNSW). A sample is written through the real
``store`` path (dedup check included) to measure insert throughput; the rest is
bulk-loaded (PostgreSQL ``COPY``) so large sizes fit in a benchmark run.
"""

from __future__ import annotations

import argparse
import os
import time
import uuid
from typing import Any

import numpy as np

from dream_memory_actor.config import MemorySettings
from dream_memory_actor.models import utcnow
from dream_memory_actor.storage import open_stores

from .progress import Progress
from .stats import command, machine, percentiles_ms

_TOPICS = [
    "kubernetes helm deploy cluster rollout pods ingress",
    "security review injection secrets tokens audit",
    "java spring maven gradle jvm heap",
    "travel flight hotel booking visa airport",
    "cooking recipe garlic pasta oven dinner",
    "music guitar concert album band practice",
    "running marathon training knee pace shoes",
    "database postgres index vacuum query replica",
    "family birthday gift party cake kids",
    "finance budget invoice tax salary savings",
]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--backend", default="postgres", choices=["postgres", "memory", "redis"])
    p.add_argument("--dsn", default=None, help="PostgreSQL DSN (default: the embedded server)")
    p.add_argument("--redis-url", default=None)
    p.add_argument("--owners", type=int, default=1)
    p.add_argument("--per-owner", type=int, default=1000)
    p.add_argument("--dim", type=int, default=384)
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--store-sample", type=int, default=500,
                   help="memories written through store() to time the insert path")
    p.add_argument("--store-at-size", type=int, default=0, metavar="N",
                   help="after the searches, time N pairs of stores into the loaded owner: "
                        "a new memory (no near neighbour), then a near copy of it with "
                        "another number (a judged neighbour); query vectors given")
    p.add_argument("--counts-first-pairs", action="store_true",
                   help="(postgres) also time each query twice, alternating which goes "
                        "first: planned from the previous search's counts (one round trip) "
                        "and counts read first (two round trips)")
    p.add_argument("--limit", type=int, default=10)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--keep", action="store_true", help="keep the benchmark schema")
    p.add_argument("--reuse-schema", default=None, metavar="SCHEMA",
                   help="search a schema an earlier run kept (--keep) instead of loading "
                        "one: same sizes and seed, no store, load or build figures")
    p.add_argument("--build-mem-mb", type=int, default=None,
                   help="maintenance_work_mem for the HNSW build (default: enough for the "
                        "whole graph, ~3 KB per 384-dim vector, at least 1 GB)")
    p.add_argument("--build-workers", type=int, default=None,
                   help="parallel maintenance workers for the HNSW build "
                        "(default: one fewer than the CPUs)")


def build_settings(rows: int, dim: int, mem_mb: int | None,
                   workers: int | None) -> tuple[int, int]:
    """``maintenance_work_mem`` (MB) and parallel workers for building the HNSW index.

    pgvector builds fastest while the whole graph fits in ``maintenance_work_mem``;
    past it, it says so and the build takes many times longer (the 1M point did not
    finish in 45 min at 1 GB). A graph element is the vector plus its neighbour lists,
    about ``4 * dim + 1.5 KB``; the estimate doubles that for headroom.
    """
    import os

    if mem_mb is None:
        mem_mb = max(1024, rows * 2 * (4 * dim + 1536) // (1024 * 1024))
    if workers is None:
        workers = max(0, min(7, (os.cpu_count() or 1) - 1))
    return mem_mb, workers


class _Corpus:
    def __init__(self, dim: int, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.centroids = self.rng.normal(size=(len(_TOPICS), dim))
        self.words = [t.split() for t in _TOPICS]

    def item(self) -> tuple[str, np.ndarray]:
        t = int(self.rng.integers(len(_TOPICS)))
        words = self.rng.choice(self.words[t], size=4)
        tail = int(self.rng.integers(1_000_000))
        text = f"{' '.join(words)} note {tail}"
        vec = self.centroids[t] + self.rng.normal(scale=1.2, size=self.centroids.shape[1])
        return text, (vec / np.linalg.norm(vec)).astype(np.float32)

    def query(self) -> tuple[str, list[float]]:
        text, vec = self.item()
        return " ".join(text.split()[:2]), [float(x) for x in vec]


async def run(args: argparse.Namespace) -> dict[str, Any]:
    schema = args.reuse_schema or f"bench_{uuid.uuid4().hex[:8]}"
    kw: dict[str, Any] = {"backend": args.backend, "postgres_schema": schema,
                          "redis_prefix": schema}
    if args.dsn:
        kw["postgres_dsn"] = args.dsn
    if args.redis_url:
        kw["redis_url"] = args.redis_url
    settings = MemorySettings(**kw)
    structured, vector_store = await open_stores(settings, args.dim)
    vector: Any = vector_store  # backend-specific extras (bulk_insert, EXPLAIN) used below
    await vector.setup()
    corpus = _Corpus(args.dim, args.seed)
    owners = [f"owner-{i}" for i in range(args.owners)]
    result: dict[str, Any] = {
        "benchmark": "search-latency", "backend": args.backend, "owners": args.owners,
        "per_owner": args.per_owner, "total_memories": args.owners * args.per_owner,
        "dim": args.dim, "limit": args.limit, "machine": machine(),
        "data": "synthetic: 10 topic vocabularies, embeddings clustered by topic",
        "command": command(),
        "candidates": {"vector": settings.vector_candidates,
                       "keyword": settings.keyword_candidates},
    }
    if args.reuse_schema:
        result["reused_schema"] = ("searched a schema kept by an earlier run of the same "
                                   "sizes; queries from the same topic model; load and "
                                   "build not re-measured")
        args.keep = True  # not ours to drop
    try:
        if not args.reuse_schema:
            await _load(args, vector, corpus, owners, schema, result)
        # 3. searches (query embedding given: its cost is excluded by construction)
        queries = [corpus.query() for _ in range(args.queries)]
        for text, vec in queries[:10]:  # warm the pool and caches
            await vector.search(owners[0], text, embedding=vec, limit=args.limit)
        # What else the machine ran: on a shared machine, tails follow the load
        load = [round(x, 2) for x in os.getloadavg()]
        lat = []
        for i, (text, vec) in enumerate(queries):
            owner = owners[i % len(owners)]
            t0 = time.perf_counter()
            await vector.search(owner, text, embedding=vec, limit=args.limit,
                                weights=settings.weights, vector_k=settings.vector_candidates,
                                keyword_k=settings.keyword_candidates)
            lat.append(time.perf_counter() - t0)
        result["search"] = percentiles_ms(lat)
        result["load_average"] = {"before_searches": load,
                                  "after_searches": [round(x, 2) for x in os.getloadavg()]}
        if args.counts_first_pairs and args.backend == "postgres":
            result["counts_first_pairs"] = await _counts_first_pairs(
                vector, queries, owners, settings, args.limit)
        if args.store_at_size:
            result["store_at_size"] = await _stores_at_size(args, vector, corpus, owners[0])
        if args.backend == "redis":
            result["redis_search_module"] = vector.search_module
            if vector.search_module:  # the flavour, so reports keep the two apart
                result["backend"] = "redis-stack"
        result["query_embedding"] = (
            "excluded: queries carry precomputed embeddings; see `python -m benchmarks "
            "retrieval` for embedding cost with a real model")

        if args.backend == "postgres":
            # The plan the searches chose (see storage/postgres/plan.py)
            chosen = await vector.search_plan([owners[0]], embedding=True)
            sql, qargs = vector.statement([owners[0]], [], queries[0][1], chosen,
                                          vector_k=settings.vector_candidates, keyword_k=100)
            async with vector.backend.connection() as conn:
                plan = "\n".join(r[0] for r in await conn.fetch("EXPLAIN " + sql, *qargs))
            result["explain_uses_vector_index"] = f"memories_hnsw_{args.dim}" in plan
            terms = queries[0][0].split()
            result["chosen_scans"] = (await vector.search_plan(
                [owners[0]], terms, embedding=True,
                keyword_k=settings.keyword_candidates)).describe()
            # Owners searched in the rows the process keeps ran no candidate statement.
            result["kept_rows"] = vector.kept()
    finally:
        if args.backend == "postgres" and not args.keep:
            async with vector.backend.connection() as conn:
                await conn.execute(f"DROP SCHEMA {schema} CASCADE")
        await structured.close()
        await vector.close()
    return result


async def _counts_first_pairs(vector: Any, queries: list[tuple[str, list[float]]],
                              owners: list[str], settings: MemorySettings, limit: int
                              ) -> dict[str, Any]:
    """Each query searched both ways, in alternating order: with the counts of the
    previous search (the store's default: counts and candidates in one statement where
    those counts choose the same plan) and with no counts held, so the search reads
    the counts first and then the candidates."""
    load = [round(x, 2) for x in os.getloadavg()]
    lat: dict[str, list[float]] = {"one_round_trip": [], "counts_first": []}
    for i, (text, vec) in enumerate(queries):
        owner = owners[i % len(owners)]
        order = ["one_round_trip", "counts_first"]
        for way in order if i % 2 == 0 else order[::-1]:
            if way == "counts_first":
                vector._last_counts = None  # else: the counts the previous search read
            t0 = time.perf_counter()
            await vector.search(owner, text, embedding=vec, limit=limit,
                                weights=settings.weights, vector_k=settings.vector_candidates,
                                keyword_k=settings.keyword_candidates)
            lat[way].append(time.perf_counter() - t0)
    out: dict[str, Any] = {way: percentiles_ms(v) for way, v in lat.items()}
    ratio = [a / b for a, b in zip(lat["one_round_trip"], lat["counts_first"], strict=True)]
    out["ratio_one_round_trip_to_counts_first"] = {
        "p50": round(float(np.percentile(ratio, 50)), 3),
        "p95": round(float(np.percentile(ratio, 95)), 3), "n": len(ratio)}
    out["load_average"] = {"before": load, "after": [round(x, 2) for x in os.getloadavg()]}
    return out


async def _stores_at_size(args: argparse.Namespace, vector: Any, corpus: _Corpus,
                          owner: str) -> dict[str, Any]:
    """Store latency into an owner of ``per_owner`` memories, by what the store finds:
    ``far`` (a new memory, nothing near it) and ``near`` (the same words with another
    number, its vector close to the one just stored: the nearest memories are judged)."""
    far: list[float] = []
    near: list[float] = []
    outcomes: dict[str, int] = {}
    load = [round(x, 2) for x in os.getloadavg()]
    for _ in range(args.store_at_size):
        text, vec = corpus.item()
        t0 = time.perf_counter()
        await vector.store(owner, text, embedding=vec.tolist())
        far.append(time.perf_counter() - t0)
        twin = corpus.rng.normal(scale=0.01, size=vec.shape[0]) + vec
        twin_text = f"{text.rsplit(' ', 1)[0]} {int(corpus.rng.integers(1_000_000))}"
        t0 = time.perf_counter()
        r = await vector.store(owner, twin_text,
                               embedding=(twin / np.linalg.norm(twin)).astype(float).tolist())
        near.append(time.perf_counter() - t0)
        what = ("merged" if r.merged else "superseded" if getattr(r, "superseded", False)
                else "kept")
        outcomes[what] = outcomes.get(what, 0) + 1
    return {"pairs": args.store_at_size, "far": percentiles_ms(far),
            "near": percentiles_ms(near), "near_outcomes": outcomes,
            "load_average": {"before": load,
                             "after": [round(x, 2) for x in os.getloadavg()]}}


async def _load(args: argparse.Namespace, vector: Any, corpus: _Corpus, owners: list[str],
                schema: str, result: dict[str, Any]) -> None:
    """Store a sample through ``store`` (timed), bulk-load the rest, build the index."""
    # 1. insert throughput through the real store path (dedup check included)
    sample = min(args.store_sample, args.per_owner)
    t0 = time.perf_counter()
    for _ in range(sample):
        item_text, item_vec = corpus.item()
        await vector.store(owners[0], item_text, embedding=item_vec.tolist())
    took = time.perf_counter() - t0
    result["store_path"] = {"ops": sample, "ops_per_s": round(sample / took, 1)}

    # 2. bulk load the rest (PostgreSQL: without the HNSW index, built afterwards,
    # which is how a large import should be done and is much faster)
    if args.backend == "postgres":
        async with vector.backend.connection() as conn:
            await conn.execute(f"DROP INDEX IF EXISTS {schema}.memories_hnsw_{args.dim}")
    t0 = time.perf_counter()
    loaded = 0
    bar = Progress("load", args.owners * args.per_owner - sample)
    for i, owner in enumerate(owners):
        todo = args.per_owner - (sample if i == 0 else 0)
        while todo > 0:
            batch = [corpus.item() for _ in range(min(todo, 5000))]
            if args.backend == "postgres":
                now = utcnow()
                await vector.bulk_insert(owner, [(t, v.tolist(), now) for t, v in batch])
            else:
                for item_text, item_vec in batch:
                    await vector.store(owner, item_text, embedding=item_vec.tolist(),
                                       threshold=1.0)
            todo -= len(batch)
            loaded += len(batch)
            bar.advance(len(batch))
    bar.__exit__(None, None, None)
    result["bulk_load"] = {"rows": loaded,
                           "rows_per_s": round(loaded / max(time.perf_counter() - t0, 1e-9))}
    if args.backend == "postgres":
        import asyncpg

        from dream_memory_actor.storage.postgres.hnsw import index_sql

        t0 = time.perf_counter()
        # A dedicated connection: the pool's 60 s statement timeout is for queries,
        # not for building an index over 100k+ vectors.
        conn = await asyncpg.connect(vector.backend.dsn)
        try:
            mem_mb, workers = build_settings(result["total_memories"], args.dim,
                                             args.build_mem_mb, args.build_workers)
            await conn.execute(f"SET maintenance_work_mem = '{int(mem_mb)}MB'")
            await conn.execute(f"SET max_parallel_maintenance_workers = {int(workers)}")
            # The index a search would build when it first wants it, built here
            # with the settings above (and not concurrently: nothing writes meanwhile).
            await conn.execute(index_sql(schema, args.dim, concurrently=False))
            result["hnsw_build_s"] = round(time.perf_counter() - t0, 2)
            result["hnsw_build"] = {"maintenance_work_mem_mb": mem_mb,
                                    "parallel_workers": workers}
            # What autovacuum does within minutes of a large insert (PostgreSQL >= 13
            # vacuums insert-only tables): statistics, hint bits, visibility map.
            # Searched before it, the freshly loaded table runs about 30% slower.
            await conn.execute(f"VACUUM (ANALYZE) {schema}.memories")
            await conn.execute(f"VACUUM (ANALYZE) {schema}.memory_text")
        finally:
            await conn.close()
        await vector.backend.hnsw.build()  # finds it built: searches may take it
        result["after_load"] = "VACUUM (ANALYZE), as autovacuum does after a large insert"
