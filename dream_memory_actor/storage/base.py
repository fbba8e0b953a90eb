"""The two storage interfaces business code depends on.

``StructuredStore`` (L1) has eight primitives: ``load`` a snapshot, ``_apply`` a list
of operations atomically (``ops.apply_ops`` is their meaning), read the owner's
``_history`` (closed rules and facts, kept status values), keep the L3 chat
``_window``s and list an owner's ``_conversations``, read the ``_audit`` trail of
decisions, ``_forget`` an owner and read the ``_tombstones`` erasures leave.
Superseding, histories, past snapshots, decisions and the chat operations are
composed here, once. ``VectorStore`` (L2,
defined in ``storage.vector`` and re-exported here) does the same for semantic
memories, so every backend stores, ranks and remembers alike.

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
from ..errors import (
    DuplicateId,
    InvalidQuery,
    ItemNotFound,
    ItemSuperseded,
    ProposalChanged,
    ProposalNotApplied,
    SupersessionCycle,
)
from ..history import (
    ItemHistory,
    ItemVersion,
    StatusChange,
    ancestors,
    as_of,
    chain,
    last_change,
)
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
from ..text import content_hash
from ..validation import l1 as check_l1
from . import tombstones
from .changes import ChangeCallback, Unwatch, no_feed
from .decisions import ACTIONS, decision_ops, undo_ops
from .lifecycle import DEFAULT_MAX_CONTENT_BYTES, _Lifecycle
from .ops import (
    AddAudit,
    AddFact,
    AddRule,
    DeleteStatus,
    L1Op,
    SetStatus,
    Supersede,
    added,
    pending_fingerprint,
)
from .vector import VectorStore

__all__ = ["DEFAULT_MAX_CONTENT_BYTES", "StructuredStore", "VectorStore", "new_item"]

#: "No limit" for reading an owner's whole audit trail.
ALL = 2**31 - 1


class StructuredStore(_Lifecycle, ABC):
    """L1: rules, facts, status and the pending queue of each owner; superseded items
    and status values in its history; the L3 chat windows and the audit trail beside."""

    #: Status entries and pending items can expire by themselves.
    supports_ttl: ClassVar[bool] = True
    #: ``watch`` reports the L1 writes of every process on this storage (see ``changes``).
    supports_change_feed: ClassVar[bool] = False
    #: ``owner_unit`` is all or nothing: what is written inside it is kept together or
    #: not at all (else the writes apply one by one, and a caller undoes them itself).
    atomic_units: ClassVar[bool] = False

    def owner_unit(self, owner: str, vector: VectorStore
                   ) -> AbstractAsyncContextManager[tuple[StructuredStore, VectorStore]]:
        """A unit of work on ``owner`` across its layers (an import): the stores to write
        it through. Where the backend has one (``atomic_units``: PostgreSQL, one
        transaction holding the owner's L1 and L2 locks; Redis, writes staged apart and
        moved in at once), what is written inside it is kept together or not at all;
        elsewhere the writes apply one by one."""
        return nullcontext((self, vector))

    async def watch(self, callback: ChangeCallback) -> Unwatch:
        """Call ``callback`` on this event loop with each L1 write committed on this
        storage, by any process (this one included), and with ``None`` after the feed
        reconnected (writes may have been missed). Returns the closer of the watch.

        Without a change feed (``supports_change_feed`` False, e.g. the in-memory
        store, which nothing outside this process can write) it never calls back.
        """
        return no_feed

    # -- primitives a backend implements ---------------------------------------------

    @abstractmethod
    async def load(self, owner: str, *, now: datetime | None = None) -> MemorySnapshot:
        """The owner's current snapshot (an empty one at version 0 for a new owner)."""

    @abstractmethod
    async def _apply(self, owner: str, ops: Sequence[L1Op], now: datetime,
                     op_id: str | None) -> MemorySnapshot:
        """Apply validated ``ops`` atomically, as ``ops.apply_ops`` does (its error raised
        before anything is written); keep what its ``HistoryLog`` adds to the owner's
        history and the entries of ``AddAudit`` operations (a decision and an undo per
        pending id at most: ``decisions.replaces`` says which entry a new one replaces),
        in the same transaction; return the new snapshot (version + 1).

        With an ``op_id`` already recorded for ``owner``, apply nothing and return
        the current snapshot; otherwise record ``op_id`` in the same transaction.
        """

    @abstractmethod
    async def _history(self, owner: str) -> tuple[list[ItemVersion], list[StatusChange]]:
        """Every closed rule and fact of ``owner``, oldest closed first, and the kept
        changes of its status keys, oldest first."""

    @abstractmethod
    async def _window(self, owner: str, conversation: str, messages: Sequence[ChatMessage],
                      keep: int | None, op_id: str | None
                      ) -> tuple[list[ChatMessage], list[ChatMessage]]:
        """Append ``messages`` to the conversation's window in order, then remove all but
        its newest ``keep`` messages (``None``: keep every one; 0: end the conversation);
        atomic per (owner, conversation). Return ``(window, removed)``, both oldest first
        (by arrival, not by ``created_at``). With an ``op_id`` already recorded for
        ``owner``, change nothing and return ``(window, [])``; otherwise record it in the
        same transaction (one op id space per owner, shared with ``_apply``'s)."""

    @abstractmethod
    async def _conversations(self, owner: str) -> list[str]:
        """The conversations of ``owner`` that have a chat window, in any order."""

    @abstractmethod
    async def _audit(self, owner: str, limit: int, pending_id: str | None
                     ) -> list[AuditEntry]:
        """Audit entries of ``owner`` (only those of ``pending_id`` if given: its decision
        and its undo), newest first."""

    @abstractmethod
    async def _forget(self, owner: str, tombstone: Tombstone | None, op_key: str | None
                      ) -> Tombstone | None:
        """Delete every record of ``owner``; then record ``tombstone`` unless one is
        recorded under ``op_key`` already (return that one; ``None``: record none).
        Atomic where the backend has transactions; otherwise safe to repeat."""

    @abstractmethod
    async def _tombstones(self, limit: int) -> list[Tombstone]:
        """Recorded tombstones, newest first."""

    # -- writes -----------------------------------------------------------------------

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
            check.op_id(op_id)
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
        if action == "confirmed" and item.status_expiry:
            await self._check_unchanged(owner, item)
        ops, entry = decision_ops(item, action, by, text, at)
        checked = check_l1.ops(ops, self.max_content_bytes, self.limits)
        try:
            new = await self._apply(owner, [*checked, AddAudit(entry)], at, op_id)
        except ItemNotFound as exc:  # the item a correction replaces is gone or superseded
            raise await self._refine_missing(owner, checked, exc) from None
        return new, entry

    async def undo_decision(self, owner: str, pending_id: str, by: str, *, restored: int,
                            expires_at: datetime | None = None, now: datetime | None = None,
                            op_id: str | None = None
                            ) -> tuple[MemorySnapshot, AuditEntry] | None:
        """Record that ``by`` undid the confirmed consolidation proposal ``pending_id``
        (``restored`` memories came back: its caller reversed them first) and queue the
        proposal again, atomically (see :mod:`.decisions`); the queued item expires at
        ``expires_at``.

        ``None`` when its undo is recorded already (nothing written);
        ``ProposalNotApplied`` when ``pending_id`` is no confirmed proposal. Returns the
        new snapshot and the entry this call tried to record (a retry of an applied
        ``op_id`` writes nothing: read the recorded entry with ``audit``).
        """
        check.owner_id(owner)
        check.ids([pending_id], "pending item id")
        if op_id is not None:
            check.op_id(op_id)
        who = check.decider(by)
        if isinstance(restored, bool) or not isinstance(restored, int) or restored < 0:
            raise InvalidQuery(f"restored must be a count of memories, got {restored!r}")
        at = now or utcnow()
        trail = await self._audit(owner, 2, pending_id)
        if any(e.action == "undone" for e in trail):
            return None
        confirmed = next((e for e in trail if e.action == "confirmed"
                          and e.item.proposal is not None), None)
        if confirmed is None:
            raise ProposalNotApplied(f"owner {owner!r} has no applied proposal {pending_id!r}")
        snap = await self.load(owner, now=at)
        if confirmed.item.status_expiry and confirmed.item.key in snap.status:
            raise ProposalChanged(
                f"proposal {pending_id!r} of owner {owner!r}: status "
                f"{confirmed.item.key!r} was set again since it was applied; nothing was "
                "written")
        fp = pending_fingerprint(confirmed.item)
        queued = next((p for p in snap.pending if pending_fingerprint(p) == fp), None)
        ops, entry = undo_ops(confirmed, who, restored, at, expires_at, queued)
        checked = check_l1.ops(ops, self.max_content_bytes, self.limits)
        return await self._apply(owner, [*checked, AddAudit(entry)], at, op_id), entry

    async def _check_unchanged(self, owner: str, item: MemoryPendingItem) -> None:
        """``ProposalChanged`` when the status value a queued expiry names changed since
        it was proposed, back to the same value included (its kept history says when
        it last changed). The value itself is checked again in the write
        (``DeleteStatus.value``)."""
        assert item.proposal is not None and item.key is not None
        was = item.proposal.touches[0].updated_at
        last = last_change(item.key, (await self._history(owner))[1])
        if last is not None and last != was:
            raise ProposalChanged(
                f"proposal {item.id!r} of owner {owner!r}: status {item.key!r} changed "
                f"since proposed; nothing was written")

    async def supersede(self, owner: str, item_id: str, new_content: str, *, by: str,
                        reason: str | None = None, source: str = "user",
                        now: datetime | None = None, op_id: str | None = None
                        ) -> MemoryRule | MemoryFact:
        """Replace the current rule or fact ``item_id`` by ``new_content``: the new item
        is written and the old one closed (kept in the history with ``by`` and
        ``reason``), atomically. Returns the new item.

        ``ItemNotFound`` for an id the owner has no current rule or fact under (another
        owner's included), ``ItemSuperseded`` if it was superseded already; nothing is
        written then. ``op_id`` makes the call idempotent.
        """
        snap = await self.apply(owner, [Supersede(item_id, new_content, by, reason, source)],
                                now=now, op_id=op_id)
        return new_item(snap, check.content(new_content, self.max_content_bytes))

    async def _check_supersessions(self, owner: str, ops: Sequence[L1Op]) -> None:
        """Refuse a ``Supersede`` naming its new item with an id of the owner's history:
        one of the items it descends from (a cycle) or another closed item."""
        named = [op for op in ops if isinstance(op, Supersede) and op.id is not None]
        if not named:
            return
        closed, _ = await self._history(owner)
        for op in named:
            for kind in ("rule", "fact"):
                if op.id in ancestors(op.item_id, kind, closed):
                    raise SupersessionCycle(
                        f"{kind} {op.id!r} was superseded by {op.item_id!r}, directly or "
                        "not: it cannot supersede it back")
            if any(v.id == op.id for v in closed):
                raise DuplicateId(f"owner {owner!r} has a closed item {op.id!r}; use a new id")

    async def _refine_missing(self, owner: str, ops: Sequence[L1Op], exc: ItemNotFound
                              ) -> ItemNotFound:
        """``ItemSuperseded`` when the missing item of a ``Supersede`` was closed, else
        ``exc``."""
        wanted = {op.item_id for op in ops if isinstance(op, Supersede)}
        closed, _ = await self._history(owner)
        for v in closed:
            if v.id in wanted:
                return ItemSuperseded(
                    f"{v.kind} {v.id!r} of owner {owner!r} was superseded by "
                    f"{v.superseded_by!r} at {v.valid_to}; supersede the current item")
        return exc

    # -- histories --------------------------------------------------------------------

    async def history(self, owner: str, item_id: str) -> ItemHistory:
        """The chain of versions ``item_id`` belongs to, oldest first (see
        ``history.chain``); ``ItemNotFound`` if the owner never had it (or deleted it)."""
        check.owner_id(owner)
        check.ids([item_id], "item id")
        snap = await self.load(owner)
        found = chain(item_id, snap, (await self._history(owner))[0])
        if found is None:
            raise ItemNotFound(f"owner {owner!r} has no rule or fact {item_id!r}")
        return found

    async def load_as_of(self, owner: str, at: datetime) -> MemorySnapshot:
        """The rules, facts and status ``owner`` had at ``at`` (see ``history.as_of``)."""
        check.owner_id(owner)
        t = check.past(at)
        snap = await self.load(owner)
        closed, changes = await self._history(owner)
        return as_of(snap, closed, changes, t)

    async def status_history(self, owner: str, key: str) -> list[StatusChange]:
        """The kept values of status ``key`` (``None``: deleted), oldest first."""
        check.owner_id(owner)
        wanted = check.status_key(key)
        return [c for c in (await self._history(owner))[1] if c.key == wanted]

    async def past(self, owner: str) -> tuple[list[ItemVersion], list[StatusChange]]:
        """Everything ``owner``'s history keeps (for export): the closed rules and facts,
        oldest closed first, and the kept status changes, oldest first."""
        return await self._history(check.owner_id(owner))

    # -- L3 chat windows and the audit trail -----------------------------------------

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
        kept, removed = await self._window(owner, conv, msgs, size, op_id)
        return ChatAppend(window=tuple(kept), overflow=tuple(removed))

    async def load_window(self, owner: str, conversation: str) -> tuple[ChatMessage, ...]:
        """The messages in the window of (``owner``, ``conversation``), oldest first."""
        check.owner_id(owner)
        kept, _ = await self._window(owner, check.conversation_id(conversation), [], None,
                                     None)
        return tuple(kept)

    async def end_conversation(self, owner: str, conversation: str) -> tuple[ChatMessage, ...]:
        """Close the conversation: its window is deleted and returned (for extraction)."""
        check.owner_id(owner)
        _, removed = await self._window(owner, check.conversation_id(conversation), [], 0,
                                        None)
        return tuple(removed)

    async def conversations(self, owner: str) -> list[str]:
        """The conversations of ``owner`` that have a chat window now, sorted."""
        return sorted(await self._conversations(check.owner_id(owner)))

    async def audit(self, owner: str, *, limit: int | None = 100,
                    pending_id: str | None = None) -> list[AuditEntry]:
        """Who confirmed or rejected which pending items of ``owner``, and when, and who
        undid which confirmed proposals; newest first (``limit=None``: every entry, as an
        export reads them)."""
        check.owner_id(owner)
        n = ALL if limit is None else check.limit(limit)
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
        recorded = await self._forget(owner, tombstone, tombstones.op_key(owner, op_id))
        assert recorded is not None
        return recorded

    async def clear(self, owner: str) -> None:
        """Remove every record of ``owner`` and leave no tombstone: what an import that
        failed had written into an owner that was empty before it (``atomic_units``
        False). Not a way to forget an owner: ``forget`` is, and it leaves its trace."""
        await self._forget(check.owner_id(owner), None, None)

    async def tombstones(self, *, limit: int = 100) -> list[Tombstone]:
        """The tombstones of forgotten owners, newest first."""
        return await self._tombstones(check.limit(limit))

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


def new_item(snap: MemorySnapshot, text: str) -> MemoryRule | MemoryFact:
    """The current rule (else fact) of ``snap`` with the text ``text``."""
    h = content_hash(text)
    items: list[MemoryRule | MemoryFact] = [*snap.rules, *snap.facts]
    for item in items:
        if content_hash(item.content) == h:
            return item
    raise ItemNotFound("the new item was superseded or removed before this retry answered")


#: The longest chat window a conversation may keep.
MAX_WINDOW = check.MAX_WINDOW
