"""The vector (L2) storage interface: semantic memories, dedup-merge, hybrid search.

A backend implements a handful of primitives; validation, the search flow (query
terms, their rarity weights, candidates, exact ranking) and the dedup semantics
live here, once, so every backend ranks the same data the same way. Public methods
validate their arguments before any I/O and raise ``InvalidInput`` subclasses;
nothing is written when they do.
"""

from __future__ import annotations

import builtins
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from .. import validation as check
from ..errors import EmbeddingModelMismatch, InvalidQuery, MemoryNotFound
from ..models import EmbeddingModel, MemoryVersion, SearchHit, StoreResult, VectorMemory, utcnow
from ..scoring import (
    DEFAULT_WEIGHTS,
    Candidate,
    TermStats,
    Weights,
    rank,
    strongest_terms,
    term_weights,
    to_hit,
)
from ..text import query_terms
from ..validation import l2 as check_l2
from .dedup import Cuts
from .lifecycle import _Lifecycle
from .vector_l2 import VersionedL2, check_cuts

#: Computes the embedding of checked text when the caller gives none (``MemoryEngine.embed``).
Embed = Callable[[str], Awaitable["list[float] | None"]]


class VectorStore(VersionedL2, _Lifecycle, ABC):
    """L2: semantic memories with dedup-merge on store and hybrid search; batches,
    updates and supersessions with their history (``vector_l2``)."""

    #: Dimension of stored embeddings; ``None`` means keyword-only (no embedder).
    dim: int | None = None
    #: The model this process embeds memories with (set by the engine that opened the
    #: store); the first write of a vector records it with the data
    #: (:meth:`recorded_model`). ``None``: vectors are given, and nothing is recorded.
    embedding_model: EmbeddingModel | None = None
    _model_recorded: bool = False

    # -- primitives a backend implements ------------------------------------------

    # (``_store`` and ``_get`` are declared in ``vector_l2.VersionedL2``, which uses them.)

    @abstractmethod
    async def _term_stats(self, owners: Sequence[str], terms: Sequence[str]) -> TermStats:
        """How many memories ``owners`` hold, and how many of them have each of ``terms``
        among their ``text.terms`` (kept by the backend with every write)."""

    @abstractmethod
    async def _candidates(
        self,
        owners: Sequence[str],
        terms: Sequence[str],
        embedding: list[float] | None,
        *,
        vector_k: int,
        keyword_k: int,
        weights: Sequence[float],
        stats: TermStats,
        where: Mapping[str, Any] | None = None,
    ) -> list[Candidate]:
        """Up to ``vector_k`` nearest memories by cosine (when ``embedding``) plus up to
        ``keyword_k`` memories in ``scoring.keyword_order`` (highest sum of the
        ``weights`` of the ``terms`` they contain, then newest, then smallest id), each
        once, with its cosine. ``stats`` are those the weights came from. With
        ``where``, only memories whose metadata ``versions.matches`` it, chosen before
        the ``k`` cuts."""

    @abstractmethod
    async def _recorded(self) -> EmbeddingModel | None:
        """The model recorded with this store's data, or ``None`` (none recorded, or a
        store not set up yet)."""

    @abstractmethod
    async def _record(self, model: EmbeddingModel) -> None:
        """Record ``model`` unless one is recorded already (atomically: of two processes
        recording at once, one wins)."""

    @abstractmethod
    async def _delete(self, owner: str, memory_id: str) -> bool:
        """Delete; ``False`` if there was no such memory."""

    @abstractmethod
    async def _list(self, owner: str, limit: int, offset: int,
                    where: Mapping[str, Any] | None = None) -> list[VectorMemory]:
        """Memories of ``owner``, newest first (those that ``versions.matches`` ``where``)."""

    @abstractmethod
    async def count(self, owner: str) -> int:
        """How many memories ``owner`` has."""

    @abstractmethod
    async def _dump(self, owner: str) -> builtins.list[tuple[VectorMemory, list[float] | None]]:
        """Every memory of ``owner`` with its embedding (``None`` if it has none)."""

    @abstractmethod
    async def _restore(self, owner: str,
                       items: Sequence[tuple[VectorMemory, list[float] | None]]) -> None:
        """Insert ``items`` as they are (ids, times, metadata; no dedup) for an owner
        that has no memories, atomically where the backend has transactions."""

    @abstractmethod
    async def _all_versions(self, owner: str) -> builtins.list[MemoryVersion]:
        """Every closed version of the owner's memories (updates and supersessions)."""

    @abstractmethod
    async def _restore_versions(self, owner: str, versions: Sequence[MemoryVersion]) -> None:
        """Write exported closed versions as they were, for an owner being imported."""

    @abstractmethod
    async def _forget(self, owner: str) -> int:
        """Delete the owner's memories, their embeddings, texts, term counts and
        operation ids; return how many memories went. Safe to repeat."""

    # -- the public, validated API ------------------------------------------------

    async def recorded_model(self) -> EmbeddingModel | None:
        """The model this store's memory vectors were made with (``None``: none recorded;
        the store is keyword-only until a process that embeds writes to it)."""
        return await self._recorded()

    async def _record_model(self, vectors: bool) -> None:
        """Before a write of vectors: record this process's model with the data, or refuse
        the write when another model was recorded first (``EmbeddingModelMismatch``)."""
        mine = self.embedding_model
        if not vectors or mine is None or self._model_recorded:
            return
        await self._record(mine)
        recorded = await self._recorded()
        assert recorded is not None  # recorded just now, or by another process before
        if not recorded.agrees(mine.model, mine.dim):
            raise model_mismatch(recorded, mine.model)
        self._model_recorded = True

    async def store(
        self,
        owner: str,
        content: str,
        *,
        embedding: Sequence[float] | None = None,
        metadata: Mapping[str, Any] | None = None,
        threshold: float | Cuts = 0.85,
        now: datetime | None = None,
        op_id: str | None = None,
        embed: Embed | None = None,
    ) -> StoreResult:
        """Store ``content`` for ``owner``, judged against its nearest memories
        (``dedup.judge``): merged into a duplicate, superseding a memory it updates,
        or stored beside them. ``threshold``: the store's :class:`~.dedup.Cuts`, or one
        raw cosine for every cut (``Cuts.uniform``).

        ``op_id`` makes the call idempotent: a retry with the same id is applied once.
        Without ``embedding``, ``embed`` (if given) computes it from the checked text,
        so nothing is embedded for a call that is refused.
        """
        check.owner_id(owner)
        if op_id is not None:
            check.op_id(op_id)
        text = check.content(content, self.max_content_bytes)
        meta = check.metadata(metadata, self.limits)
        if embedding is None and embed is not None:
            embedding = await embed(text)
        vec = self._check_embedding(embedding)
        await self._record_model(vec is not None)
        return await self._store(owner, text, vec, meta, cuts=check_cuts(threshold),
                                 now=now or utcnow(), op_id=op_id)

    async def search(
        self,
        owners: str | Sequence[str],
        query: str,
        *,
        embedding: Sequence[float] | None = None,
        limit: int = 10,
        weights: Weights = DEFAULT_WEIGHTS,
        now: datetime | None = None,
        vector_k: int = 100,
        keyword_k: int = 100,
        min_score: float = 0.0,
        embed: Embed | None = None,
        filter: Mapping[str, Any] | None = None,
    ) -> list[SearchHit]:
        """Hybrid search over the memories of one or several owners, best first.

        Without ``embedding``, ``embed`` (if given) computes it from the checked query.
        ``filter`` (``{"agent": "deploy"}``) keeps the memories whose metadata has
        those values; the backend applies it before choosing candidates.
        """
        who = check.owner_ids(owners)
        where = check_l2.metadata_filter(filter)
        text = check.content(query, self.max_content_bytes, what="query")
        n = check.limit(limit)
        floor = check.unit_interval(min_score, "min_score")
        if embedding is None and embed is not None:
            embedding = await embed(text)
        vec = self._check_embedding(embedding)
        q_terms, t_weights, cands = await self._weighted_candidates(
            who, text, vec, vector_k=max(vector_k, n), keyword_k=max(keyword_k, n),
            where=where,
        )
        hybrid = vec is not None
        best = rank(cands, q_terms, now or utcnow(), weights, n, hybrid=hybrid, min_score=floor,
                    term_weights=t_weights)
        return [to_hit(s, self._materialize(s.candidate.payload), hybrid) for s in best]

    async def weighted_terms(self, owners: Sequence[str], query: str
                             ) -> tuple[builtins.list[str], builtins.list[float], TermStats]:
        """The terms a search of ``query`` over ``owners`` looks for, their weights and the
        statistics behind them: ``text.query_terms``, weighted by ``scoring.term_weights``,
        at most ``scoring.MAX_QUERY_TERMS`` kept (``scoring.strongest_terms``).
        ``owners`` and ``query`` are expected validated (as ``search`` does)."""
        found = query_terms(query)
        if not found:
            return [], [], TermStats(0, {})
        stats = await self._term_stats(owners, found)
        kept, kept_weights = strongest_terms(found, term_weights(found, stats), stats)
        return kept, kept_weights, stats

    async def _weighted_candidates(
        self,
        owners: Sequence[str],
        query: str,
        embedding: builtins.list[float] | None,
        *,
        vector_k: int,
        keyword_k: int,
        where: Mapping[str, Any] | None = None,
    ) -> tuple[builtins.list[str], builtins.list[float], builtins.list[Candidate]]:
        """The terms and weights of :meth:`weighted_terms` and the :meth:`_candidates`
        they give. A backend that reads both in one round trip overrides it, with the
        same results."""
        q_terms, t_weights, stats = await self.weighted_terms(owners, query)
        cands = await self._candidates(owners, q_terms, embedding, vector_k=vector_k,
                                       keyword_k=keyword_k, weights=t_weights, stats=stats,
                                       where=where)
        return q_terms, t_weights, cands

    async def dump(self, owner: str) -> builtins.list[tuple[VectorMemory, list[float] | None]]:
        """Every memory of ``owner`` with its embedding, oldest first (for export)."""
        items = await self._dump(check.owner_id(owner))
        return sorted(items, key=lambda i: (i[0].created_at, i[0].id))

    async def restore(self, owner: str,
                      items: Sequence[tuple[VectorMemory, Sequence[float] | None]]) -> int:
        """Insert exported memories as they were (ids, times, metadata, embeddings;
        no dedup) into ``owner``, which must have none (``OwnerNotEmpty``). Every item
        is checked (``check_restore``) before anything is written; how many were written."""
        from ..errors import OwnerNotEmpty

        checked = self.check_restore(owner, items)
        if await self.count(owner):
            raise OwnerNotEmpty(f"owner {owner!r} has memories already; forget it first")
        if checked:
            await self._record_model(any(v is not None for _, v in checked))
            await self._restore(owner, checked)
        return len(checked)

    async def versions(self, owner: str) -> builtins.list[MemoryVersion]:
        """Every closed version of ``owner``'s memories, oldest closed first (for export)."""
        found = await self._all_versions(check.owner_id(owner))
        return sorted(found, key=lambda v: (v.valid_to or v.valid_from, v.valid_from, v.id))

    async def restore_versions(self, owner: str, versions: Sequence[MemoryVersion]) -> None:
        """Write exported closed versions of ``owner``'s memories as they were (an import
        right after ``restore``), checked first (``check_versions``)."""
        self.check_versions(owner, versions)
        if versions:
            await self._restore_versions(owner, list(versions))

    def check_versions(self, owner: str, versions: Sequence[MemoryVersion]) -> None:
        """``InvalidInput`` for a version ``restore_versions`` would refuse: of another
        owner, not closed, an id that is not a UUID, content or metadata over the limits."""
        import uuid

        from ..errors import InvalidImport

        check.owner_id(owner)
        for v in versions:
            if v.owner != owner:
                raise InvalidImport(f"a memory version of owner {v.owner!r} among {owner!r}'s")
            if v.valid_to is None or v.change is None:
                raise InvalidImport(f"memory version {v.id!r} is not closed")
            try:
                for i in (v.id, v.memory_id, v.superseded_by):
                    if i is not None:
                        uuid.UUID(i)
            except ValueError:
                raise InvalidImport(f"memory version {v.id!r} has an id that is not a UUID"
                                    ) from None
            check.content(v.content, self.max_content_bytes)
            check.stored_metadata(v.metadata, self.limits)

    def check_restore(self, owner: str,
                      items: Sequence[tuple[VectorMemory, Sequence[float] | None]]
                      ) -> builtins.list[tuple[VectorMemory, list[float] | None]]:
        """The items ``restore`` would write, checked; ``InvalidInput`` if one is not fit."""
        import uuid

        from ..errors import InvalidImport

        check.owner_id(owner)
        checked: builtins.list[tuple[VectorMemory, list[float] | None]] = []
        seen: set[str] = set()
        for mem, emb in items:
            if mem.owner != owner:
                raise InvalidImport(f"a memory of owner {mem.owner!r} among those of {owner!r}")
            try:
                uuid.UUID(mem.id)
            except ValueError:
                raise InvalidImport(f"memory id {mem.id!r} is not a UUID") from None
            if mem.id in seen:
                raise InvalidImport(f"memory id {mem.id!r} appears twice")
            seen.add(mem.id)
            text = check.content(mem.content, self.max_content_bytes)
            meta = check.stored_metadata(mem.metadata, self.limits)
            vec = self._check_embedding(emb)
            checked.append((mem.model_copy(update={"content": text, "metadata": meta,
                                                   "has_embedding": vec is not None}), vec))
        return checked

    async def forget(self, owner: str) -> int:
        """Remove ``owner``'s L2 layer (see ``StructuredStore.forget`` for the rest);
        return how many memories went."""
        return await self._forget(check.owner_id(owner))

    def _materialize(self, payload: Any) -> VectorMemory:
        """The memory a candidate's payload stands for (backends with raw rows override)."""
        if not isinstance(payload, VectorMemory):
            raise TypeError(f"{type(self).__name__} must override _materialize")
        return payload

    async def get(self, owner: str, memory_id: str) -> VectorMemory:
        """One current memory of ``owner``, or ``MemoryNotFound`` (``MemorySuperseded``
        for one that was superseded: its history still has it)."""
        check.owner_id(owner)
        check.ids([memory_id], "memory id")
        try:
            return await self._get(owner, memory_id)
        except MemoryNotFound as exc:
            await self._not_live(owner, memory_id, exc)
            raise

    async def delete(self, owner: str, memory_id: str) -> bool:
        check.owner_id(owner)
        check.ids([memory_id], "memory id")
        return await self._delete(owner, memory_id)

    async def list(self, owner: str, *, limit: int = 100, offset: int = 0,
                   filter: Mapping[str, Any] | None = None,
                   ) -> list[VectorMemory]:
        """Current memories of ``owner``, newest first; ``filter`` as in :meth:`search`."""
        check.owner_id(owner)
        n, skip = check.limit(limit), check.offset(offset)
        where = check_l2.metadata_filter(filter)
        return await self._list(owner, n, skip, where=where)

    def _check_embedding(self, embedding: Sequence[float] | None
                         ) -> builtins.list[float] | None:
        if embedding is None:
            return None
        if self.dim is None:
            raise InvalidQuery("this store has no embedding dimension (keyword-only); "
                               "configure embedding_model to store embeddings")
        return check.embedding(embedding, self.dim)


def model_mismatch(recorded: EmbeddingModel, configured: str) -> EmbeddingModelMismatch:
    """The refusal to mix ``configured``'s vectors with those of the ``recorded`` model."""
    return EmbeddingModelMismatch(
        f"this store's memories are embedded with {recorded.model!r} ({recorded.dim} "
        f"dimensions, recorded {recorded.recorded_at:%Y-%m-%d}), and this process is "
        f"configured with {configured!r}; their cosines are not one scale. Leave "
        f"embedding_model unset (DREAM_MEMORY_EMBEDDING_MODEL) to use the store's model, "
        f"or move the owners to a store of {configured!r}: `dream-memory export`, then "
        f"`dream-memory import` there, which re-embeds them")
