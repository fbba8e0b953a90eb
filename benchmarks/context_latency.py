"""Store and search latency of memories that carry their context, against memories without.

``python -m benchmarks context-latency [--conversations N] [--backend postgres|memory|redis]``:
two ``MemoryEngine``s with the real model (``local:multilingual-e5-small`` by default),
one per arm, each with its own embedding cache as configured by default, so neither
arm finds the other's texts there. Each LoCoMo turn is stored twice through
``MemoryEngine.store`` with ``now=`` its session time: by the plain engine into owner
``plain-<conversation>`` alone, and by the context engine into owner
``ctx-<conversation>`` with the context the retrieval benchmark's ``--context beside``
gives it (``locomo.turn_context``: the session's date and its previous turns, a line
each, as the extraction path does). The two stores of a turn take turns going first
(plain first on even turns, with context first on odd ones), so a busy spell of the
shared machine falls on both alike.

A store with context embeds its content and its context's lines apart
(``CachedEmbedder.embed_memories``): in a conversation, its previous turns were
embedded when they were stored, and its date with the session's first turn, so the
model runs on its content and on what its context says new. The model's part is timed
apart first (``MemoryEngine.embed`` on each arm's engine, in the same order and from
empty caches, emptied again before the stores), so the reader sees where a store's
time goes; ``model_texts`` counts the texts each arm sent to the model.

Then every question of those conversations searches the plain owner and the context
owner, alternating who goes first: (a) with its query vector given (embedded once
before), the search alone; (b) with the query embedded by the search (each engine
embeds each question once). Ratios are context over plain: of the p50s, and the median
of the per-pair ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from dream_memory_actor.config import MemorySettings
from dream_memory_actor.engine import MemoryEngine
from dream_memory_actor.text import normalize_content, with_context

from .corpus import bench_settings
from .locomo import Conversation, load_locomo, turn_context
from .retrieval import DEFAULT_PATH, EXTRACTION_TURNS
from .stats import command, json_ready, machine, percentiles_ms

#: The library's default local model (``local:`` name without the prefix).
DEFAULT_MODEL = "multilingual-e5-small"
#: The issue's bound: a store with context takes at most this many times a store without.
STORE_RATIO_TARGET = 1.3
#: "Search latency unchanged": context over plain at most this (the noise of one run on a
#: shared machine; both arms search the same questions in alternating order).
SEARCH_RATIO_TOLERANCE = 1.1
#: The two ways a turn is stored: alone, and with its context beside it.
ARMS = ("plain", "context")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--path", default=DEFAULT_PATH, help="the LoCoMo JSON file")
    p.add_argument("--conversations", type=int, default=2, help="the first N conversations")
    p.add_argument("--backend", choices=["postgres", "memory", "redis"], default="postgres")
    p.add_argument("--dsn", default=None, help="PostgreSQL DSN (default: the embedded server)")
    p.add_argument("--redis-url", default="redis://127.0.0.1:6379/0",
                   help="the Redis server (--backend redis); the run's keys are removed after")
    p.add_argument("--model", default=DEFAULT_MODEL,
                   help="local model (a local: name without the prefix)")
    p.add_argument("--context-turns", type=int, default=EXTRACTION_TURNS,
                   help="previous turns of the session in a context (default: as the "
                        f"extraction path's, extraction_context_turns={EXTRACTION_TURNS})")
    p.add_argument("--limit", type=int, default=10, help="hits per search")
    p.add_argument("--out", default=None, help="also write the JSON result to this file")


def order(i: int) -> tuple[str, ...]:
    """Which arm goes first for pair ``i``: plain on even pairs, context on odd ones."""
    return ARMS if i % 2 == 0 else ARMS[::-1]


def owner_of(arm: str, conv: Conversation) -> str:
    return f"{'plain' if arm == 'plain' else 'ctx'}-{conv.owner}"


def compared(lat: dict[str, list[float]]) -> dict[str, Any]:
    """Each arm's percentiles and context against plain: the ratio of the p50s and the
    median (and p95) of the per-pair ratios (pairs are the same turn or question)."""
    p = {arm: percentiles_ms(lat[arm]) for arm in ARMS}
    pairs = [c / b for b, c in zip(lat["plain"], lat["context"], strict=True) if b > 0]
    return {**p,
            "p50_ratio_context_over_plain": round(p["context"]["p50_ms"]
                                                  / p["plain"]["p50_ms"], 3),
            "pair_ratio_context_over_plain": {
                "median": round(float(np.median(pairs)), 3),
                "p95": round(float(np.percentile(pairs, 95)), 3), "n": len(pairs)}}


def _calls(engines: dict[str, MemoryEngine]) -> dict[str, int]:
    """How many texts each arm's embedder has sent to the model so far."""
    return {arm: e.embedder.misses if e.embedder is not None else 0
            for arm, e in engines.items()}


