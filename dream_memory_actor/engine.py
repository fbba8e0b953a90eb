"""The memory core in one process: stores, embedder and settings, no Ray.

``MemoryEngine`` is what the owner actors and the VectorIndex actor run inside;
it is also usable on its own in a single process (scripts, tests)::

    engine = await MemoryEngine.open(MemorySettings(backend="memory"))
    await engine.store("alice", "went live on Kubernetes with helm")
    hits = await engine.search("alice", "K8s deployment")
    await engine.close()
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from .config import MemorySettings
from .embedding import CachedEmbedder, open_embedder
from .errors import SystemClosed
from .metrics import get_metrics
from .models import AuditAction, AuditEntry, MemorySnapshot, SearchHit, StoreResult, VectorMemory
from .rerank import Reranker, make_reranker, rerank_hits
from .scoring import Weights
from .storage import open_stores
from .storage.base import StructuredStore, VectorStore
from .storage.ops import L1Op
from .validation import limit as check_limit
from .validation import owner_id as check_owner


class MemoryEngine:
    """Structured store + vector store + optional embedder, configured by one settings object."""

    def __init__(
        self,
        settings: MemorySettings,
        structured: StructuredStore,
        vector: VectorStore,
        embedder: CachedEmbedder | None = None,
        reranker: Reranker | None = None,
    ) -> None:
        self.settings = settings
        self.structured = structured
        self.vector = vector
        self.embedder = embedder
        calibration = embedder.calibration if embedder is not None else None
        #: The hybrid weights, with the embedder's query calibration for the vector signal.
        self.weights: Weights = settings.weights
        #: ``settings.dedup_threshold`` (common scale) as a raw memory-to-memory cosine.
        self.dedup_threshold = settings.dedup_threshold
        if calibration is not None and not calibration.is_identity:
            self.weights = dataclasses.replace(self.weights, calibration=calibration.query)
            self.dedup_threshold = min(1.0, max(0.0, calibration.dedup_threshold(
                settings.dedup_threshold)))
        #: Orders the best hits of a search (``rerank_model``; ``None``: off). Cheap to make:
        #: its model or client is loaded on the first search that uses it.
        self.reranker = reranker if reranker is not None else make_reranker(settings)
        self._closed = False
        self.metrics = get_metrics()

    @classmethod
    async def open(cls, settings: MemorySettings | None = None, *, setup: bool = True
                   ) -> MemoryEngine:
        """Open the configured stores and embedder; ``setup`` applies migrations."""
        settings = settings or MemorySettings()
        embedder = await open_embedder(settings)
        structured, vector = await open_stores(settings, embedder.dim if embedder else None)
        if setup:
            await structured.setup()
            await vector.setup()
        return cls(settings, structured, vector, embedder)

    async def close(self) -> None:
        """Close the stores. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        await self.structured.close()
        await self.vector.close()

    def _open(self) -> None:
        if self._closed:
            raise SystemClosed("this memory engine was closed")

    # -- L1 ------------------------------------------------------------------------

    # The stores check every argument of their writes and searches; ``load`` and ``get``
    # are implemented by each backend directly, so those two check the owner id here.

    async def snapshot(self, owner: str) -> MemorySnapshot:
        self._open()
        with self.metrics.operation("snapshot", self.settings.backend):
            snap = await self.structured.load(check_owner(owner))
        self.metrics.observe_pending(owner, len(snap.pending))
        return snap

    async def apply(self, owner: str, ops: Sequence[L1Op], *, now: datetime | None = None,
                    op_id: str | None = None) -> MemorySnapshot:
        """Apply ``ops`` atomically; a retry with the same ``op_id`` is applied once."""
        self._open()
        with self.metrics.operation("apply", self.settings.backend):
            snap = await self.structured.apply(owner, ops, now=now, op_id=op_id)
        self.metrics.observe_pending(owner, len(snap.pending))
        return snap

    async def decide(self, owner: str, pending_id: str, action: AuditAction, by: str, *,
                     edited: str | None = None, op_id: str | None = None
                     ) -> tuple[MemorySnapshot, AuditEntry] | None:
        """A person's decision on a queued item with its audit entry (``apply`` cannot
        write one); ``None`` if it is not queued. Confirm and reject call it."""
        self._open()
        with self.metrics.operation("apply", self.settings.backend):
            done = await self.structured.decide(owner, pending_id, action, by, edited=edited,
                                                op_id=op_id)
        if done is not None:
            self.metrics.observe_pending(owner, len(done[0].pending))
        return done

    # -- L2 ------------------------------------------------------------------------

    async def embed(self, text: str) -> list[float] | None:
        """The embedding of memory ``text``, or ``None`` without an embedder (keyword-only)."""
        if self.embedder is None:
            return None
        return await self.embedder.embed_one(text)

    async def embed_query(self, text: str) -> list[float] | None:
        """The embedding of search query ``text`` (the query role), or ``None``."""
        if self.embedder is None:
            return None
        return await self.embedder.embed_query_one(text)

    async def store(
        self,
        owner: str,
        content: str,
        *,
        metadata: Mapping[str, Any] | None = None,
        now: datetime | None = None,
        embedding: Sequence[float] | None = None,
        op_id: str | None = None,
    ) -> StoreResult:
        """Embed (unless ``embedding`` is given) and store, merging near-duplicates
        (calibrated cosine above ``dedup_threshold``).

        A retry with the same ``op_id`` is applied once (and returns the first result).
        """
        self._open()
        with self.metrics.operation("store", self.settings.backend):
            result = await self.vector.store(
                owner, content, embedding=embedding, metadata=metadata,
                threshold=self.dedup_threshold, now=now, op_id=op_id, embed=self.embed,
            )
        if result.merged:
            self.metrics.merge(self.settings.backend)
        return result

    async def search(
        self,
        owners: str | Sequence[str],
        query: str,
        *,
        limit: int = 10,
        now: datetime | None = None,
        min_score: float = 0.0,
        embedding: Sequence[float] | None = None,
    ) -> list[SearchHit]:
        """Hybrid search (keyword + time only without an embedder), best first; with a
        reranker, its order over the best ``rerank_candidates`` (see ``rerank``)."""
        self._open()
        with self.metrics.operation("search", self.settings.backend):
            s = self.settings
            reranker = self.reranker
            fetch = limit if reranker is None else max(check_limit(limit), s.rerank_candidates)
            hits = await self.vector.search(
                owners, query, embedding=embedding, limit=fetch, weights=self.weights, now=now,
                vector_k=s.vector_candidates, keyword_k=s.keyword_candidates,
                min_score=min_score, embed=self.embed_query,
            )
            if reranker is None:
                return hits
            ranked = await rerank_hits(reranker, query, hits, candidates=s.rerank_candidates,
                                       on_error=s.rerank_on_error)
            return ranked[:limit]

    async def get(self, owner: str, memory_id: str) -> VectorMemory:
        self._open()
        return await self.vector.get(check_owner(owner), memory_id)

    async def delete(self, owner: str, memory_id: str) -> bool:
        self._open()
        return await self.vector.delete(owner, memory_id)

    async def list(self, owner: str, *, limit: int = 100, offset: int = 0) -> list[VectorMemory]:
        self._open()
        return await self.vector.list(owner, limit=limit, offset=offset)
