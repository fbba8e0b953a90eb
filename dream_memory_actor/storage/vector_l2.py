"""The L2 writes beyond ``store``: batches, updates, supersessions, and histories.

Mixed into :class:`~.vector.VectorStore`. As there, each public method checks its
arguments before any I/O (nothing is written when one is refused), computes the
embeddings it needs only then, and hands checked values to a backend primitive
that is atomic per owner and idempotent under its ``op_id``.
"""

from __future__ import annotations

import builtins
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from .. import validation as check
from ..errors import InvalidBatch, MemoryNotFound, MemorySuperseded
from ..models import MemoryVersion, StoreResult, VectorMemory, utcnow
from ..validation import l2 as check_l2
from . import versions
from .dedup import Cuts

#: Computes the embeddings of checked texts, in order (``MemoryEngine.embed_many``).
EmbedMany = Callable[[list[str]], Awaitable["list[list[float]] | None"]]
Embed = Callable[[str], Awaitable["list[float] | None"]]
#: One checked item of a batch: content, embedding, metadata.
BatchItem = tuple[str, "list[float] | None", "dict[str, Any]"]


def check_cuts(threshold: float | Cuts) -> Cuts:
    """The cuts of a store: as given, or one checked raw cosine for all of them."""
    if isinstance(threshold, Cuts):
        return threshold
    return Cuts.uniform(check.unit_interval(threshold, "threshold"))