def _since(engines: dict[str, MemoryEngine], before: dict[str, int]) -> dict[str, int]:
    return {arm: n - before[arm] for arm, n in _calls(engines).items()}


async def time_stores(engines: dict[str, MemoryEngine], convs: Sequence[Conversation],
                      turns: int, date: bool = True) -> dict[str, Any]:
    """Every turn stored plain and with its context (alternating which first)."""
    lat: dict[str, list[float]] = {arm: [] for arm in ARMS}
    outcomes: dict[str, Counter[str]] = {arm: Counter() for arm in ARMS}
    calls = _calls(engines)
    i = 0
    for conv in convs:
        for j, t in enumerate(conv.turns):
            around = turn_context(conv, j, turns, date) or None
            for arm in order(i):
                t0 = time.perf_counter()
                r = await engines[arm].store(owner_of(arm, conv), t.content, now=t.at,
                                             context=around if arm == "context" else None,
                                             metadata={"dia_id": t.dia_id})
                lat[arm].append(time.perf_counter() - t0)
                outcomes[arm]["merged" if r.merged else
                              "superseded" if r.superseded else "kept"] += 1
            i += 1
    return {**compared(lat), "outcomes": {arm: dict(c) for arm, c in outcomes.items()},
            "model_texts": _since(engines, calls)}


async def time_embeddings(engines: dict[str, MemoryEngine], convs: Sequence[Conversation],
                          turns: int, date: bool = True) -> dict[str, Any]:
    """The model's part of each kind of store: ``MemoryEngine.embed`` of the turn, or of
    the turn with its context, on the arm's engine, in conversation order."""
    lat: dict[str, list[float]] = {arm: [] for arm in ARMS}
    chars: dict[str, list[int]] = {arm: [] for arm in ARMS}
    calls = _calls(engines)
    i = 0
    for conv in convs:
        for j, t in enumerate(conv.turns):
            content = normalize_content(t.content)
            around = turn_context(conv, j, turns, date) or None
            for arm in order(i):
                given = around if arm == "context" else None
                t0 = time.perf_counter()
                await engines[arm].embed(content, given)
                lat[arm].append(time.perf_counter() - t0)
                chars[arm].append(len(with_context(content, given)))
            i += 1
    return {**compared(lat), "model_texts": _since(engines, calls),
            "median_chars": {arm: float(np.median(c)) for arm, c in chars.items()}}


async def time_searches(engines: dict[str, MemoryEngine], convs: Sequence[Conversation],
                        limit: int, vectors: dict[str, list[float]] | None) -> dict[str, Any]:
    """Every question against both owners of its conversation (alternating which first),
    with its vector from ``vectors``, or embedded by the search when ``None``."""
    lat: dict[str, list[float]] = {arm: [] for arm in ARMS}
    calls = _calls(engines)
    i = 0
    for conv in convs:
        for q in conv.questions:
            given = None if vectors is None else vectors[q.question]
            for arm in order(i):
                t0 = time.perf_counter()
                await engines[arm].search(owner_of(arm, conv), q.question, limit=limit,
                                          now=conv.now, embedding=given)
                lat[arm].append(time.perf_counter() - t0)
            i += 1
    return {**compared(lat), "model_texts": _since(engines, calls)}


async def measure(engines: dict[str, MemoryEngine], convs: Sequence[Conversation],
                  turns: int, limit: int, date: bool = True) -> dict[str, Any]:
    """The model's part, the stores, then the two kinds of searches (see the module
    doc); ``engines``: one per arm, each with its own embedding cache."""
    _empty(engines)
    out: dict[str, Any] = {"embedding": await time_embeddings(engines, convs, turns, date)}
    _empty(engines)
    out["store"] = await time_stores(engines, convs, turns, date)
    questions = list(dict.fromkeys(q.question for c in convs for q in c.questions))
    vectors = {}
    for q in questions:
        v = await engines["plain"].embed_query(q)
        if v is not None:
            vectors[q] = v
    _empty(engines)
    out["search_vector_given"] = await time_searches(engines, convs, limit,
                                                     vectors if vectors else None)
    out["search_with_embedding"] = await time_searches(engines, convs, limit, None)
    out["targets"] = targets(out)
    return out


