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

An undo of a confirmed consolidation proposal is recorded as an entry of its own
(``"undone"``) beside the confirmation, by ``StructuredStore.undo_decision`` with
:func:`undo_ops`, in the transaction that queues the proposal again. Its caller
reversed the memories first (``VectorStore.undo_proposal``, which refuses when they
changed since: nothing is recorded then); the operation id ``hitl-undo:<pending id>``
makes a retry record it once. An id holds at most one decision and one undo: a new
decision on it replaces both, an undo replaces an earlier undo.
"""

from __future__ import annotations

from datetime import datetime

from ..errors import InvalidQuery
from ..models import AuditAction, AuditEntry, MemoryPendingItem, new_id
from .ops import (
    AddFact,
    AddPending,
    AddRule,
    DeleteStatus,
    L1Op,
    RemovePending,
    SetStatus,
    Supersede,
)

#: What ``decide`` records: a decision on a queued item.
ACTIONS: tuple[AuditAction, ...] = ("confirmed", "rejected")
#: The operation id under which the undo of proposal ``<pending id>`` is recorded.
UNDO_OP = "hitl-undo:"


def decision_ops(item: MemoryPendingItem, action: AuditAction, by: str, edited: str | None,
                 now: datetime) -> tuple[list[L1Op], AuditEntry]:
    """The writes of deciding ``item`` and the entry that records it (pure).

    Confirming writes the item (``edited`` replaces its content or status value);
    a correction (``item.supersedes``) supersedes the item it names, which must still
    be current (else ``ItemNotFound``/``ItemSuperseded`` and nothing is written);
    a ``memory`` item has no L1 write, its caller stores it in L2 afterwards, and a
    consolidation proposal none either: its caller applied it in L2 before. A status
    expiry deletes its key, still as it was proposed (else ``ProposalChanged``).
    """
    ops: list[L1Op] = [RemovePending(item.id)]
    written = None
    if action == "confirmed" and item.status_expiry:
        if edited is not None:
            raise InvalidQuery(f"proposal {item.id!r} lets a status value expire: it keeps "
                               "no text, so there is nothing to edit; nothing was written")
        ops.append(DeleteStatus(item.key or "", item.value))
    elif action == "confirmed":
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


def undo_ops(confirmed: AuditEntry, by: str, restored: int, now: datetime,
             expires_at: datetime | None, queued: MemoryPendingItem | None = None
             ) -> tuple[list[L1Op], AuditEntry]:
    """The writes of recording the undo of the proposal ``confirmed`` decided, and the
    entry that records it (pure): the proposal queued again as it was queued before
    (a new id, since the old one's operations are spent; ``expires_at`` anew), unless
    ``queued`` is the same proposal waiting already (a pass made it again meanwhile).
    A status expiry sets its value again (with no expiry of its own, as it had none):
    a change of the key now, which the proposal waiting again names as its last.
    """
    ops: list[L1Op] = []
    item = confirmed.item
    if item.status_expiry and item.proposal is not None:
        ops.append(SetStatus(item.key or "", item.value or ""))
        item = item.model_copy(update={"proposal": item.proposal.model_copy(update={
            "touches": tuple(t.model_copy(update={"updated_at": now})
                             for t in item.proposal.touches)})})
    if queued is None:
        queued = item.model_copy(update={"id": new_id(), "created_at": now,
                                         "expires_at": expires_at})
        ops.append(AddPending(queued))
    entry = AuditEntry(pending_id=confirmed.pending_id, action="undone", by=by, at=now,
                       item=confirmed.item, restored=restored, requeued=queued.id)
    return ops, entry


def replaces(new: AuditEntry, earlier: AuditEntry) -> bool:
    """Whether recording ``new`` replaces the recorded ``earlier`` (every backend keeps
    this rule): a decision replaces every entry of its pending id, an undo the undo."""
    return earlier.pending_id == new.pending_id and (
        new.action != "undone" or earlier.action == "undone")
