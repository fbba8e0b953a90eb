"""A reviewer's decision on a pending item, through the doors' memory interface
(``engine.doors.MemoryBackend``): the storage opened in this process, or a running
memory system, whose owner actor then applies it (one writer per owner; agents read
the decision at once).

A decision is answered as recorded (a ``HitlDecision``): written now, or already
decided before (by whom, when; ``applied`` False), never a second write. A confirmed
consolidation proposal can be undone (``operations.undo_proposal``): the undo is an
entry of the audit trail of its own, and the proposal waits in the queue again. The
trail shows which confirmed proposals are still in place (:func:`in_place`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from ..engine import operations as ops
from ..engine.doors import MemoryBackend
from ..errors import MemoryNotFound, PendingItemDecided, PendingItemNotFound
from ..extraction.service import HitlDecision
from ..models import AuditAction, AuditEntry

#: The most audit entries one page of the trail may reach back (the stores' limit).
AUDIT_REACH = 1000


async def decision_of(backend: MemoryBackend, owner: str, pending_id: str
                      ) -> AuditEntry | None:
    """The recorded decision on ``owner``'s item ``pending_id``, if there is one in reach."""
    trail = await backend.call(ops.audit, owner, AUDIT_REACH)
    return next((e for e in trail if e.pending_id == pending_id and e.action != "undone"),
                None)


async def decide(backend: MemoryBackend, owner: str, pending_id: str, action: AuditAction,
                 by: str, edited: str | None) -> HitlDecision:
    """Confirm (``edited``: the text to write instead) or reject ``owner``'s pending item."""
    try:
        if action == "confirmed":
            return await backend.call(ops.confirm, owner, pending_id, by, edited)
        return await backend.call(ops.reject, owner, pending_id, by)
    except PendingItemDecided:  # decided the other way: report that decision
        entry = await decision_of(backend, owner, pending_id)
    if entry is None:  # raced away and not in reach: say so plainly
        raise PendingItemNotFound(f"owner {owner!r} has no pending item {pending_id!r}")
    return HitlDecision(entry=entry, applied=False)


async def in_place(backend: MemoryBackend, owner: str, entries: Iterable[AuditEntry],
                   trail: Iterable[AuditEntry]) -> dict[str, bool]:
    """For each confirmed consolidation proposal of ``entries``, by pending id: whether its
    change is in place (it can be undone) or was undone (an undo of it is in ``trail``,
    the audit trail from its newest entry to ``entries`` at least: an undo is newer than
    the confirmation it reverses). A proposal whose memory is gone altogether (deleted,
    forgotten) is left out."""
    undone = {e.pending_id for e in trail if e.action == "undone"}
    confirmed = [e for e in entries if e.action == "confirmed" and e.item.proposal is not None]

    async def applied(entry: AuditEntry) -> bool | None:
        if entry.pending_id in undone:
            return False
        if entry.item.status_expiry:  # its undo sets the value again: refused if set since
            return True
        prop = entry.item.proposal
        assert prop is not None
        closed = next(t.id for t in prop.touches if t.id != prop.keep)
        try:
            await backend.call(ops.memory_history, owner, closed)
        except MemoryNotFound:
            return None
        return True

    found = await asyncio.gather(*(applied(e) for e in confirmed))
    return {e.pending_id: done for e, done in zip(confirmed, found, strict=True)
            if done is not None}
