"""The vector (L2) storage interface: semantic memories, judged on store, hybrid search.

A backend implements seven primitives: ``_write`` (a plan's writes, atomic under the
owner's writer and idempotent under an operation id), ``_rows`` and ``_versions``
(the owner's live memories and their closed versions), ``_model`` (the embedding
model recorded with the data), ``_owners``, ``_reads`` (when memories were last
read) and ``_forget``. Everything else is composed here, once: validation, the
judged store and its batches (``writes.Plan``), updates, supersessions, deletes,
imports, histories, filters and the search flow (query terms, their rarity weights,
candidates, exact ranking), so every backend stores and ranks the same data the
same way. What a search ranks (``_term_stats``, ``_candidates``) is composed from
``_rows`` by reading every row (``owner_rows.candidates`` over them); each backend
overrides those two with the rows it keeps or its indexes, to the same results.
Public methods validate their arguments before any I/O and raise ``InvalidInput``
subclasses; nothing is written when they do.
"""

from __future__ import annotations

import asyncio
import builtins
import json
import uuid
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar, cast

import numpy as np

from .. import validation as check
from ..errors import (
    EmbeddingModelMismatch,
    InvalidBatch,
    InvalidImport,
    InvalidInput,
    InvalidQuery,
    MemoryNotFound,
    MemorySuperseded,
    OwnerNotEmpty,
    ProposalChanged,
    ProposalNotApplied,
)
from ..models import (
    PROPOSAL_KINDS,
    EmbeddingModel,
    MemoryPendingItem,
    MemoryVersion,
    SearchHit,
    StoreResult,
    VectorMemory,
    utcnow,
)
from ..scoring import (
    DEFAULT_WEIGHTS,
    Candidate,
    TermStats,
    Weights,
    keyword_score_folded,
    rank,
    strongest_terms,
    term_weights,
    to_hit,
)
from ..text import MemoryText, fold, query_terms
from ..validation import l2 as check_l2
from . import versions
from .dedup import Cuts, absorbed
from .lifecycle import _Lifecycle
from .owner_rows import OwnerRows, candidates, make_row
from .terms import TermCounts, prefix_df, summed
from .writes import PROPOSAL_OP, UNDO_OP, Plan, Planner, Row, Vector, searched

_T = TypeVar("_T")

#: Computes the vector of a checked content with its context when the caller gives none
#: (``MemoryEngine.embed``).
Embed = Callable[[str, "str | None"], Awaitable["list[float] | None"]]
#: Computes the vectors of checked memories (content, context), in order
#: (``MemoryEngine.embed_many``).
EmbedMany = Callable[[list[MemoryText]], Awaitable["list[list[float]] | None"]]
#: Computes the vector of a checked search query (``MemoryEngine.embed_query``).
EmbedQuery = Callable[[str], Awaitable["list[float] | None"]]


def check_cuts(threshold: float | Cuts) -> Cuts:
    """The cuts of a store: as given, or one checked raw cosine for all of them."""
    if isinstance(threshold, Cuts):
        return threshold
    return Cuts.uniform(check.unit_interval(threshold, "threshold"))


@dataclass(frozen=True)
class _Change:
    """An update's or a supersession's checked arguments and the vector made for them."""

    text: str
    meta: dict[str, Any] | None
    context: str | None  #: as given (``None``: the memory's own)
    guessed: str | None  #: the context ``vector`` was made with
    vector: Vector
    at: datetime
    embed: Embed | None  #: how to embed again should the memory's context have changed

    async def embedded(self, old: VectorMemory) -> tuple[str | None, Vector]:
        """The context the new version has, and its vector."""
        around = old.context if self.context is None else self.context
        if around == self.guessed or self.embed is None:
            return around, self.vector
        return around, await self.embed(self.text, around)


