"""A reviewer's decision on a pending item, through the doors' memory interface
(``engine.doors.MemoryBackend``): the storage opened in this process, or a running
memory system, whose owner actor then applies it (one writer per owner; agents read
the decision at once).

A decision is answered as recorded (a ``HitlDecision``): written now, or already
decided before (by whom, when; ``applied`` False), never a second write.
"""

from __future__ import annotations

from ..engine import operations as ops
from ..engine.doors import MemoryBackend
from ..errors import PendingItemDecided, PendingItemNotFound
from ..extraction.service import HitlDecision
from ..models import AuditAction, AuditEntry

#: The most audit entries one page of the trail may reach back (the stores' limit).
AUDIT_REACH = 1000


async def decision_of(backend: MemoryBackend, owner: str, pending_id: str
                      ) -> AuditEntry | None:
    """The recorded decision on ``owner``'s item ``pending_id``, if there is one in reach."""
    trail = await backend.call(ops.audit, owner, AUDIT_REACH)
    return next((e for e in trail if e.pending_id == pending_id), None)


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
