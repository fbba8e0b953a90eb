"""A person's decision on a pending item, written with its audit entry in one transaction.

The audit trail records decisions, so only a decision writes to it: ``apply``
refuses ``AddAudit`` (``AuditNotWritable``), and ``StructuredStore.decide`` builds the entry
with :func:`decision_ops`
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

from ..models import AuditAction, AuditEntry, MemoryPendingItem
from .ops import AddFact, AddRule, L1Op, RemovePending, SetStatus, Supersede

ACTIONS: tuple[AuditAction, ...] = ("confirmed", "rejected")


def decision_ops(item: MemoryPendingItem, action: AuditAction, by: str, edited: str | None,
                 now: datetime) -> tuple[list[L1Op], AuditEntry]:
    """The writes of deciding ``item`` and the entry that records it (pure).

    Confirming writes the item (``edited`` replaces its content or status value);
    a correction (``item.supersedes``) supersedes the item it names, which must still
    be current (else ``ItemNotFound``/``ItemSuperseded`` and nothing is written);
    a ``memory`` item has no L1 write, its caller stores it in L2 afterwards, and a
    consolidation proposal none either: its caller applied it in L2 before.
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
