"""What a search waits beyond its query's embedding, with and without reading its keyword
candidates while the query is embedded.

``python -m benchmarks search-overlap [--conversations N]``: LoCoMo's conversations
loaded into PostgreSQL (the embedded server) as ``compare-mem0 --ingest store_many``
loads them, embeddings from the cache; then every question three times, in an order
that alternates per question: the query's embedding alone (the model, never the cache),
a search that embeds its query while it reads the keyword candidates (the product's
path, ``PostgresVectorStore._embedded_candidates``), and one that reads them after the
embedding (``VectorStore._embedded_candidates``, the plain path). Both searches must
return the same hits. Each search's time is split into :data:`PHASES`: what comes
before the model starts on the query, the model inside the search, and what comes after
the query's vector.

An owner whose rows the process keeps (PostgreSQL's ``KEPT_MAX_ROWS``: LoCoMo's
conversations are) runs no statement after the query's vector either way: both arms
then read only the counts while the model runs, and the phases show what is left.

The model's threads decide what overlap can win: in a Ray actor it runs on one
(Ray sets ``OMP_NUM_THREADS=1``), leaving a core to the database; alone in a process
it takes both cores of a small machine. Run it both ways (``OMP_NUM_THREADS=1
python -m benchmarks search-overlap``); the machine it records names the setting.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

from dream_memory_actor.storage.postgres.vector import PostgresVectorStore
from dream_memory_actor.storage.vector import VectorStore

from .corpus import bench_settings, ingest_engine
from .embed_cache import DEFAULT_CACHE_DIR, DiskCachedEmbedder
from .locomo import load_locomo
from .retrieval import DEFAULT_PATH
from .stats import command, machine, percentiles_ms

DEFAULT_MODEL = "multilingual-e5-small"
ARMS = ("overlapped", "after", "embedding")
#: Where a search's time goes: from its call until the model starts on the query, the
#: model inside the search (slower than alone where the search's other work takes a core
#: from it), and from the query's vector to the hits.
PHASES = ("before_model", "model", "after_model")


def _alike(a: list[tuple[str, float]], b: list[tuple[str, float]]) -> bool:
    """The same hits in the same order, with the same scores but for the last digits of a
    cosine: an owner's first searches run the statements (pgvector sums a cosine in
    single precision), the later ones its rows kept in the process (in double)."""
    return [x[0] for x in a] == [x[0] for x in b] and all(
        abs(x[1] - y[1]) < 1e-6 for x, y in zip(a, b, strict=True))


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--path", default=DEFAULT_PATH, help="the LoCoMo JSON file")
    p.add_argument("--model", default=DEFAULT_MODEL)
    p.add_argument("--cache-dir", default=str(DEFAULT_CACHE_DIR))
    p.add_argument("--conversations", type=int, default=None, help="only the first N")


async def run(args: argparse.Namespace) -> dict[str, Any]:
    data = load_locomo(args.path)
    if args.conversations:
        data.conversations = data.conversations[:args.conversations]
    embedder = DiskCachedEmbedder(args.model, args.cache_dir)
    settings = bench_settings("postgres", None, 0.85, args.model)
    result: dict[str, Any] = {"benchmark": "search-overlap", "command": command(),
                              "machine": machine(), "model": args.model}
    corpus = await ingest_engine(data.conversations, settings, embedder, many=True)
    overlapped = PostgresVectorStore._embedded_candidates
    try:
        await embedder.load()

        marks: dict[str, float] = {}

        async def embed(text: str) -> list[float]:
            marks["start"] = time.perf_counter()
            found = (await embedder.embed_raw([text]))[0]
            marks["end"] = time.perf_counter()
            return found

        took: dict[str, list[float]] = {k: [] for k in ARMS}
        phases: dict[str, dict[str, list[float]]] = {
            arm: {k: [] for k in PHASES} for arm in ("overlapped", "after")}
        differ = 0
        asked = [(c, q) for c in data.conversations for q in c.questions]
        for i, (conv, q) in enumerate(asked):
            hits: dict[str, list[tuple[str, float]]] = {}
            for arm in ARMS if i % 2 == 0 else ARMS[::-1]:
                t0 = time.perf_counter()
                if arm == "embedding":
                    await embed(q.question)
                else:
                    PostgresVectorStore._embedded_candidates = (  # type: ignore[method-assign]
                        overlapped if arm == "overlapped" else VectorStore._embedded_candidates)
                    found = await corpus.vector.search(
                        conv.owner, q.question, embed=embed, limit=10, weights=settings.weights,
                        now=conv.now, vector_k=settings.vector_candidates,
                        keyword_k=settings.keyword_candidates)
                    hits[arm] = [(h.memory.id, h.score) for h in found]
                    t1 = time.perf_counter()
                    for phase, seconds in zip(PHASES, (marks["start"] - t0,
                                                       marks["end"] - marks["start"],
                                                       t1 - marks["end"]), strict=True):
                        phases[arm][phase].append(seconds)
                took[arm].append(time.perf_counter() - t0)
            differ += not _alike(hits["overlapped"], hits["after"])
    finally:
        PostgresVectorStore._embedded_candidates = overlapped  # type: ignore[method-assign]
        await corpus.close()
    p = {k: percentiles_ms(v) for k, v in took.items()}
    result.update({
        "searches": len(took["after"]), "searches_with_other_hits": differ, "latency": p,
        "beyond_embedding_p50_ms": {arm: round(p[arm]["p50_ms"] - p["embedding"]["p50_ms"], 3)
                                    for arm in ("overlapped", "after")},
        "phases": {arm: {phase: percentiles_ms(v) for phase, v in by_phase.items()}
                   for arm, by_phase in phases.items()},
        "paired_ratio_overlapped_over_after_median": round(statistics.median(
            a / b for a, b in zip(took["overlapped"], took["after"], strict=True)), 4),
        "load_average_after": [round(x, 2) for x in os.getloadavg()]})
    return result