class VersionedL2(ABC):
    """``store_many``, ``update``, ``supersede_memory`` and ``memory_history``."""

    max_content_bytes: int
    limits: Any

    # -- primitives a backend implements ------------------------------------------------

    @abstractmethod
    async def _store(
        self,
        owner: str,
        content: str,
        embedding: list[float] | None,
        metadata: dict[str, Any],
        *,
        cuts: Cuts,
        now: datetime,
        op_id: str | None,
    ) -> StoreResult:
        """Judge ``content`` against the owner's nearest memories (``dedup.decide`` on
        the ``cuts.nearest`` most similar above the candidate cut, and the memory of the
        same text) and write what it decided (``dedup.outcome_of``): a merge (the
        previous content a version, ``change="merge"``), a supersession, or an insert.
        Atomic per owner.

        With an ``op_id`` already recorded for ``owner``, write nothing and return
        the recorded result; otherwise record ``op_id`` and the result atomically.
        """

    @abstractmethod
    async def _store_many(
        self,
        owner: str,
        items: Sequence[BatchItem],
        *,
        cuts: Cuts,
        now: datetime,
        op_id: str | None,
    ) -> list[StoreResult]:
        """Store ``items`` in order, each deduplicated against the owner's memories and
        the batch's earlier items exactly as a ``store`` each would; atomic per owner
        and idempotent under ``op_id`` (the results recorded as a list)."""

    @abstractmethod
    async def _update(
        self,
        owner: str,
        memory_id: str,
        content: str,
        embedding: list[float] | None,
        metadata: dict[str, Any] | None,
        *,
        now: datetime,
        op_id: str | None,
    ) -> VectorMemory:
        """Replace the live memory's content, embedding and (when given) metadata
        (``versions.updated``), its previous version added to its history
        (``versions.closed``), atomically; ``MemoryNotFound`` if it is not live."""

    @abstractmethod
    async def _supersede(
        self,
        owner: str,
        memory_id: str,
        content: str,
        embedding: list[float] | None,
        metadata: dict[str, Any] | None,
        *,
        by: str | None,
        reason: str | None,
        now: datetime,
        op_id: str | None,
    ) -> VectorMemory:
        """Write the successor (``versions.successor``, no dedup) and close the live
        memory (its last version in its history, naming the successor), atomically;
        ``MemoryNotFound`` if it is not live."""

    @abstractmethod
    async def _history(self, owner: str, memory_id: str) -> list[MemoryVersion]:
        """The closed versions of ``memory_id`` and the closed version whose
        ``superseded_by`` is ``memory_id``, in any order."""

    @abstractmethod
    async def _get(self, owner: str, memory_id: str) -> VectorMemory:
        """One memory, or ``MemoryNotFound``."""

    @abstractmethod
    async def _record_model(self, vectors: bool) -> None:
        """Record the process's embedding model before a write of vectors (``VectorStore``)."""

    @abstractmethod
    def _check_embedding(self, embedding: Sequence[float] | None) -> builtins.list[float] | None:
        """See ``VectorStore._check_embedding``."""

    # -- the public, validated API ------------------------------------------------------

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
        refused item refuses the batch; nothing is written. Without ``embeddings``,
        ``embed_many`` (if given) embeds the checked texts in one call.
        """
        check.owner_id(owner)
        if op_id is not None:
            check.op_id(op_id)
        batch = check_l2.batch(items, self.max_content_bytes, self.limits)
        cuts = check_cuts(threshold)
        texts = [t for t, _ in batch]
        if embeddings is None and embed_many is not None:
            embeddings = await embed_many(texts)
        if embeddings is not None and len(embeddings) != len(batch):
            raise InvalidBatch(f"{len(embeddings)} embeddings for {len(batch)} items")
        vecs = (
            [None] * len(batch)
            if embeddings is None
            else [self._check_embedding(e) for e in embeddings]
        )
        checked = [(t, v, m) for (t, m), v in zip(batch, vecs, strict=True)]
        await self._record_model(any(v is not None for v in vecs))
        return await self._store_many(
            owner, checked, cuts=cuts, now=now or utcnow(), op_id=op_id
        )

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
    ) -> VectorMemory:
        """Change a memory's content (re-embedded) and, when given, its metadata; the
        previous version stays in its history. ``MemoryNotFound`` for an id the owner
        has no live memory of (``MemorySuperseded`` once superseded)."""
        check.owner_id(owner)
        check.ids([memory_id], "memory id")
        if op_id is not None:
            check.op_id(op_id)
        text = check.content(content, self.max_content_bytes)
        meta = None if metadata is None else check.metadata(metadata, self.limits)
        if embedding is None and embed is not None:
            embedding = await embed(text)
        vec = self._check_embedding(embedding)
        await self._record_model(vec is not None)
        try:
            return await self._update(
                owner, memory_id, text, vec, meta, now=now or utcnow(), op_id=op_id
            )
        except MemoryNotFound as exc:
            await self._not_live(owner, memory_id, exc)
            raise

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
    ) -> VectorMemory:
        """Replace a memory by a new one (``content``; ``metadata``, or else the old
        memory's), closing the old one in the same step: searches and lists show the
        new one only, ``memory_history`` both. The new memory is returned.
        ``MemorySuperseded`` if the old one was superseded already."""
        check.owner_id(owner)
        check.ids([memory_id], "memory id")
        if op_id is not None:
            check.op_id(op_id)
        text = check.content(content, self.max_content_bytes)
        meta = None if metadata is None else check.metadata(metadata, self.limits)
        who = None if by is None else check.decider(by)
        why = check_l2.reason(reason)
        if embedding is None and embed is not None:
            embedding = await embed(text)
        vec = self._check_embedding(embedding)
        await self._record_model(vec is not None)
        try:
            return await self._supersede(
                owner,
                memory_id,
                text,
                vec,
                meta,
                by=who,
                reason=why,
                now=now or utcnow(),
                op_id=op_id,
            )
        except MemoryNotFound as exc:
            await self._not_live(owner, memory_id, exc)
            raise

    async def memory_history(self, owner: str, memory_id: str) -> builtins.list[MemoryVersion]:
        """Every version of the memory and of the memories it superseded or was
        superseded by, oldest first, the current one (``valid_to`` ``None``) last.
        ``MemoryNotFound`` if the owner never had it."""
        check.owner_id(owner)
        check.ids([memory_id], "memory id")
        return await versions.chain(
            memory_id, lambda x: self._history(owner, x), lambda x: self._get(owner, x)
        )

    async def _not_live(self, owner: str, memory_id: str, exc: MemoryNotFound) -> None:
        """Raise ``MemorySuperseded`` if ``memory_id`` was superseded (else return)."""
        if isinstance(exc, MemorySuperseded):
            return
        succ = versions.superseded_by(await self._history(owner, memory_id), memory_id)
        if succ is not None:
            raise MemorySuperseded(
                f"memory {memory_id!r} of owner {owner!r} was superseded by {succ!r}",
                superseded_by=succ,
            ) from exc
