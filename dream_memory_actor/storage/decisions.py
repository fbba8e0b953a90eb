"""A person's decision on a pending item, written with its audit entry in one transaction.

The audit trail records decisions, so only a decision writes to it: ``apply``
refuses ``AddAudit`` (``AuditNotWritable``), and :func:`decide` builds the entry
itself from the item as it is queued. The entry is written in the transaction
that removes the item from the queue, so the item must be queued when it
commits: of two decisions on one item the second finds it gone
(``PendingItemNotFound``, or the operation id already applied) and writes
nothing. Whether an item was decided is therefore never inferred from an entry
that was there before; an earlier entry of the same pending id (an id queued
again after its decision) is replaced by the new decision's.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from .. import validation as check
from .. import validation_l1 as check_l1
from ..errors import InvalidQuery, ItemNotFound
from ..models import AuditAction, AuditEntry, MemoryPendingItem, MemorySnapshot, utcnow
from .ops import AddAudit, AddFact, AddRule, L1Op, RemovePending, SetStatus, Supersede

if TYPE_CHECKING:
    from .base import StructuredStore

ACTIONS: tuple[AuditAction, ...] = ("confirmed", "rejected")


def decision_ops(item: MemoryPendingItem, action: AuditAction, by: str, edited: str | None,
                 now: datetime) -> tuple[list[L1Op], AuditEntry]:
    """The writes of deciding ``item`` and the entry that records it (pure).

    Confirming writes the item (``edited`` replaces its content or status value);
    a correction (``item.supersedes``) supersedes the item it names, which must still
    be current (else ``ItemNotFound``/``ItemSuperseded`` and nothing is written);
    a ``memory`` item has no L1 write, its caller stores it in L2 afterwards.
    """
    ops: list[L1Op] = [RemovePending(item.id)]
    written = None
    if action == "confirmed":
        written = edited or (item.value if item.kind == "status" else item.content) or ""
        if item.supersedes is not None and item.kind in ("rule", "fact"):
            ops.append(Supersede(item.supersedes, written, by,
                                 reason=f"confirmed correction {item.id}", source="confirmed"))
        elif item.kind == "rule":
            ops.append(AddRule(written, source="confirmed"))
        elif item.kind == "fact":
            ops.append(AddFact(written, source="confirmed"))
        elif item.kind == "status":
            ops.append(SetStatus(item.key or "", written))
    entry = AuditEntry(pending_id=item.id, action=action, by=by, at=now, item=item,
                       written=written)
    return ops, entry


async def decide(store: StructuredStore, owner: str, pending_id: str, action: AuditAction,
                 by: str, *, edited: str | None = None, now: datetime | None = None,
                 op_id: str | None = None) -> tuple[MemorySnapshot, AuditEntry] | None:
    """Decide on ``owner``'s queued item ``pending_id``: remove it, write it when
    confirmed, and record the audit entry, atomically.

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
    text = None if edited is None else check.content(edited, store.max_content_bytes,
                                                     "edited content")
    at = now or utcnow()
    snap = await store.load(owner, now=at)
    item = next((p for p in snap.pending if p.id == pending_id), None)
    if item is None:
        return None
    ops, entry = decision_ops(item, action, by, text, at)
    checked = check_l1.ops(ops, store.max_content_bytes, store.limits)
    try:
        new = await store._apply(owner, [*checked, AddAudit(entry)], at, op_id)
    except ItemNotFound as exc:  # the item a correction replaces is gone or superseded
        raise await store._refine_missing(owner, checked, exc) from None
    return new, entry