class VectorStore(_Lifecycle, ABC):
    """L2: semantic memories judged on store, hybrid search; batches, updates and
    supersessions with their history."""

    #: Dimension of stored embeddings; ``None`` means keyword-only (no embedder).
    dim: int | None = None
    #: The model this process embeds memories with (set by the engine that opened the
    #: store); the first write of a vector records it with the data
    #: (:meth:`recorded_model`). ``None``: vectors are given, and nothing is recorded.
    embedding_model: EmbeddingModel | None = None
    _model_recorded: bool = False

    # -- primitives a backend implements ------------------------------------------

    @abstractmethod
    async def _write(self, owner: str, what: str, op_id: str | None, plan: Planner) -> str:
        """Under the owner's writer (its lock, advisory lock or watched transaction):
        the result recorded for ``op_id`` if that write was applied; otherwise run
        ``plan``, whose reads through :meth:`_rows` see the owner as this write finds
        it, and apply the writes it returns (``writes.Writes``: versions, drops, puts,
        with the owner's counts) together with the ``op_id`` record of its result, all
        or nothing. ``what`` names the write in errors."""

    @abstractmethod
    async def _rows(
        self,
        owner: str,
        *,
        ids: Sequence[str] | None = None,
        text_hash: str | None = None,
        near: tuple[builtins.list[float], int] | None = None,
        where: Mapping[str, Any] | None = None,
        limit: int | None = None,
        offset: int = 0,
        vectors: bool = False,
    ) -> builtins.list[Row]:
        """Live memories of ``owner``: those of ``ids``; or those whose content has
        ``text_hash`` (``text.content_hash``); or the ``k`` of ``near = (vector, k)``
        most similar to ``vector``, best first, with their cosine; or every one whose
        metadata ``versions.matches`` ``where``, newest first (``updated_at``, then
        id), ``offset`` and ``limit`` applied. ``vectors``: with their embeddings."""

    @abstractmethod
    async def _versions(self, owner: str, memory_id: str | None = None
                        ) -> builtins.list[MemoryVersion]:
        """The closed versions of ``memory_id`` and the closed version whose
        ``superseded_by`` is ``memory_id``, in any order; every closed version of the
        owner's memories without ``memory_id``."""

    @abstractmethod
    async def _model(self, record: EmbeddingModel | None, *, replace: bool = False
                     ) -> EmbeddingModel | None:
        """The model recorded with this store's data (``None``: none, or a store not set
        up yet), after recording ``record`` unless one is recorded already (atomically:
        of two processes recording at once, one wins); with ``replace``, in place of the
        one recorded (a re-embedding)."""

    @abstractmethod
    async def _owners(self) -> builtins.list[str]:
        """The owners that have memories, in any order."""

    @abstractmethod
    async def _reads(self, owner: str, noted: Mapping[str, datetime]
                     ) -> dict[str, datetime]:
        """When memories of ``owner`` were last read. With ``noted``: record that the
        memories it names were read at those times (each keeps its latest; ids no longer
        live may be kept or dropped) and return the last reads of those recorded;
        without: every memory of the owner ever read. Not a write of the memories: no
        lock, no version, no operation id."""

    @abstractmethod
    async def _forget(self, owner: str) -> int:
        """Delete the owner's memories, their embeddings, texts, term counts, versions,
        reads and operation ids; return how many memories went. Safe to repeat."""

    # -- composed from the primitives; a backend overrides them for speed ----------

    async def _term_stats(self, owners: Sequence[str], terms: Sequence[str]) -> TermStats:
        """How many memories ``owners`` hold, and how many of them have each of ``terms``
        among their ``text.terms`` (``terms.prefix_df``). Counted here from every row;
        a backend keeps the counts with each write (``writes.Writes.term_delta``)."""
        docs, per_owner = 0, []
        for owner in owners:
            rows = await self._rows(owner)
            counts = TermCounts.of(searched(r.memory) for r in rows)
            docs += len(rows)
            per_owner.append(prefix_df(counts, len(rows), terms))
        return summed(terms, docs, per_owner)

    async def _candidates(
        self,
        owners: Sequence[str],
        terms: Sequence[str],
        embedding: builtins.list[float] | None,
        *,
        vector_k: int,
        keyword_k: int,
        weights: Sequence[float],
        stats: TermStats,
        where: Mapping[str, Any] | None = None,
    ) -> builtins.list[Candidate]:
        """Up to ``vector_k`` nearest memories by cosine (when ``embedding``) plus up to
        ``keyword_k`` memories in ``word_index.keyword_order`` (highest sum of the
        ``weights`` of the ``terms`` they contain, then newest, then smallest id), each
        once, with its cosine. ``stats`` are those the weights came from. With
        ``where``, only memories whose metadata ``versions.matches`` it, chosen before
        the ``k`` cuts. Found here among every row of the owners, read for the search
        (``owner_rows.candidates``); a backend that keeps or indexes its rows overrides
        it."""
        dim = None if embedding is None else len(embedding)
        by_owner = {}
        for owner in owners:
            found = await self._rows(owner, vectors=embedding is not None)
            by_owner[owner] = OwnerRows("", (
                make_row(r.memory, None if r.vector is None or len(r.vector) != dim
                         else np.asarray(r.vector, dtype=np.float64))
                for r in reversed(found)))  # oldest first, as a backend keeps them
        return candidates(by_owner, terms, weights, embedding, vector_k=vector_k,
                          keyword_k=keyword_k, where=where)

    # -- the embedding model ------------------------------------------------------

    async def reembed(self, owner: str, embed_many: EmbedMany, *, batch: int = 64) -> int:
        """Embed every memory of ``owner`` again with ``embed_many`` (its content with its
        context, as a store does), a batch of ``batch`` memories a write, each under the
        owner's writer; a memory changed meanwhile keeps the vector its change gave it.
        How many memories were embedded again. Nothing else changes (no version is
        closed: the memories say what they said). Safe to run again after a stop."""
        check.owner_id(owner)
        rows = await self._rows(owner)
        done = 0
        for start in range(0, len(rows), batch):
            part = [r.memory for r in rows[start:start + batch]]
            found = await embed_many([(m.content, m.context) for m in part])
            if found is None:
                return done
            vecs = [self._check_embedding(v) for v in found]

            async def plan(part: builtins.list[VectorMemory] = part,
                           vecs: builtins.list[Vector] = vecs) -> tuple[str, Any]:
                p = Plan(owner, self._rows)
                n = 0
                for mem, vec in zip(part, vecs, strict=True):
                    now = await p.live(mem.id)
                    if now is not None and (now.content, now.context) == (mem.content,
                                                                          mem.context):
                        p.put(now.model_copy(update={"has_embedding": vec is not None}), vec,
                              before=now)
                        n += 1
                return str(n), p.writes

            done += int(await self._write(owner, "reembed", None, plan))
        return done

    async def note_reads(self, owner: str, reads: Mapping[str, datetime]) -> None:
        """Record when memories of ``owner`` were read (found by a search), batched by the
        caller (``engine.reads.ReadLog``): what a consolidation pass's expiry looks at."""
        if reads:
            await self._reads(check.owner_id(owner), reads)

    async def last_reads(self, owner: str) -> dict[str, datetime]:
        """When each memory of ``owner`` that was ever read was last read."""
        return await self._reads(check.owner_id(owner), {})

    async def owners(self) -> builtins.list[str]:
        """The owners that have memories, sorted."""
        return sorted(await self._owners())

    async def recorded_model(self) -> EmbeddingModel | None:
        """The model this store's memory vectors were made with (``None``: none recorded;
        the store is keyword-only until a process that embeds writes to it)."""
        return await self._model(None)

    async def _record_model(self, vectors: bool) -> None:
        """Before a write of vectors: record this process's model with the data, or refuse
        the write when another model was recorded first (``EmbeddingModelMismatch``)."""
        mine = self.embedding_model
        if not vectors or mine is None or self._model_recorded:
            return
        recorded = await self._model(mine)
        assert recorded is not None  # recorded just now, or by another process before
        if not recorded.agrees(mine.model, mine.dim):
            raise model_mismatch(recorded, mine.model)
        self._model_recorded = True

    def _check_embedding(self, embedding: Sequence[float] | None
                         ) -> builtins.list[float] | None:
        if embedding is None:
            return None
        if self.dim is None:
            raise InvalidQuery("this store has no embedding dimension (keyword-only); "
                               "configure embedding_model to store embeddings")
        return check.embedding(embedding, self.dim)

    # -- writes ---------------------------------------------------------------------

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
        context: str | None = None,
    ) -> StoreResult:
        """Store ``content`` for ``owner``, judged against its nearest memories
        (``dedup.judge``): merged into a duplicate, superseding a memory it updates,
        or stored beside them. ``threshold``: the store's :class:`~.dedup.Cuts`, or one
        raw cosine for every cut (``Cuts.uniform``). ``context``: what helps find the
        memory without being part of it (``VectorMemory.context``), embedded and
        searched with it; ``embedding`` is made of both (``embedding.memory_vector``).

        ``op_id`` makes the call idempotent: a retry with the same id is applied once.
        Without ``embedding``, ``embed`` (if given) computes it from the checked text,
        so nothing is embedded for a call that is refused.
        """
        check.owner_id(owner)
        if op_id is not None:
            check.op_id(op_id)
        text = check.content(content, self.max_content_bytes)
        meta = check.metadata(metadata, self.limits)
        around = check.context(context, self.max_content_bytes)
        cuts = check_cuts(threshold)
        if embedding is None and embed is not None:
            embedding = await embed(text, around)
        vec = self._check_embedding(embedding)
        await self._record_model(vec is not None)
        at = now or utcnow()

        async def plan() -> tuple[str, Any]:
            p = Plan(owner, self._rows, self._keyword_nearest)
            result = await p.store(text, vec, meta, cuts, at, self.limits, around)
            return result.model_dump_json(), p.writes

        return StoreResult.model_validate_json(await self._write(owner, "store", op_id, plan))

    async def store_many(
        self,
        owner: str,
        items: Sequence[str | Mapping[str, Any]],
        *,
        embeddings: Sequence[Sequence[float]] | None = None,
        threshold: float | Cuts = 0.85,
        now: datetime | None = None,
        op_id: str | None = None,
        embed_many: EmbedMany | None = None,
    ) -> builtins.list[StoreResult]:
        """Store a batch: texts or ``{"content": ..., "metadata": ...}`` mappings, in order.

        The same as a ``store`` of each item in turn (a near-duplicate of a memory,
        or of an earlier item, is merged), written at once: one result per item. A
        refused item refuses the batch; nothing is written. An item's ``"context"`` is
        as ``store``'s. Without ``embeddings``, ``embed_many`` (if given) embeds the
        checked texts, each with its context, in one call.
        """
        check.owner_id(owner)
        if op_id is not None:
            check.op_id(op_id)
        batch = check_l2.batch(items, self.max_content_bytes, self.limits)
        cuts = check_cuts(threshold)
        if embeddings is None and embed_many is not None:
            embeddings = await embed_many([(t, c) for t, _, c in batch])
        if embeddings is not None and len(embeddings) != len(batch):
            raise InvalidBatch(f"{len(embeddings)} embeddings for {len(batch)} items")
        vecs: builtins.list[Vector] = (
            [None] * len(batch) if embeddings is None
            else [self._check_embedding(e) for e in embeddings])
        await self._record_model(any(v is not None for v in vecs))
        at = now or utcnow()

        async def plan() -> tuple[str, Any]:
            p = Plan(owner, self._rows, self._keyword_nearest)
            if cuts.nearest > 0 and len(batch) > 1:
                await p.prefetch([t for t, _, _ in batch], vecs, cuts.nearest,
                                 self._nearest_many, self._same_text_many)
            results = [await p.store(text, vec, meta, cuts, at, self.limits, around)
                       for (text, meta, around), vec in zip(batch, vecs, strict=True)]
            return json.dumps([r.model_dump(mode="json") for r in results]), p.writes

        got = await self._write(owner, "store_many", op_id, plan)
        return [StoreResult.model_validate(r) for r in json.loads(got)]

    async def update(
        self,
        owner: str,
        memory_id: str,
        content: str,
        *,
        metadata: Mapping[str, Any] | None = None,
        embedding: Sequence[float] | None = None,
        now: datetime | None = None,
        op_id: str | None = None,
        embed: Embed | None = None,
        context: str | None = None,
    ) -> VectorMemory:
        """Change a memory's content (re-embedded) and, when given, its metadata and its
        context (else it keeps its own); the previous version stays in its history.
        ``MemoryNotFound`` for an id the owner has no live memory of
        (``MemorySuperseded`` once superseded)."""
        c = await self._changed(owner, memory_id, content, metadata, context, embedding, now,
                                op_id, embed)

        async def plan() -> tuple[str, Any]:
            p = Plan(owner, self._rows)
            old = await self._live(p, memory_id)
            around, vec = await c.embedded(old)
            new = versions.updated(old, c.text, c.meta, vec is not None, c.at, around)
            p.close(versions.closed(old, c.at, "update"))
            p.put(new, vec, before=old)
            return new.model_dump_json(), p.writes

        return VectorMemory.model_validate_json(await self._or_superseded(
            owner, memory_id, self._write(owner, "update", op_id, plan)))

    async def supersede_memory(
        self,
        owner: str,
        memory_id: str,
        content: str,
        *,
        metadata: Mapping[str, Any] | None = None,
        by: str | None = None,
        reason: str | None = None,
        embedding: Sequence[float] | None = None,
        now: datetime | None = None,
        op_id: str | None = None,
        embed: Embed | None = None,
        context: str | None = None,
    ) -> VectorMemory:
        """Replace a memory by a new one (``content``; ``metadata`` and ``context``, or
        else the old memory's), closing the old one in the same step: searches and lists
        show the new one only, ``memory_history`` both. The new memory is returned.
        ``MemorySuperseded`` if the old one was superseded already."""
        who = None if by is None else check.decider(by)
        why = check_l2.reason(reason)
        c = await self._changed(owner, memory_id, content, metadata, context, embedding, now,
                                op_id, embed)

        async def plan() -> tuple[str, Any]:
            p = Plan(owner, self._rows)
            old = await self._live(p, memory_id)
            around, vec = await c.embedded(old)
            new = versions.successor(old, c.text, c.meta, vec is not None, c.at, around)
            p.close(versions.closed(old, c.at, "supersede", superseded_by=new.id, by=who,
                                    reason=why))
            p.drop(old)
            p.put(new, vec)
            return new.model_dump_json(), p.writes

        return VectorMemory.model_validate_json(await self._or_superseded(
            owner, memory_id, self._write(owner, "supersede", op_id, plan)))

    async def _changed(self, owner: str, memory_id: str, content: str,
                       metadata: Mapping[str, Any] | None, context: str | None,
                       embedding: Sequence[float] | None, now: datetime | None,
                       op_id: str | None, embed: Embed | None) -> _Change:
        """The checked arguments of an update or a supersession, embedded: with the given
        context, else with the memory's own as it is now (read first, so the model is not
        asked under the owner's writer; :meth:`_Change.embedded` makes sure)."""
        check.owner_id(owner)
        check.ids([memory_id], "memory id")
        if op_id is not None:
            check.op_id(op_id)
        text = check.content(content, self.max_content_bytes)
        meta = None if metadata is None else check.metadata(metadata, self.limits)
        around = check.context(context, self.max_content_bytes)
        guess = around
        if embedding is None and embed is not None and around is None:
            found = await self._rows(owner, ids=[memory_id])
            guess = found[0].memory.context if found else None
        if embedding is None and embed is not None:
            embedding = await embed(text, guess)
        vec = self._check_embedding(embedding)
        await self._record_model(vec is not None)
        return _Change(text, meta, around, guess, vec, now or utcnow(),
                       embed if embedding is not None and embed is not None else None)

    @staticmethod
    async def _live(p: Plan, memory_id: str) -> VectorMemory:
        found = await p.live(memory_id)
        if found is None:
            raise MemoryNotFound(f"owner {p.owner!r} has no memory {memory_id!r}")
        return found

    async def delete(self, owner: str, memory_id: str) -> bool:
        """Delete a live memory (its history stays); ``False`` if there was none."""
        check.owner_id(owner)
        check.ids([memory_id], "memory id")

        async def plan() -> tuple[str, Any]:
            p = Plan(owner, self._rows)
            old = await p.live(memory_id)
            if old is not None:
                p.drop(old)
            return ("false" if old is None else "true"), p.writes

        return await self._write(owner, "delete", None, plan) == "true"

    # -- consolidation proposals ------------------------------------------------------

    async def apply_proposal(self, owner: str, item: MemoryPendingItem, *, by: str,
                             edited: str | None = None, now: datetime | None = None,
                             embed: Embed | None = None) -> str | None:
        """Make the change a consolidation proposal (``item.proposal``) describes, in one
        write under the operation id ``proposal:<item id>`` (a retry applies it once):
        every memory it touches but the one it keeps is closed into that one (a
        ``merge``), superseded by it, or let expire, its version naming the proposal;
        a merge whose result (``edited``, else the proposal's) is not the kept memory's
        text rewrites it, with the merge records of a store's merge (``dedup.absorbed``),
        its previous version closed. ``ProposalChanged`` and nothing written when a touched
        memory is not as the proposal saw it. The kept memory's id (``None``: an
        expiry). :meth:`undo_proposal` reverses it exactly: the write records what it
        replaced."""
        check.owner_id(owner)
        who = check.decider(by)
        prop = item.proposal
        if prop is None or item.kind not in PROPOSAL_KINDS or item.status_expiry:
            raise InvalidInput(f"pending item {item.id!r} is not a consolidation proposal "
                               "of memories")
        if edited is not None and prop.keep is None:  # an expiry leaves no text to edit
            raise InvalidQuery(f"proposal {item.id!r} lets memories expire: it keeps no "
                               "text, so there is nothing to edit; nothing was written")
        text = None if edited is None else check.content(edited, self.max_content_bytes)
        at = now or utcnow()
        why = _bounded_reason(f"proposal {item.id}: {prop.reason}")
        kept = None if prop.keep is None else next(
            (t for t in prop.touches if t.id == prop.keep), None)
        result = text or prop.result
        new_vec: Vector = None
        if kept is not None and result is not None and result != kept.content and embed:
            found = await self._rows(owner, ids=[kept.id])
            around = found[0].memory.context if found else None
            new_vec = self._check_embedding(await embed(result, around))
            await self._record_model(new_vec is not None)

        async def plan() -> tuple[str, Any]:
            p = Plan(owner, self._rows)
            rows = {r.memory.id: r for r in await self._rows(
                owner, ids=[t.id for t in prop.touches], vectors=True)}
            for t in prop.touches:
                r = rows.get(t.id)
                if r is None or (r.memory.content, r.memory.updated_at) != (t.content,
                                                                          t.updated_at):
                    raise ProposalChanged(
                        f"proposal {item.id!r} of owner {owner!r}: memory {t.id!r} changed "
                        f"since proposed; nothing was written")
            # What undoing it needs: the kept memory as this write leaves it (an undo
            # checks it is still so), as it was (when this write changes it), the
            # memories closed with their vectors, the versions closed.
            undo: dict[str, Any] = {"after": None, "kept": None, "dropped": [],
                                    "versions": []}
            change = "expire" if item.kind == "expire" else item.kind
            for t in prop.touches:
                if t.id == prop.keep:
                    continue
                r = rows[t.id]
                v = versions.closed(r.memory, at, change,  # type: ignore[arg-type]
                                    superseded_by=prop.keep, by=who, reason=why)
                p.close(v)
                p.drop(r.memory)
                undo["dropped"].append([r.memory.model_dump_json(), r.vector])
                undo["versions"].append(v.model_dump_json())
            if item.kind == "merge" and kept is not None and result not in (
                    None, rows[kept.id].memory.content):
                # A person (or the judge model) rewrote the kept memory: a change of it,
                # now, with the merge records a store's merge writes. A merge that keeps
                # its text leaves it as it was, its time too: nothing new was said.
                r = rows[kept.id]
                others = [rows[t.id].memory for t in prop.touches if t.id != kept.id]
                new = absorbed(r.memory, sorted(others, key=lambda m: m.updated_at),
                               result, at, self.limits)
                new = new.model_copy(update={"has_embedding": new_vec is not None})
                v = versions.closed(r.memory, at, "merge", by=who, reason=why)
                p.close(v)
                p.put(new, new_vec, before=r.memory)
                undo["kept"] = [r.memory.model_dump_json(), r.vector]
                undo["after"] = new.model_dump_json()
                undo["versions"].append(v.model_dump_json())
            elif kept is not None:
                undo["after"] = rows[kept.id].memory.model_dump_json()
            return json.dumps({"keep": prop.keep, "undo": undo}), p.writes

        done = json.loads(await self._write(owner, "consolidation", PROPOSAL_OP + item.id,
                                            plan))
        return cast("str | None", done["keep"])

    async def undo_proposal(self, owner: str, pending_id: str) -> int:
        """Reverse an applied consolidation proposal exactly: the memories it closed are
        live again as they were (ids, times, embeddings), the kept memory is as it was,
        and the versions it closed leave the histories. Idempotent (operation id
        ``undo:<id>``); ``ProposalNotApplied`` if it was not applied, ``ProposalChanged``
        (nothing written) if the kept memory changed since. How many memories came back."""
        check.owner_id(owner)
        pid = check.ids([pending_id], "pending item id")[0]

        # The apply's own record, read back through the write that made it: a write of
        # a recorded op id returns its result; one never applied runs this plan instead,
        # which refuses, writing nothing.
        async def unapplied() -> tuple[str, Any]:
            raise ProposalNotApplied(f"owner {owner!r} has no applied proposal {pid!r}")

        record = json.loads(await self._write(owner, "consolidation", PROPOSAL_OP + pid,
                                              unapplied))["undo"]

        async def plan() -> tuple[str, Any]:
            p = Plan(owner, self._rows)
            if record["after"] is not None:  # the kept memory, as the proposal left it
                after = VectorMemory.model_validate_json(record["after"])
                live = await p.live(after.id)
                if live is None or (live.content, live.updated_at) != (after.content,
                                                                       after.updated_at):
                    raise ProposalChanged(
                        f"proposal {pid!r} of owner {owner!r}: memory {after.id!r} changed "
                        f"since it was applied; nothing was written")
                if record["kept"] is not None:
                    before_json, vec = record["kept"]
                    p.put(VectorMemory.model_validate_json(before_json), vec, before=live)
            for mem_json, vec in record["dropped"]:
                mem = VectorMemory.model_validate_json(mem_json)
                if await p.live(mem.id) is None:
                    p.put(mem, vec)
            for v in record["versions"]:
                p.reopen(MemoryVersion.model_validate_json(v))
            return str(len(record["dropped"])), p.writes

        return int(await self._write(owner, "undo", UNDO_OP + pid, plan))

    async def restore(self, owner: str,
                      items: Sequence[tuple[VectorMemory, Sequence[float] | None]],
                      history: Sequence[MemoryVersion] = ()) -> int:
        """Insert exported memories as they were (ids, times, metadata, embeddings;
        no dedup) into ``owner``, which must have none (``OwnerNotEmpty``), with their
        closed versions (``history``), in one write. Every item is checked
        (``check_restore``, ``check_versions``) before anything is written; how many
        memories were written."""
        checked = self.check_restore(owner, items)
        self.check_versions(owner, history)
        if checked:
            await self._record_model(any(v is not None for _, v in checked))

        async def plan() -> tuple[str, Any]:
            p = Plan(owner, self._rows)
            if await self._rows(owner, limit=1):
                raise OwnerNotEmpty(f"owner {owner!r} has memories already; forget it first")
            for v in history:
                p.close(v)
            for mem, vec in checked:
                p.put(mem, vec)
            return str(len(checked)), p.writes

        return int(await self._write(owner, "import", None, plan))

    def check_versions(self, owner: str, found: Sequence[MemoryVersion]) -> None:
        """``InvalidInput`` for a version an import would refuse: of another owner, not
        closed, an id that is not a UUID, content or metadata over the limits."""
        check.owner_id(owner)
        for v in found:
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
            check.context(v.context, self.max_content_bytes)
            check.stored_metadata(v.metadata, self.limits)

    def check_restore(self, owner: str,
                      items: Sequence[tuple[VectorMemory, Sequence[float] | None]]
                      ) -> builtins.list[tuple[VectorMemory, list[float] | None]]:
        """The items ``restore`` would write, checked; ``InvalidInput`` if one is not fit."""
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
            around = check.context(mem.context, self.max_content_bytes)
            vec = self._check_embedding(emb)
            checked.append((mem.model_copy(update={
                "content": text, "metadata": meta, "context": around,
                "has_embedding": vec is not None}), vec))
        return checked

    async def forget(self, owner: str) -> int:
        """Remove ``owner``'s L2 layer (see ``StructuredStore.forget`` for the rest);
        return how many memories went."""
        return await self._forget(check.owner_id(owner))

    # -- reads ----------------------------------------------------------------------

    async def get(self, owner: str, memory_id: str) -> VectorMemory:
        """One current memory of ``owner``, or ``MemoryNotFound`` (``MemorySuperseded``
        for one that was superseded: its history still has it)."""
        check.owner_id(owner)
        check.ids([memory_id], "memory id")
        return await self._or_superseded(owner, memory_id, self._get(owner, memory_id))

    async def _get(self, owner: str, memory_id: str) -> VectorMemory:
        rows = await self._rows(owner, ids=[memory_id])
        if not rows:
            raise MemoryNotFound(f"owner {owner!r} has no memory {memory_id!r}")
        return rows[0].memory

    async def list(self, owner: str, *, limit: int = 100, offset: int = 0,
                   filter: Mapping[str, Any] | None = None,
                   ) -> builtins.list[VectorMemory]:
        """Current memories of ``owner``, newest first; ``filter`` as in :meth:`search`."""
        check.owner_id(owner)
        n, skip = check.limit(limit), check.offset(offset)
        where = check_l2.metadata_filter(filter)
        return [r.memory for r in await self._rows(owner, where=where, limit=n, offset=skip)]

    async def count(self, owner: str) -> int:
        """How many memories ``owner`` has."""
        return (await self._term_stats([check.owner_id(owner)], [])).docs

    async def dump(self, owner: str
                   ) -> builtins.list[tuple[VectorMemory, builtins.list[float] | None]]:
        """Every memory of ``owner`` with its embedding, oldest first (for export)."""
        rows = await self._rows(check.owner_id(owner), vectors=True)
        return sorted(((r.memory, r.vector) for r in rows),
                      key=lambda i: (i[0].created_at, i[0].id))

    async def versions(self, owner: str) -> builtins.list[MemoryVersion]:
        """Every closed version of ``owner``'s memories, oldest closed first (for export)."""
        found = await self._versions(check.owner_id(owner))
        return sorted(found, key=lambda v: (v.valid_to or v.valid_from, v.valid_from, v.id))

    async def memory_history(self, owner: str, memory_id: str) -> builtins.list[MemoryVersion]:
        """Every version of the memory and of the memories it superseded or was
        superseded by, oldest first, the current one (``valid_to`` ``None``) last.
        ``MemoryNotFound`` if the owner never had it."""
        check.owner_id(owner)
        check.ids([memory_id], "memory id")
        return await versions.chain(
            memory_id, lambda x: self._versions(owner, x), lambda x: self._get(owner, x))

    async def _or_superseded(self, owner: str, memory_id: str, reading: Awaitable[_T]) -> _T:
        """What ``reading`` (a read or a write of ``memory_id``) gives; in place of its
        ``MemoryNotFound``, ``MemorySuperseded`` if ``memory_id`` was superseded."""
        try:
            return await reading
        except MemoryNotFound as exc:
            if isinstance(exc, MemorySuperseded):
                raise
            succ = versions.superseded_by(await self._versions(owner, memory_id), memory_id)
            if succ is None:
                raise
            raise MemorySuperseded(
                f"memory {memory_id!r} of owner {owner!r} was superseded by {succ!r}",
                superseded_by=succ,
            ) from exc

    # -- search ---------------------------------------------------------------------

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
        embed: EmbedQuery | None = None,
        filter: Mapping[str, Any] | None = None,
    ) -> builtins.list[SearchHit]:
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
        vector_k, keyword_k = max(vector_k, n), max(keyword_k, n)
        if embedding is None and embed is not None:
            # The query is embedded while the keyword statistics (and, where a backend
            # reads them apart, the keyword candidates) are read: the search waits for
            # the slower of the two, not for both. The embedding is given the loop first,
            # so the model starts before the query's terms are found, not after them.
            embedding_of = asyncio.ensure_future(embed(text))
            await asyncio.sleep(0)

            async def embedded() -> builtins.list[float] | None:
                return self._check_embedding(await embedding_of)

            try:
                q_terms, t_weights, stats = await self.weighted_terms(who, text)
                vec, cands = await self._embedded_candidates(
                    who, q_terms, embedded, vector_k=vector_k, keyword_k=keyword_k,
                    weights=t_weights, stats=stats, where=where)
            except BaseException:
                embedding_of.cancel()
                raise
        else:
            vec = self._check_embedding(embedding)
            q_terms, t_weights, cands = await self._weighted_candidates(
                who, text, vec, vector_k=vector_k, keyword_k=keyword_k, where=where)
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

    async def _embedded_candidates(
        self,
        owners: Sequence[str],
        terms: Sequence[str],
        embedded: Callable[[], Awaitable[builtins.list[float] | None]],
        *,
        vector_k: int,
        keyword_k: int,
        weights: Sequence[float],
        stats: TermStats,
        where: Mapping[str, Any] | None = None,
    ) -> tuple[builtins.list[float] | None, builtins.list[Candidate]]:
        """The query's embedding (``embedded``: awaited once, while it is computed) and
        the :meth:`_candidates` it gives. A backend that reads its keyword candidates
        apart overrides it to read them meanwhile, with the same candidates."""
        vec = await embedded()
        return vec, await self._candidates(owners, terms, vec, vector_k=vector_k,
                                           keyword_k=keyword_k, weights=weights,
                                           stats=stats, where=where)

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

    async def _nearest_many(self, owner: str, vectors: Sequence[builtins.list[float]], k: int
                            ) -> builtins.list[builtins.list[Row]]:
        """For each of ``vectors``, what ``_rows(owner, near=(vector, k))`` gives (a batch's
        neighbours, read before its plan judges it). A backend that reads them in one
        round trip overrides it, with the same rows."""
        return [await self._rows(owner, near=(v, k)) for v in vectors]

    async def _same_text_many(self, owner: str, hashes: Sequence[str]
                              ) -> dict[str, builtins.list[Row]]:
        """For each of ``hashes``, what ``_rows(owner, text_hash=hash)`` gives. A backend
        that reads them in one round trip overrides it, with the same rows."""
        return {h: await self._rows(owner, text_hash=h) for h in dict.fromkeys(hashes)}

    async def _keyword_nearest(self, owner: str, text: str, k: int
                               ) -> builtins.list[VectorMemory]:
        """The owner's ``k`` memories with the highest keyword score for ``text`` (the
        search's keyword signal: rarity-weighted words it shares), best first; for the
        judgement of a memory stored without a vector."""
        terms, weights, stats = await self.weighted_terms([owner], text)
        if not terms:
            return []
        cands = await self._candidates([owner], terms, None, vector_k=0, keyword_k=k,
                                       weights=weights, stats=stats)
        scored = sorted(((keyword_score_folded(terms, c.folded or fold(c.content), weights), c)
                         for c in cands), key=lambda sc: (-sc[0], sc[1].id))
        return [self._materialize(c.payload) for score, c in scored[:k] if score > 0]

    def _materialize(self, payload: Any) -> VectorMemory:
        """The memory a candidate's payload stands for (backends with raw rows override)."""
        if not isinstance(payload, VectorMemory):
            raise TypeError(f"{type(self).__name__} must override _materialize")
        return payload


def _bounded_reason(text: str) -> str:
    """``text`` cut to what a version's reason may hold (``validation.l2.reason``)."""
    raw = text.encode("utf-8")[:check_l2.MAX_REASON_BYTES]
    return raw.decode("utf-8", errors="ignore")


def model_mismatch(recorded: EmbeddingModel, configured: str) -> EmbeddingModelMismatch:
    """The refusal to mix ``configured``'s vectors with those of the ``recorded`` model."""
    return EmbeddingModelMismatch(
        f"this store's memories are embedded with {recorded.model!r} ({recorded.dim} "
        f"dimensions, recorded {recorded.recorded_at:%Y-%m-%d}), and this process is "
        f"configured with {configured!r}; their cosines are not one scale. Leave "
        f"embedding_model unset (DREAM_MEMORY_EMBEDDING_MODEL) to use the store's model, "
        f"or move the store to {configured!r}: `dream-memory reembed --model "
        f"{configured} --yes` embeds its memories again in place (or `dream-memory "
        f"export`, then `dream-memory import` into a store of that model)")
