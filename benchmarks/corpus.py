"""Putting the LoCoMo turns into a memory store, the way an application would.

Two ingest paths, one result (a :class:`Corpus`: an open ``VectorStore`` to search,
and which dia_ids each memory stands for):

- ``engine``: ``MemoryEngine.store(owner, text, metadata={"dia_id": ...}, now=<session
  time>)``, the library in this process;
- ``actors``: a ``MemorySystem`` on Ray, one ``OwnerHandle`` per conversation,
  ``store_async(text, metadata)`` as an agent calls it. The runtime's ``store`` takes
  no ``now``, so memories are stamped with the wall clock; afterwards their
  ``created_at`` / ``updated_at`` are set to the session time in PostgreSQL (from
  the ``dia_id`` each store returned). PostgreSQL only: the in-memory backend
  keeps the memories inside the VectorIndex actor, out of this process's reach.

Conversations are ingested concurrently (different owners), each in turn order,
so a near-duplicate merges into the earlier turn as it would live. Dedup merges
are counted; a merged memory stands for the dia_ids of every turn it absorbed.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from dream_memory_actor.config import MemorySettings
from dream_memory_actor.embedding import CachedEmbedder
from dream_memory_actor.engine import MemoryEngine
from dream_memory_actor.models import StoreResult
from dream_memory_actor.storage import open_stores
from dream_memory_actor.storage.base import StructuredStore, VectorStore

from .embed_cache import DiskCachedEmbedder
from .locomo import Conversation, Turn, turn_context, turn_texts
from .progress import Progress
from .stats import percentiles_ms


@dataclass
class Corpus:
    """The stored turns: a store to search and what each memory stands for."""

    vector: VectorStore
    structured: StructuredStore
    settings: MemorySettings
    threshold: float
    ingest: str
    #: memory id -> the dia_ids of the turns stored into it
    dia_of: defaultdict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    #: memory id -> the session times of those turns
    times: defaultdict[str, list[datetime]] = field(default_factory=lambda: defaultdict(list))
    merges: int = 0
    #: stores judged an update of a memory, which they superseded (closed, in its history)
    supersessions: int = 0
    stores: int = 0
    ingest_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def record(self, turn: Turn, result: StoreResult) -> None:
        self.dia_of[result.memory.id].add(turn.dia_id)
        self.times[result.memory.id].append(turn.at)
        self.stores += 1
        self.merges += int(result.merged)
        self.supersessions += int(result.superseded)

    def describe(self) -> dict[str, Any]:
        return {"dedup_threshold": self.threshold, "ingest": self.ingest,
                "turns_stored": self.stores, "memories": len(self.dia_of),
                "merges": self.merges, "supersessions": self.supersessions,
                "ingest_s": round(self.ingest_s, 2),
                "stores_per_s": round(self.stores / self.ingest_s, 1) if self.ingest_s else None,
                **self.extra}

    async def close(self) -> None:
        """Drop the benchmark schema (PostgreSQL) and close the stores."""
        try:
            if self.settings.backend == "postgres":
                backend: Any = getattr(self.vector, "backend")  # noqa: B009 - postgres only
                async with backend.connection() as conn:
                    await conn.execute(
                        f"DROP SCHEMA IF EXISTS {self.settings.postgres_schema} CASCADE")
        finally:
            await self.structured.close()
            await self.vector.close()


def bench_settings(backend: str, dsn: str | None, threshold: float, model: str,
                   **extra: Any) -> MemorySettings:
    """Settings on a fresh schema (PostgreSQL; the embedded server without ``dsn``)."""
    kw: dict[str, Any] = {"backend": backend, "dedup_threshold": threshold,
                          "embedding_model": f"local:{model}",
                          "postgres_schema": f"bench_locomo_{uuid.uuid4().hex[:10]}", **extra}
    if dsn:
        kw["postgres_dsn"] = dsn
    settings = MemorySettings(**kw)
    if backend == "postgres":
        from dream_memory_actor.storage.postgres import with_embedded_dsn

        settings = with_embedded_dsn(settings)
    return settings


async def _open(settings: MemorySettings, dim: int) -> tuple[StructuredStore, VectorStore]:
    structured, vector = await open_stores(settings, dim)
    await structured.setup()
    await vector.setup()
    return structured, vector


async def ingest_engine(convs: Sequence[Conversation], settings: MemorySettings,
                        embedder: DiskCachedEmbedder, context: str = "none", turns: int = 1,
                        date: bool = True, *, many: bool = False,
                        batch: str = "session") -> Corpus:
    """Every turn through ``MemoryEngine.store`` with ``now=`` its session time; with a
    ``context`` mode (``locomo.turn_texts``), its context in its text or beside it.
    ``many``: each session's turns through one ``MemoryEngine.store_many`` instead, with
    ``now=`` the session's first turn's time (ingest ``store_many``); ``batch=
    "conversation"``: the whole conversation in one (an import of a history)."""
    structured, vector = await _open(settings, embedder.dim)
    engine = MemoryEngine(settings, structured, vector, CachedEmbedder(embedder, 50_000))
    corpus = Corpus(vector, structured, settings, settings.dedup_threshold,
                    "engine store_many" if many else "engine")

    bar = Progress("ingest (engine)", sum(len(c.turns) for c in convs))

    async def one(conv: Conversation) -> None:
        texts = turn_texts(conv, context, turns, date)
        sessions: dict[int, list[tuple[Turn, dict[str, Any]]]] = {}
        for i, (t, (text, _)) in enumerate(zip(conv.turns, texts, strict=True)):
            around = (turn_context(conv, i, turns, date) or None) if context == "beside" else None
            meta = {"dia_id": t.dia_id, "session": t.session}
            if many:
                sessions.setdefault(t.session if batch == "session" else 0, []).append(
                    (t, {"content": text, "metadata": meta, "context": around}))
                continue
            r = await engine.store(conv.owner, text, now=t.at, context=around, metadata=meta)
            corpus.record(t, r)
            bar.advance()
        for part in sessions.values():
            results = await engine.store_many(conv.owner, [item for _, item in part],
                                              now=part[0][0].at)
            for (t, _), r in zip(part, results, strict=True):
                corpus.record(t, r)
                bar.advance()

    t0 = time.perf_counter()
    try:
        with bar:
            await asyncio.gather(*(one(c) for c in convs))
    except BaseException:
        await corpus.close()
        raise
    corpus.ingest_s = time.perf_counter() - t0
    return corpus


async def ingest_actors(convs: Sequence[Conversation], settings: MemorySettings,
                        embedder: DiskCachedEmbedder, *, num_cpus: int = 2,
                        timed_searches: int = 200) -> Corpus:
    """Every turn through ``OwnerHandle.store_async`` on a ``MemorySystem`` (see module doc)."""
    if settings.backend != "postgres":
        raise ValueError("--ingest actors needs --backend postgres (the in-memory backend "
                         "keeps memories inside the VectorIndex actor)")
    import ray

    from dream_memory_actor.runtime.client import MemorySystem

    structured, vector = await _open(settings, embedder.dim)  # migrations, then the system
    corpus = Corpus(vector, structured, settings, settings.dedup_threshold, "actors")
    owns_ray = not ray.is_initialized()
    if owns_ray:
        ray.init(address="local", num_cpus=num_cpus, include_dashboard=False,
                 object_store_memory=200 * 1024 * 1024, logging_level=logging.ERROR)
    try:
        t0 = time.perf_counter()
        system = MemorySystem.start(settings, name=f"bench-locomo-{uuid.uuid4().hex[:6]}",
                                    embedder_factory=embedder)
        corpus.extra["system_start_s"] = round(time.perf_counter() - t0, 2)
        try:
            async def one(conv: Conversation) -> None:
                handle = system.owner(conv.owner)
                for t in conv.turns:
                    r = await handle.store_async(t.content, {"dia_id": t.dia_id,
                                                             "session": t.session})
                    corpus.record(t, r)

            t0 = time.perf_counter()
            await asyncio.gather(*(one(c) for c in convs))
            corpus.ingest_s = time.perf_counter() - t0
            corpus.extra["search_via_actors"] = await _actor_latency(system, convs,
                                                                     timed_searches)
        finally:
            system.shutdown(grace_period_s=1)
        await backdate(corpus)
    except BaseException:
        await corpus.close()
        raise
    finally:
        if owns_ray:
            ray.shutdown()
    return corpus


async def _actor_latency(system: Any, convs: Sequence[Conversation], n: int
                         ) -> dict[str, Any]:
    """Searches through the handles (the system's weights, wall-clock "now"): latency only."""
    qs = [(c.owner, q.question) for c in convs for q in c.questions][:n]
    lat = []
    for owner, text in qs:
        t0 = time.perf_counter()
        await system.owner(owner).search_async(text, 10)
        lat.append(time.perf_counter() - t0)
    return {**percentiles_ms(lat),
            "note": "OwnerHandle.search_async, limit 10, query vectors from the disk cache"}


async def backdate(corpus: Corpus) -> None:
    """Set each memory's created_at / updated_at to its turns' session times (PostgreSQL)."""
    rows = [(uuid.UUID(mid), min(ts), max(ts)) for mid, ts in corpus.times.items()]
    backend: Any = getattr(corpus.vector, "backend")  # noqa: B009 - postgres only
    s = corpus.settings.postgres_schema
    async with backend.transaction() as conn:
        await conn.executemany(
            f"UPDATE {s}.memories SET created_at = $2, updated_at = $3 WHERE id = $1", rows)
        await conn.executemany(f"UPDATE {s}.memory_text SET updated_at = $2 WHERE id = $1",
                               [(mid, updated) for mid, _, updated in rows])
    corpus.extra["backdated_memories"] = len(rows)
