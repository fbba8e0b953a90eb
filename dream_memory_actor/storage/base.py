"""The two storage interfaces business code depends on (ADR-001).

``StructuredStore`` (L1) has two abstract methods: ``load`` a snapshot and
``_apply`` a list of operations atomically; four primitives keep the L3 chat
windows and the audit trail of HITL decisions. ``VectorStore`` (L2, defined in
``storage.vector`` and re-exported here) has a handful of primitives; dedup
semantics, validation and hybrid ranking live there, once, so every backend ranks
the same data the same way.

Public methods validate their arguments before any I/O and raise ``InvalidInput``
subclasses; nothing is written when they do.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from datetime import datetime
from typing import ClassVar, TypeVar

from .. import validation as check
from ..errors import InvalidQuery
from ..models import (
    AuditEntry,
    ChatAppend,
    ChatMessage,
    MemoryFact,
    MemoryPendingItem,
    MemoryRule,
    MemorySnapshot,
    utcnow,
)
from .lifecycle import DEFAULT_MAX_CONTENT_BYTES, _Lifecycle
from .ops import (
    AddAudit,
    AddFact,
    AddPending,
    AddRule,
    DeleteStatus,
    L1Op,
    RemoveFact,
    RemovePending,
    RemoveRule,
    SetStatus,
)
from .vector import VectorStore

__all__ = ["DEFAULT_MAX_CONTENT_BYTES", "StructuredStore", "VectorStore"]

class StructuredStore(_Lifecycle, ABC):
    """L1: rules, facts, status and the pending queue of each owner."""

    #: Status entries and pending items can expire by themselves.
    supports_ttl: ClassVar[bool] = True

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
            check.ids([op_id], "operation id")
        if not ops:
            raise InvalidQuery("apply needs at least one operation")
        return await self._apply(owner, self.validate_ops(ops), now or utcnow(), op_id)

    def validate_ops(self, ops: Sequence[L1Op]) -> list[L1Op]:
        """The operations with their text normalized, or ``InvalidInput``."""
        out: list[L1Op] = []
        limit = self.max_content_bytes
        for op in ops:
            if isinstance(op, (AddRule, AddFact)):
                text = check.content(op.content, limit)
                check.ids([op.id])
                out.append(type(op)(content=text, source=_source(op.source), id=op.id))
            elif isinstance(op, (RemoveRule, RemoveFact, RemovePending)):
                check.ids([op.id])
                out.append(op)
            elif isinstance(op, SetStatus):
                key = check.status_key(op.key)
                value = check.content(op.value, limit, what="status value")
                if op.ttl_s is not None and not (
                    isinstance(op.ttl_s, (int, float)) and 0 < op.ttl_s < 10 * 365 * 86400
                ):
                    raise InvalidQuery(
                        f"ttl_s must be a positive number of seconds, got {op.ttl_s!r}")
                out.append(SetStatus(key, value, op.ttl_s))
            elif isinstance(op, DeleteStatus):
                out.append(DeleteStatus(check.status_key(op.key)))
            elif isinstance(op, AddPending):
                out.append(AddPending(self._validate_pending(op.item)))
            elif isinstance(op, AddAudit):
                out.append(AddAudit(self._validate_audit(op.entry)))
            else:
                raise InvalidQuery(f"unknown operation {op!r}")
        return out

    def _validate_pending(self, item: MemoryPendingItem) -> MemoryPendingItem:
        if not isinstance(item, MemoryPendingItem):
            raise InvalidQuery(f"AddPending needs a MemoryPendingItem, got {item!r}")
        check.ids([item.id])
        if item.kind == "status":
            if item.value is None:
                raise InvalidQuery("a status pending item needs a value")
            return item.model_copy(
                update={
                    "key": check.status_key(item.key),
                    "value": check.content(item.value, self.max_content_bytes, "status value"),
                }
            )
        return item.model_copy(
            update={"content": check.content(item.content, self.max_content_bytes)}
        )

    def _validate_audit(self, entry: AuditEntry) -> AuditEntry:
        if not isinstance(entry, AuditEntry):
            raise InvalidQuery(f"AddAudit needs an AuditEntry, got {entry!r}")
        check.ids([entry.id, entry.pending_id])
        written = (None if entry.written is None
                   else check.content(entry.written, self.max_content_bytes, "written content"))
        return entry.model_copy(update={"by": _source(entry.by), "written": written,
                                        "item": self._validate_pending(entry.item)})

    # -- L3 chat window and the audit trail ------------------------------------------
    #
    # Every backend implements the four primitives below, and keeps the entries of
    # ``AddAudit`` operations in ``_apply``.

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
            check.ids([op_id], "operation id")
        conv = _conversation_id(conversation)
        size = _window(window)
        if isinstance(messages, (str, ChatMessage)):
            raise InvalidQuery("messages must be a sequence of ChatMessage")
        msgs = [self._validate_message(m) for m in messages]
        kept, removed = await self._append_messages(owner, conv, msgs, size, op_id)
        return ChatAppend(window=tuple(kept), overflow=tuple(removed))

    async def load_window(self, owner: str, conversation: str) -> tuple[ChatMessage, ...]:
        """The messages in the window of (``owner``, ``conversation``), oldest first."""
        check.owner_id(owner)
        return tuple(await self._load_window(owner, _conversation_id(conversation)))

    async def end_conversation(self, owner: str, conversation: str) -> tuple[ChatMessage, ...]:
        """Close the conversation: its window is deleted and returned (for extraction)."""
        check.owner_id(owner)
        return tuple(await self._end_conversation(owner, _conversation_id(conversation)))

    async def audit(self, owner: str, *, limit: int = 100, pending_id: str | None = None
                    ) -> list[AuditEntry]:
        """Who confirmed or rejected which pending items of ``owner``, and when; newest first."""
        check.owner_id(owner)
        n = check.limit(limit)
        if pending_id is not None:
            check.ids([pending_id], "pending item id")
        return await self._audit(owner, n, pending_id)

    def _validate_message(self, message: ChatMessage) -> ChatMessage:
        if not isinstance(message, ChatMessage):
            raise InvalidQuery(f"expected a ChatMessage, got {type(message).__name__}")
        text = check.content(message.content, self.max_content_bytes, "message content")
        return message if text == message.content else message.model_copy(
            update={"content": text})

    # -- conveniences: each builds one operation ------------------------------------

    async def add_rule(self, owner: str, content: str, *, source: str = "user") -> MemoryRule:
        """Add a rule and return it (the existing one if the same text is already a rule)."""
        op = AddRule(content, source)
        snap = await self.apply(owner, [op])
        text = check.content(content, self.max_content_bytes)
        return _find_by_text(snap.rules, text)

    async def add_fact(self, owner: str, content: str, *, source: str = "user") -> MemoryFact:
        """Add a fact and return it (the existing one if the same text is already a fact)."""
        snap = await self.apply(owner, [AddFact(content, source)])
        text = check.content(content, self.max_content_bytes)
        return _find_by_text(snap.facts, text)

    async def set_status(
        self, owner: str, key: str, value: str, *, ttl_s: float | None = None
    ) -> MemorySnapshot:
        return await self.apply(owner, [SetStatus(key, value, ttl_s)])

    async def delete_status(self, owner: str, key: str) -> MemorySnapshot:
        return await self.apply(owner, [DeleteStatus(key)])


def _source(value: object) -> str:
    if not isinstance(value, str) or not 0 < len(value) <= 64 or "\x00" in value:
        raise InvalidQuery(f"source must be a short non-empty string, got {value!r}")
    return value


#: The longest chat window a conversation may keep.
MAX_WINDOW = 10_000


def _conversation_id(value: object) -> str:
    # Same alphabet as owner ids: safe in keys, lock names and log lines.
    if not isinstance(value, str) or not check.OWNER_ID_PATTERN.fullmatch(value):
        raise InvalidQuery(
            f"invalid conversation id {value!r}: use 1-128 characters of A-Z a-z 0-9 . _ : @ -, "
            "starting with a letter or digit"
        )
    return value


def _window(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_WINDOW:
        raise InvalidQuery(f"window must be an integer in 1..{MAX_WINDOW}, got {value!r}")
    return value


_Item = TypeVar("_Item", MemoryRule, MemoryFact)


def _find_by_text(items: Sequence[_Item], text: str) -> _Item:
    from ..text import content_hash

    h = content_hash(text)
    return next(i for i in items if content_hash(i.content) == h)