def _empty(engines: dict[str, MemoryEngine]) -> None:
    """Empty every arm's embedding cache."""
    for engine in engines.values():
        if engine.embedder is not None:
            engine.embedder.clear()


def targets(figures: dict[str, Any]) -> dict[str, Any]:
    """The issue's latency targets, met or not, from the figures."""
    def bound(section: str, at_most: float) -> dict[str, Any]:
        s = figures[section]
        ratio = s["p50_ratio_context_over_plain"]
        pair = s["pair_ratio_context_over_plain"]["median"]
        return {"p50_ratio": ratio, "pair_ratio_median": pair, "at_most": at_most,
                "met": ratio <= at_most and pair <= at_most}

    return {"store_with_context_at_most_1.3x": bound("store", STORE_RATIO_TARGET),
            "search_unchanged_vector_given": bound("search_vector_given",
                                                   SEARCH_RATIO_TOLERANCE),
            "search_unchanged_with_embedding": bound("search_with_embedding",
                                                     SEARCH_RATIO_TOLERANCE)}


async def _warm(engine: MemoryEngine, conv: Conversation, turns: int) -> None:
    """Load the model and open the store's paths on an owner of its own, not timed."""
    for j, t in enumerate(conv.turns[:4]):
        await engine.store("warm-up", t.content, now=t.at,
                           context=turn_context(conv, j, turns) or None)
    for q in conv.questions[:4]:
        await engine.search("warm-up", q.question, now=conv.now)


async def _drop(engine: MemoryEngine, settings: MemorySettings) -> None:
    """Drop the benchmark's schema (PostgreSQL) or its keys (Redis)."""
    if settings.backend == "postgres":
        backend: Any = getattr(engine.vector, "backend")  # noqa: B009 - postgres only
        async with backend.connection() as conn:
            await conn.execute(f"DROP SCHEMA IF EXISTS {settings.postgres_schema} CASCADE")
    elif settings.backend == "redis" and settings.redis_url is not None:
        from redis.asyncio import Redis

        client = Redis.from_url(settings.redis_url.get_secret_value())
        try:
            keys = [k async for k in client.scan_iter(match=f"{settings.redis_prefix}:*",
                                                      count=1000)]
            for start in range(0, len(keys), 1000):  # a round trip a thousand keys
                await client.delete(*keys[start:start + 1000])
        finally:
            await client.aclose()


def settings_for(args: argparse.Namespace, threshold: float) -> MemorySettings:
    """The run's settings: a fresh PostgreSQL schema (``bench_settings``), or with
    ``--backend redis`` a fresh key prefix on ``--redis-url``."""
    extra: dict[str, Any] = {}
    if args.backend == "redis":
        extra = {"redis_url": args.redis_url, "redis_prefix": f"bench_ctx_{uuid.uuid4().hex[:10]}"}
    return bench_settings(args.backend, args.dsn, threshold, args.model, **extra)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    data = load_locomo(args.path)
    convs = data.conversations[:args.conversations]
    threshold = MemorySettings.model_fields["dedup_threshold"].default
    settings = settings_for(args, threshold)
    load_start = [round(x, 2) for x in os.getloadavg()]
    engines: dict[str, MemoryEngine] = {}
    try:
        for arm in ARMS:  # the same store (PostgreSQL: one schema), a cache each
            engines[arm] = await MemoryEngine.open(settings)
            await _warm(engines[arm], convs[0], args.context_turns)
        figures = await measure(engines, convs, args.context_turns, args.limit)
        for e in engines.values():
            await e.write_reads()
        await _drop(engines["plain"], settings)
    finally:
        for e in engines.values():
            await e.close()
    result: dict[str, Any] = {
        "benchmark": "context-latency", "command": command(), "machine": machine(),
        "path": Path(args.path).name, "backend": args.backend,
        "model": settings.embedding_model, "limit": args.limit,
        "conversations": [c.sample_id for c in convs],
        "turns": sum(len(c.turns) for c in convs),
        "questions": sum(len(c.questions) for c in convs),
        "context_shape": {"turns": args.context_turns, "date": True},
        "embedding_cache": f"one per arm, {settings.embedding_cache_size} texts (the "
                           "default); a context's lines embedded apart",
        "order": "per turn or question, plain first on even ones, context first on odd ones",
        **figures,
        "load_average": {"start": load_start,
                         "end": [round(x, 2) for x in os.getloadavg()]},
    }
    if args.out:
        result["finished_at"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
        Path(args.out).write_text(
            json.dumps(json_ready(result), indent=2, sort_keys=True, allow_nan=False) + "\n",
            encoding="utf-8")
    return result
