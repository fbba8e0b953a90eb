"""The memory core in one process: stores, embedder and settings, no Ray.

``MemoryEngine`` is what the owner actors and the VectorIndex actor run inside;
it is also usable on its own in a single process (scripts, tests)::

    engine = await MemoryEngine.open(MemorySettings(backend="memory"))
    await engine.store("alice", "went live on Kubernetes with helm")
    hits = await engine.search("alice", "K8s deployment")
    await engine.close()
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import dataclasses
import functools
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from ..config import MemorySettings
from ..embedding import CachedEmbedder, open_embedder
from ..embedding.base import Embedder
from ..embedding.calibration import Calibration
from ..errors import (
    ConfigurationError,
    ItemNotFound,
    ItemSuperseded,
    MemoryNotFound,
    SystemClosed,
)
from ..extraction.service import ConsolidationReport, HitlDecision
from ..history import ItemHistory, StatusChange
from ..metrics import get_metrics
from ..models import (
    AuditAction,
    AuditEntry,
    EmbeddingModel,
    MemoryFact,
    MemoryPendingItem,
    MemoryRule,
    MemorySnapshot,
    MemoryVersion,
    SearchHit,
    StoreResult,
    Tombstone,
    VectorMemory,
    utcnow,
)
from ..rerank import Reranker, make_reranker, rerank_hits
from ..scoring import Weights
from ..storage import open_stores, recorded_model
from ..storage.base import StructuredStore, VectorStore
from ..storage.dedup import Ask, Band, Cuts
from ..storage.ops import L1Op
from ..storage.vector import model_mismatch
from ..text import MemoryText
from ..validation import limit as check_limit
from ..validation import owner_id as check_owner
from .erasure import forget_owner
from .reads import ReadLog

if TYPE_CHECKING:
    from ..extraction.pair_judge import ModelJudge

log = logging.getLogger(__name__)


def _raw(calibration: Calibration, calibrated: float, lang: str | None = None) -> float:
    return min(1.0, max(0.0, calibration.dedup_threshold(calibrated, lang)))


def write_cuts(settings: MemorySettings, calibration: Calibration | None,
               ask: Ask | None = None) -> Cuts:
    """The store's cuts: the settings' calibrated thresholds as raw cosines of the model,
    per script where its calibration has a curve per language."""
    para = settings.dedup_threshold
    cand = min(settings.dedup_candidate_threshold, para)

    def band(lang: str) -> Band:
        if calibration is None or calibration.is_identity:
            return Band(cand, para)
        return Band(_raw(calibration, cand, lang), _raw(calibration, para, lang))

    return Cuts(band("en"), band("zh"), settings.dedup_nearest, ask)


def with_model(settings: MemorySettings, recorded: EmbeddingModel | None) -> MemorySettings:
    """The settings to embed with in a store whose data records ``recorded``: its model
    when the settings name none; the settings as they are when they name the same one,
    or when nothing is recorded; ``EmbeddingModelMismatch`` when they name another."""
    if recorded is None:
        return settings
    if settings.embedding_model is None:
        return settings.model_copy(update={"embedding_model": recorded.model,
                                           "embedding_dim": recorded.dim})
    if not recorded.agrees(settings.embedding_model, settings.embedding_dim):
        raise model_mismatch(recorded, settings.embedding_model)
    return settings


async def open_embedding(settings: MemorySettings) -> tuple[MemorySettings, CachedEmbedder | None]:
    """The settings with the store's recorded model (:func:`with_model`) and its embedder,
    so every door that opens one store embeds with the model its data was made with."""
    settings = with_model(settings, await recorded_model(settings))
    return settings, await open_embedder(settings)


def embedding_model(settings: MemorySettings, embedder: CachedEmbedder | None
                    ) -> EmbeddingModel | None:
    """What a store written by this engine records (``None``: no embedder, or one the
    settings do not name, whose vectors are the caller's own)."""
    if embedder is None or settings.embedding_model is None:
        return None
    calibration = embedder.calibration
    return EmbeddingModel(model=settings.embedding_model, dim=embedder.dim,
                          calibration=None if calibration is None else calibration.to_json())


def judge_model(settings: MemorySettings) -> ModelJudge | None:
    """The language model that decides unsure pairs and words a consolidation's merges
    (``judge_model``), or ``None``."""
    if settings.judge_model is None:
        return None
    from ..extraction.pair_judge import ModelJudge

    return ModelJudge(settings)


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
        vector.embedding_model = embedding_model(settings, embedder)
        calibration = embedder.calibration if embedder is not None else None
        #: The hybrid weights, with the embedder's query calibration for the vector signal.
        self.weights: Weights = settings.weights
        #: ``settings.dedup_threshold`` (common scale) as a raw memory-to-memory cosine.
        self.dedup_threshold = settings.dedup_threshold
        if calibration is not None and not calibration.is_identity:
            self.weights = dataclasses.replace(self.weights, calibration=calibration.query)
            self.dedup_threshold = _raw(calibration, settings.dedup_threshold)
        #: What a store judges a new memory with (``storage.dedup.judge``).
        #: The model that decides unsure pairs and words merges (``None``: the rules).
        self.judge = judge_model(settings)
        self.cuts = write_cuts(settings, calibration, self.judge)
        #: Orders the best hits of a search (``rerank_model``; ``None``: off). Cheap to make:
        #: its model or client is loaded on the first search that uses it.
        self.reranker = reranker if reranker is not None else make_reranker(settings)
        self._closed = False
        self.metrics = get_metrics()
        #: Which memories searches found, written in batches (``engine.reads``).
        self.reads = ReadLog()
        self._reads_written: asyncio.Task[None] | None = None

    @classmethod
    async def open(cls, settings: MemorySettings | None = None, *, setup: bool = True,
                   embedder: Embedder | None = None, adopt: bool = False) -> MemoryEngine:
        """Open the configured stores and embedder; ``setup`` applies migrations.
        ``embedder``: embed with this one instead of the settings' model; its ``model``
        and ``dim`` are what the store records, and must agree with what it recorded.
        ``adopt``: the settings' model replaces the one recorded with the data, at once
        (to embed the memories again with it, :meth:`reembed`)."""
        settings = settings or MemorySettings()
        if adopt:
            if settings.embedding_model is None:
                raise ConfigurationError("a re-embedding needs embedding_model: the model "
                                         "to embed the memories with")
            cached = await open_embedder(settings)
        elif embedder is None:
            settings, cached = await open_embedding(settings)
        else:
            recorded = await recorded_model(settings)
            if recorded is not None and not recorded.agrees(embedder.model, embedder.dim):
                raise model_mismatch(recorded, embedder.model)
            cached = embedder if isinstance(embedder, CachedEmbedder) else CachedEmbedder(
                embedder)
        structured, vector = await open_stores(settings, cached.dim if cached else None)
        if setup:
            await structured.setup()
            await vector.setup()
        engine = cls(settings, structured, vector, cached)
        if adopt:
            if vector.embedding_model is not None:
                await vector._model(vector.embedding_model, replace=True)
        elif embedder is not None:
            vector.embedding_model = EmbeddingModel(model=embedder.model, dim=embedder.dim)
        return engine

    async def close(self) -> None:
        """Write the reads noted so far and close the stores. Safe to call twice."""
        if self._closed:
            return
        with contextlib.suppress(Exception):  # a store that fails now: only reads lost
            await self.write_reads()
        self._closed = True
        await self.structured.close()
        await self.vector.close()

    def _open(self) -> None:
        if self._closed:
            raise SystemClosed("this memory engine was closed")

    # -- L1 ------------------------------------------------------------------------

    # The stores check every argument of their writes and searches; ``load`` is
    # implemented by each backend directly, so it checks the owner id here.

    async def snapshot(self, owner: str, *, as_of: datetime | None = None) -> MemorySnapshot:
        """The owner's current snapshot; with ``as_of``, what it held at that time
        (rules, facts and status; see ``history.as_of``)."""
        self._open()
        if as_of is not None:
            return await self.structured.load_as_of(owner, as_of)
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

    # -- superseding and history ----------------------------------------------------
    #
    # Rules and facts here; an id that is neither is an ``ItemNotFound``. This is the
    # one place where an item id would be routed to another layer's items.

    async def supersede(self, owner: str, item_id: str, new_content: str, *, by: str,
                        reason: str | None = None, op_id: str | None = None
                        ) -> MemoryRule | MemoryFact | VectorMemory:
        """Replace the current rule or fact ``item_id`` by ``new_content`` (the old one is
        closed and kept in the history); the new item. Idempotent under ``op_id``. An id
        of a semantic memory is passed on to ``supersede_memory`` (a ``VectorMemory``)."""
        self._open()
        try:
            with self.metrics.operation("apply", self.settings.backend):
                return await self.structured.supersede(owner, item_id, new_content, by=by,
                                                       reason=reason, op_id=op_id)
        except ItemNotFound as exc:
            if isinstance(exc, ItemSuperseded) or not await self._is_memory(owner, item_id):
                raise
        return await self.supersede_memory(owner, item_id, new_content, by=by,
                                           reason=reason, op_id=op_id)

    async def _is_memory(self, owner: str, item_id: str) -> bool:
        try:
            await self.vector.get(owner, item_id)
        except MemoryNotFound:
            return False
        return True

    async def history(self, owner: str, item_id: str) -> ItemHistory:
        """The chain of versions of the rule or fact ``item_id``, oldest first."""
        self._open()
        return await self.structured.history(owner, item_id)

    async def status_history(self, owner: str, key: str) -> list[StatusChange]:
        """The kept values of status ``key``, oldest first (``None``: deleted)."""
        self._open()
        return await self.structured.status_history(owner, key)

    # -- L2 ------------------------------------------------------------------------

    async def embed(self, text: str, context: str | None = None) -> list[float] | None:
        """The vector of memory ``text`` with its ``context`` (``CachedEmbedder.
        embed_memories``), or ``None`` without an embedder (keyword-only)."""
        if self.embedder is None:
            return None
        return (await self.embedder.embed_memories([(text, context)]))[0]

    async def embed_many(self, memories: Sequence[MemoryText | str]
                         ) -> list[list[float]] | None:
        """The vectors of ``memories`` (a content, or a content and its context) in one
        batch call, or ``None`` (keyword-only)."""
        if self.embedder is None:
            return None
        return await self.embedder.embed_memories(memories)

    async def prepare(self, owner: str, memories: Sequence[MemoryText | str]) -> bool:
        """Embed the memories (content, context) of a coming write of ``owner`` into the
        embedder's cache, so the write, under the owner's lock, does not wait for the
        model; whether this engine embeds at all (``False``: keyword-only, nothing to
        prepare)."""
        if self.embedder is None:
            return False
        await self.embedder.embed_memories(list(memories))
        return True

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
        context: str | None = None,
    ) -> StoreResult:
        """Embed (unless ``embedding`` is given) and store: merged into a duplicate,
        superseding a memory it updates, or beside the others (``storage.dedup``).
        ``context`` (the turn before it, its date) is embedded and searched with the
        content and kept beside it (``VectorMemory.context``).

        A retry with the same ``op_id`` is applied once (and returns the first result).
        """
        self._open()
        with self.metrics.operation("store", self.settings.backend):
            result = await self.vector.store(
                owner, content, embedding=embedding, metadata=metadata,
                threshold=self.cuts, now=now, op_id=op_id, embed=self.embed, context=context,
            )
        self.metrics.judged(self.settings.backend, result.judgement)
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
        filter: Mapping[str, Any] | None = None,
    ) -> list[SearchHit]:
        """Hybrid search (keyword + time only without an embedder), best first;
        ``filter`` keeps the memories whose metadata has those values; with a reranker,
        its order over the best ``rerank_candidates`` (see ``rerank``)."""
        self._open()
        with self.metrics.operation("search", self.settings.backend):
            s = self.settings
            reranker = self.reranker
            fetch = limit if reranker is None else max(check_limit(limit), s.rerank_candidates)
            hits = await self.vector.search(
                owners, query, embedding=embedding, limit=fetch, weights=self.weights, now=now,
                vector_k=s.vector_candidates, keyword_k=s.keyword_candidates,
                min_score=min_score, embed=self.embed_query, filter=filter,
            )
            if reranker is not None:
                hits = (await rerank_hits(reranker, query, hits, candidates=s.rerank_candidates,
                                          on_error=s.rerank_on_error))[:limit]
        self._note_reads(hits)
        return hits

    def _note_reads(self, hits: Sequence[SearchHit]) -> None:
        """Note what a search found; write the batch in the background once it is due."""
        self.reads.note(((h.memory.owner, h.memory.id) for h in hits), utcnow())
        if self.reads.due and (self._reads_written is None or self._reads_written.done()):
            self._reads_written = asyncio.get_running_loop().create_task(self.write_reads())

    async def write_reads(self) -> None:
        """Write the reads noted so far (``VectorStore.note_reads``), one write per owner;
        a batch that fails is dropped (reads only inform expiry) and logged."""
        for owner, reads in self.reads.take().items():
            try:
                await self.vector.note_reads(owner, reads)
            except Exception:
                log.warning("recording which memories were read failed", exc_info=True)

    async def get(self, owner: str, memory_id: str) -> VectorMemory:
        self._open()
        return await self.vector.get(owner, memory_id)

    async def delete(self, owner: str, memory_id: str) -> bool:
        self._open()
        return await self.vector.delete(owner, memory_id)

    async def list(self, owner: str, *, limit: int = 100, offset: int = 0,
                   filter: Mapping[str, Any] | None = None) -> list[VectorMemory]:
        self._open()
        return await self.vector.list(owner, limit=limit, offset=offset, filter=filter)

    # -- the owner as a whole --------------------------------------------------------

    async def forget(self, owner: str, *, by: str, op_id: str | None = None,
                     memories: Callable[[str], Awaitable[int]] | None = None) -> Tombstone:
        """Erase everything of ``owner`` on every layer (see ``erasure``) and
        return the tombstone left in its place; a retry with the same ``op_id``
        returns the same tombstone. ``by`` names who asked for it; ``memories`` is how
        the L2 layer is erased (``forget_memories`` here, the VectorIndex's in a
        memory system)."""
        self._open()
        with self.metrics.operation("forget", self.settings.backend):
            return await forget_owner(self.structured, memories or self.forget_memories,
                                      owner, by=by, op_id=op_id)

    async def forget_memories(self, owner: str) -> int:
        """Erase ``owner``'s L2 layer only; how many memories went."""
        self._open()
        return await self.vector.forget(owner)

    async def export(self, owner: str) -> builtins.list[str]:
        """The owner's export document, line by line (see ``portability``)."""
        from .portability import export_owner

        self._open()
        return await export_owner(self, owner)

    async def import_document(self, lines: Iterable[str | bytes]) -> dict[str, int]:
        """Import an export document into its owner, which must be empty; how many
        records of each kind were written (see ``portability``)."""
        from .portability import import_owner

        self._open()
        return await import_owner(self, lines)

    async def store_many(self, owner: str, items: Sequence[str | Mapping[str, Any]], *,
                         now: datetime | None = None, op_id: str | None = None
                         ) -> builtins.list[StoreResult]:
        """Store a batch (texts or ``{"content", "metadata"}`` mappings) as ``store`` each
        would, embedded in one batch call and written at once; one result per item."""
        self._open()
        with self.metrics.operation("store_many", self.settings.backend):
            results = await self.vector.store_many(
                owner, items, threshold=self.cuts, now=now, op_id=op_id,
                embed_many=self.embed_many)
        for r in results:
            self.metrics.judged(self.settings.backend, r.judgement)
        return results

    async def update(self, owner: str, memory_id: str, content: str, *,
                     metadata: Mapping[str, Any] | None = None, now: datetime | None = None,
                     op_id: str | None = None, context: str | None = None) -> VectorMemory:
        """Change a memory's content (re-embedded) and, when given, its metadata and
        context; the previous version stays in its history (``memory_history``)."""
        self._open()
        with self.metrics.operation("update", self.settings.backend):
            return await self.vector.update(owner, memory_id, content, metadata=metadata,
                                            now=now, op_id=op_id, embed=self.embed,
                                            context=context)

    async def supersede_memory(self, owner: str, memory_id: str, content: str, *,
                               metadata: Mapping[str, Any] | None = None,
                               by: str | None = None, reason: str | None = None,
                               now: datetime | None = None, op_id: str | None = None,
                               context: str | None = None) -> VectorMemory:
        """Replace a memory by a new one and close the old, in one step; the new one."""
        self._open()
        with self.metrics.operation("supersede", self.settings.backend):
            return await self.vector.supersede_memory(
                owner, memory_id, content, metadata=metadata, by=by, reason=reason, now=now,
                op_id=op_id, embed=self.embed, context=context)

    # -- consolidation ----------------------------------------------------------------

    async def propose(self, owner: str, *, now: datetime | None = None
                      ) -> builtins.list[MemoryPendingItem]:
        """What a consolidation pass proposes for ``owner`` (``engine.consolidation``):
        corrections of its rules and facts, expiries of its old status values, then
        changes of its memories; unqueued, none already queued, and none decided before
        for the same items (an undone proposal is queued again by its undo, so it
        counts as queued, or as decided there)."""
        from ..storage.ops import pending_fingerprint
        from . import consolidation

        self._open()
        s = self.settings
        at = now or utcnow()
        owner = check_owner(owner)
        await self.write_reads()  # what this process's searches found counts too
        items = await self.vector.dump(owner)
        snap = await self.structured.load(owner)
        # Decided before, or waiting: not again. An undone proposal was queued again by
        # its undo: waiting, or decided there (or lapsed undecided, and so made again).
        trail = await self.structured.audit(owner, limit=None)
        undone = {e.pending_id for e in trail if e.action == "undone"}
        seen = {pending_fingerprint(e.item) for e in trail if e.pending_id not in undone}
        seen.update(pending_fingerprint(p) for p in snap.pending)
        ttl = s.pending_ttl_s
        until = None if ttl is None else at + timedelta(seconds=ttl)
        l1 = [*consolidation.corrections(snap.rules, skip=seen, expires_at=until),
              *consolidation.corrections(snap.facts, skip=seen, expires_at=until)]
        cut = consolidation.expiry_cut(at, s.consolidation_expire_after_days)
        if cut is not None and snap.status:
            _, changes = await self.structured.past(owner)
            l1 += consolidation.status_expiries(snap.live(at), changes, cut, skip=seen,
                                                expires_at=until)
        return l1 + await consolidation.proposals(
            items, self.cuts, skip=seen, most=s.consolidation_max_proposals,
            expire_before=cut,
            reads=await self.vector.last_reads(owner),
            expires_at=until, phrase=None if self.judge is None else functools.partial(
                self.judge.phrase, max_bytes=s.max_content_bytes))

    async def consolidate(self, owner: str, *, apply_all: bool = False,
                          by: str = "consolidation") -> ConsolidationReport:
        """Run a consolidation pass over ``owner`` in this process: its proposals queued
        for a person's decision, or confirmed at once by ``by`` (``apply_all``); see
        ``ExtractionService.consolidate``."""
        from ..extraction.service import ExtractionService

        return await ExtractionService.for_engine(self).consolidate(owner, apply_all=apply_all,
                                                                    by=by)

    async def last_changes(self) -> dict[str, datetime]:
        """When each owner's memories last changed (the newest ``updated_at``), for the
        owners that have memories: what a schedule of passes looks at."""
        self._open()
        out: dict[str, datetime] = {}
        for owner in await self.vector.owners():
            newest = await self.vector.list(owner, limit=1)
            if newest:
                out[owner] = newest[0].updated_at
        return out

    async def apply_proposal(self, owner: str, item: MemoryPendingItem, *, by: str,
                             edited: str | None = None) -> str | None:
        """Make the change the queued proposal ``item`` describes (see
        ``VectorStore.apply_proposal``); a person's confirmation calls it. The id of
        the memory kept (``None``: an expiry)."""
        self._open()
        with self.metrics.operation("apply", self.settings.backend):
            return await self.vector.apply_proposal(owner, item, by=by, edited=edited,
                                                    embed=self.embed)

    async def unapply_proposal(self, owner: str, pending_id: str) -> int:
        """Reverse an applied proposal's change of the memories exactly
        (``VectorStore.undo_proposal``), recording nothing; how many memories came back.
        ``undo_proposal`` calls it, then records the undo."""
        self._open()
        with self.metrics.operation("apply", self.settings.backend):
            return await self.vector.undo_proposal(owner, pending_id)

    async def undo_decision(self, owner: str, pending_id: str, by: str, *, restored: int,
                            expires_at: datetime | None = None, op_id: str | None = None
                            ) -> tuple[MemorySnapshot, AuditEntry] | None:
        """Record the undo of the confirmed proposal ``pending_id`` and queue it again
        (``StructuredStore.undo_decision``); ``undo_proposal`` calls it."""
        self._open()
        with self.metrics.operation("apply", self.settings.backend):
            done = await self.structured.undo_decision(owner, pending_id, by, restored=restored,
                                                       expires_at=expires_at, op_id=op_id)
        if done is not None:
            self.metrics.observe_pending(owner, len(done[0].pending))
        return done

    async def undo_proposal(self, owner: str, pending_id: str, *, by: str) -> HitlDecision:
        """Undo the confirmed proposal ``pending_id`` in this process and record it: see
        ``ExtractionService.undo_proposal``."""
        from ..extraction.service import ExtractionService

        return await ExtractionService.for_engine(self).undo_proposal(owner, pending_id, by=by)

    async def reembed(self, owner: str) -> int:
        """Embed every memory of ``owner`` again with this engine's model (an engine
        opened with ``adopt=True``); how many. See ``VectorStore.reembed``."""
        self._open()
        with self.metrics.operation("reembed", self.settings.backend):
            return await self.vector.reembed(owner, self.embed_many)

    async def memory_history(self, owner: str, memory_id: str
                             ) -> builtins.list[MemoryVersion]:
        """The versions of a memory's chain, oldest first, the current one last."""
        self._open()
        return await self.vector.memory_history(owner, memory_id)
