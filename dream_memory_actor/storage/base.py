"""The two storage interfaces business code depends on.

``StructuredStore`` (L1) has two abstract methods: ``load`` a snapshot and
``_apply`` a list of operations atomically; four primitives keep the L3 chat
windows and the audit trail of HITL decisions. ``VectorStore`` (L2, defined in
``storage.vector`` and re-exported here) has a handful of primitives; dedup
semantics, validation and hybrid ranking live there, once, so every backend ranks
the same data the same way.

Public methods check their arguments (``validation``) before any I/O and raise
``InvalidInput`` subclasses; nothing is written when they do. The stores are the
authority on these rules: whoever calls them, nothing unchecked is stored.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager, nullcontext
from datetime import datetime
from typing import ClassVar

from .. import validation as check
from ..errors import InvalidQuery, ItemNotFound
from ..models import (
    AuditAction,
    AuditEntry,
    ChatAppend,
    ChatMessage,
    MemoryFact,
    MemoryPendingItem,
    MemoryRule,
    MemorySnapshot,
    Tombstone,
    utcnow,
)
from ..validation import l1 as check_l1
from . import tombstones
from .changes import ChangeCallback, Unwatch, no_feed
from .decisions import ACTIONS, decision_ops
from .history import HistoryReads
from .lifecycle import DEFAULT_MAX_CONTENT_BYTES, _Lifecycle
from .ops import (
    AddAudit,
    AddFact,
    AddRule,
    DeleteStatus,
    L1Op,
    SetStatus,
    added,
)
from .vector import VectorStore

__all__ = ["DEFAULT_MAX_CONTENT_BYTES", "StructuredStore", "VectorStore"]

class StructuredStore(_Lifecycle, HistoryReads, ABC):
    """L1: rules, facts, status and the pending queue of each owner; superseded items
    and status values in its history (``storage.history``)."""

    #: Status entries and pending items can expire by themselves.
    supports_ttl: ClassVar[bool] = True
    #: ``watch`` reports the L1 writes of every process on this storage (see ``changes``).
    supports_change_feed: ClassVar[bool] = False

    def owner_unit(self, owner: str) -> AbstractAsyncContextManager[object]:
        """A unit of work on ``owner`` across its layers (an import): where the backend
        has one (PostgreSQL: one transaction holding the owner's L1 and L2 locks), what
        the stores write inside it is committed together or not at all, and no other
        write of the owner runs meanwhile; elsewhere the writes apply one by one."""
        return nullcontext()

    async def watch(self, callback: ChangeCallback) -> Unwatch:
        """Call ``callback`` on this event loop with each L1 write committed on this
        storage, by any process (this one included), and with ``None`` after the feed
        reconnected (writes may have been missed). Returns the closer of the watch.

        Without a change feed (``supports_change_feed`` False, e.g. the in-memory
        store, which nothing outside this process can write) it never calls back.
        """
        return no_feed()

    @abstractmethod
    async def load(self, owner: str, *, now: datetime | None = None) -> MemorySnapshot:
        """The owner's current snapshot (an empty one at version 0 for a new owner)."""

    @abstractmethod
    async def _apply(self, owner: str, ops: Sequence[L1Op], now: datetime,
                     op_id: str | None) -> MemorySnapshot:
        """Apply validated ``ops`` atomically; return the new snapshot (version + 1).

        With an ``op_id`` already recorded for ``owner``, apply nothing and return
        the current snapshot; otherwise record ``op_id`` in the same transaction.
        """

    async def apply(
        self, owner: str, ops: Sequence[L1Op], *, now: datetime | None = None,
        op_id: str | None = None,
    ) -> MemorySnapshot:
        """Apply ``ops`` to ``owner`` atomically: all of them, or none and an error.

        ``op_id`` makes the call idempotent: a retry with the same id (after a
        timeout or a restart) is applied once.
        """
        check.owner_id(owner)
        if op_id is not None:
            check.op_id(op_id)
        checked = check_l1.ops(ops, self.max_content_bytes, self.limits)
        await self._check_supersessions(owner, checked)
        try:
            return await self._apply(owner, checked, now or utcnow(), op_id)
        except ItemNotFound as exc:
            raise await self._refine_missing(owner, checked, exc) from None

    async def decide(self, owner: str, pending_id: str, action: AuditAction, by: str, *,
                     edited: str | None = None, now: datetime | None = None,
                     op_id: str | None = None) -> tuple[MemorySnapshot, AuditEntry] | None:
        """Decide on ``owner``'s queued item ``pending_id``: remove it, write it when
        confirmed, and record the audit entry, atomically (see :mod:`.decisions`).

        ``None`` when the item is not queued (nothing written); ``PendingItemNotFound``
        when another decision removed it meanwhile. Returns the new snapshot and the
        entry this call tried to record (a retry of an applied ``op_id`` writes nothing,
        so the recorded entry may be an earlier one: read it with ``audit``).
        """
        check.owner_id(owner)
        check.ids([pending_id], "pending item id")
        if op_id is not None:
            check.ids([op_id], "operation id")
        if action not in ACTIONS:
            raise InvalidQuery(f"action must be one of {ACTIONS}, got {action!r}")
        check.decider(by)
        text = None if edited is None else check.content(edited, self.max_content_bytes,
                                                         "edited content")
        at = now or utcnow()
        snap = await self.load(owner, now=at)
        item = next((p for p in snap.pending if p.id == pending_id), None)
        if item is None:
            return None
        ops, entry = decision_ops(item, action, by, text, at)
        checked = check_l1.ops(ops, self.max_content_bytes, self.limits)
        try:
            new = await self._apply(owner, [*checked, AddAudit(entry)], at, op_id)
        except ItemNotFound as exc:  # the item a correction replaces is gone or superseded
            raise await self._refine_missing(owner, checked, exc) from None
        return new, entry

    # -- L3 chat window and the audit trail ------------------------------------------
    #
    # Every backend implements the four primitives below, and keeps the entries of
    # ``AddAudit`` operations in ``_apply`` (``decide`` adds them, nothing else).

    @abstractmethod
    async def _append_messages(
        self, owner: str, conversation: str, messages: Sequence[ChatMessage], window: int,
        op_id: str | None,
    ) -> tuple[list[ChatMessage], list[ChatMessage]]:
        """Append ``messages`` in order, then remove all but the newest ``window`` messages
        of the conversation; atomic per (owner, conversation). Return ``(window, removed)``,
        both oldest first (by arrival, not by ``created_at``). With an ``op_id`` already
        recorded for ``owner``, append nothing and return ``(window, [])``; otherwise
        record it in the same transaction."""

    @abstractmethod
    async def _load_window(self, owner: str, conversation: str) -> list[ChatMessage]:
        """The messages in the conversation's window, oldest first (empty if none)."""

    @abstractmethod
    async def _end_conversation(self, owner: str, conversation: str) -> list[ChatMessage]:
        """Delete the conversation's window; return what it held, oldest first."""

    @abstractmethod
    async def _audit(self, owner: str, limit: int, pending_id: str | None
                     ) -> list[AuditEntry]:
        """Audit entries of ``owner`` (only those of ``pending_id`` if given), newest first."""

    async def append_messages(
        self, owner: str, conversation: str, messages: Sequence[ChatMessage], *, window: int,
        op_id: str | None = None,
    ) -> ChatAppend:
        """Append to the chat window of (``owner``, ``conversation``), keeping the newest
        ``window`` messages; what falls out is returned as ``overflow`` for extraction.

        ``op_id`` makes the call idempotent: a retry with the same id appends nothing
        and returns the window as it is, with no overflow (the first call's overflow
        went to its caller)."""
        check.owner_id(owner)
        if op_id is not None:
            check.op_id(op_id)
        conv = check.conversation_id(conversation)
        size = check.window(window)
        msgs = [check.message(m, self.max_content_bytes) for m in check.messages(messages)]
        kept, removed = await self._append_messages(owner, conv, msgs, size, op_id)
        return ChatAppend(window=tuple(kept), overflow=tuple(removed))

    async def load_window(self, owner: str, conversation: str) -> tuple[ChatMessage, ...]:
        """The messages in the window of (``owner``, ``conversation``), oldest first."""
        check.owner_id(owner)
        return tuple(await self._load_window(owner, check.conversation_id(conversation)))

    async def end_conversation(self, owner: str, conversation: str) -> tuple[ChatMessage, ...]:
        """Close the conversation: its window is deleted and returned (for extraction)."""
        check.owner_id(owner)
        return tuple(await self._end_conversation(owner, check.conversation_id(conversation)))

    async def audit(self, owner: str, *, limit: int = 100, pending_id: str | None = None
                    ) -> list[AuditEntry]:
        """Who confirmed or rejected which pending items of ``owner``, and when; newest first."""
        check.owner_id(owner)
        n = check.limit(limit)
        if pending_id is not None:
            check.ids([pending_id], "pending item id")
        return await self._audit(owner, n, pending_id)

    # -- forgetting an owner ------------------------------------------------------------

    async def forget(self, owner: str, *, by: str, counts: dict[str, int] | None = None,
                     op_id: str | None = None) -> Tombstone:
        """Remove every record of ``owner`` from this storage: rules, facts, status,
        pending items, chat windows, operation ids, the audit trail and, where the L2
        layer shares the storage, whatever of it is left. Leaves one tombstone (who,
        when, ``counts``) and returns it; a retry with the same ``op_id`` removes what
        may be left and returns the first tombstone instead of writing a second."""
        check.owner_id(owner)
        who = check.decider(by)
        if op_id is not None:
            check.op_id(op_id)
        tombstone = Tombstone(by=tombstones.actor(who, owner), counts=dict(counts or {}))
        return await self._forget(owner, tombstone, tombstones.op_key(owner, op_id))

    async def tombstones(self, *, limit: int = 100) -> list[Tombstone]:
        """The tombstones of forgotten owners, newest first."""
        return await self._tombstones(check.limit(limit))

    @abstractmethod
    async def _forget(self, owner: str, tombstone: Tombstone, op_key: str | None
                      ) -> Tombstone:
        """Delete every record of ``owner``; then record ``tombstone`` unless one is
        recorded under ``op_key`` already (return that one). Atomic where the backend
        has transactions; otherwise safe to repeat."""

    @abstractmethod
    async def _tombstones(self, limit: int) -> list[Tombstone]:
        """Recorded tombstones, newest first."""

    # -- conveniences: each builds one operation ------------------------------------

    async def add_rule(self, owner: str, content: str, *, source: str = "user"
                       ) -> MemoryRule | MemoryPendingItem:
        """Add a rule and return it (the existing one if the same text is already a rule);
        a new version of a current rule is queued as a correction of it and that pending
        item returned (``ops.reviewed``)."""
        op = AddRule(content, source, review_updates=True)
        return added(await self.apply(owner, [op]), op)

    async def add_fact(self, owner: str, content: str, *, source: str = "user"
                       ) -> MemoryFact | MemoryPendingItem:
        """Add a fact, as :meth:`add_rule` adds a rule."""
        op = AddFact(content, source, review_updates=True)
        return added(await self.apply(owner, [op]), op)

    async def set_status(
        self, owner: str, key: str, value: str, *, ttl_s: float | None = None
    ) -> MemorySnapshot:
        return await self.apply(owner, [SetStatus(key, value, ttl_s)])

    async def delete_status(self, owner: str, key: str) -> MemorySnapshot:
        return await self.apply(owner, [DeleteStatus(key)])


#: The longest chat window a conversation may keep.
MAX_WINDOW = check.MAX_WINDOW
