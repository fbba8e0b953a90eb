"""The argument rules of L1 writes: operations, pending items and audit entries
(the rules they build on are in ``validation``; applied at the same two places)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..errors import InvalidContent, InvalidQuery
from ..limits import DEFAULT_LIMITS, Limits
from ..models import PROPOSAL_KINDS, AuditEntry, MemoryPendingItem
from . import content, decider, ids, source, status_key, ttl_s, utf8_size

if TYPE_CHECKING:
    from ..storage.ops import L1Op


def ops(values: object, max_bytes: int, limits: Limits = DEFAULT_LIMITS) -> list[L1Op]:
    """Check L1 operations; the operations with their text normalized."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
        raise InvalidQuery("apply needs a non-empty list of operations")
    return [_op(op, max_bytes, limits) for op in values]


def _op(op: object, max_bytes: int, limits: Limits) -> L1Op:
    # Imported here: the storage package imports this module.
    from ..storage.ops import (
        AddAudit,
        AddFact,
        AddPending,
        AddRule,
        DeleteStatus,
        RemoveFact,
        RemovePending,
        RemoveRule,
        SetStatus,
        Supersede,
    )

    if isinstance(op, Supersede):
        ids([op.item_id], "item id")
        if op.id is not None:
            ids([op.id])
        reason = None if op.reason is None else pending_field(op.reason, "reason", limits)
        return Supersede(op.item_id, content(op.content, max_bytes), decider(op.by), reason,
                         source(op.source), op.id)
    if isinstance(op, (AddRule, AddFact)):
        text = content(op.content, max_bytes)
        ids([op.id])
        return type(op)(content=text, source=source(op.source), id=op.id,
                        review_updates=op.review_updates is True)
    if isinstance(op, (RemoveRule, RemoveFact, RemovePending)):
        ids([op.id])
        return op
    if isinstance(op, SetStatus):
        return SetStatus(status_key(op.key), content(op.value, max_bytes, what="status value"),
                         ttl_s(op.ttl_s))
    if isinstance(op, DeleteStatus):
        return DeleteStatus(status_key(op.key), None if op.value is None
                            else content(op.value, max_bytes, what="status value"))
    if isinstance(op, AddPending):
        return AddPending(pending_item(op.item, max_bytes, limits))
    if isinstance(op, AddAudit):
        from ..errors import AuditNotWritable

        raise AuditNotWritable(
            "audit entries are written by confirm and reject only, not by apply")
    raise InvalidQuery(f"unknown operation {op!r}")


def pending_field(value: object, what: str, limits: Limits = DEFAULT_LIMITS) -> str:
    """Check a side field of a pending item (``evidence``, ``source``): text without NUL,
    at most ``limits.pending_field_bytes``."""
    if not isinstance(value, str):
        raise InvalidQuery(f"{what} must be a string, got {type(value).__name__}")
    if "\x00" in value:
        raise InvalidContent(f"{what} must not contain NUL characters")
    size = utf8_size(value, what)
    if size > limits.pending_field_bytes:
        raise InvalidContent(
            f"{what} is {size} bytes; the limit is {limits.pending_field_bytes} bytes")
    return value


#: The most memories one consolidation proposal touches (a merge of a larger cluster is
#: proposed in parts).
MAX_TOUCHED = 16


def pending_item(item: object, max_bytes: int, limits: Limits = DEFAULT_LIMITS
                 ) -> MemoryPendingItem:
    """Check a pending item before it is queued; its text normalized."""
    if not isinstance(item, MemoryPendingItem):
        raise InvalidQuery(f"AddPending needs a MemoryPendingItem, got {item!r}")
    ids([item.id])
    sides: dict[str, Any] = {"source": pending_field(item.source, "pending source", limits)}
    if item.evidence is not None:
        sides["evidence"] = pending_field(item.evidence, "pending evidence", limits)
    if (item.proposal is None) == (item.kind in PROPOSAL_KINDS):
        raise InvalidQuery("a merge, supersede or expire pending item carries a proposal, "
                           "and no other kind does")
    if item.status_expiry:
        assert item.proposal is not None
        key, value = status_key(item.key), content(item.value, max_bytes, "status value")
        if [(t.id, t.content) for t in item.proposal.touches] != [(key, value)]:
            raise InvalidQuery("a status expiry touches its one status key, as it was")
        if item.proposal.keep is not None or item.proposal.result is not None or (
                item.content is not None or item.supersedes is not None):
            raise InvalidQuery("a status expiry keeps nothing and has no content")
        return item.model_copy(update={"key": key, "value": value, **sides})
    if item.proposal is not None:
        touched = [t.id for t in item.proposal.touches]
        ids(touched, "memory id")
        if not 1 <= len(set(touched)) == len(touched) <= MAX_TOUCHED:
            raise InvalidQuery(f"a proposal touches 1 to {MAX_TOUCHED} distinct memories")
        if item.proposal.keep is not None and item.proposal.keep not in touched:
            raise InvalidQuery("a proposal keeps one of the memories it touches")
        if item.key is not None or item.value is not None or item.supersedes is not None:
            raise InvalidQuery("a proposal has no key, value or superseded item")
        text = None if item.content is None else content(item.content, max_bytes)
        return item.model_copy(update={"content": text, **sides})
    if item.kind == "status":
        if item.value is None:
            raise InvalidQuery("a status pending item needs a value")
        if item.content is not None:
            raise InvalidQuery("a status pending item has a key and a value, not content")
        return item.model_copy(update={
            "key": status_key(item.key),
            "value": content(item.value, max_bytes, "status value"), **sides,
        })
    if item.key is not None or item.value is not None:
        raise InvalidQuery(f"a {item.kind} pending item has content, not a key and value")
    if item.supersedes is not None or item.supersedes_content is not None:
        if item.kind not in ("rule", "fact") or item.supersedes is None:
            raise InvalidQuery("only a rule or fact pending item supersedes, and it names "
                               "the id of the item it replaces")
        ids([item.supersedes], "superseded item id")
        if item.supersedes_content is not None:
            sides["supersedes_content"] = pending_field(item.supersedes_content,
                                                        "superseded content", limits)
    return item.model_copy(update={"content": content(item.content, max_bytes), **sides})


def audit_entry(entry: object, max_bytes: int) -> AuditEntry:
    """Check a decision before it is recorded in the audit trail."""
    if not isinstance(entry, AuditEntry):
        raise InvalidQuery(f"AddAudit needs an AuditEntry, got {entry!r}")
    ids([entry.id, entry.pending_id, *([] if entry.requeued is None else [entry.requeued])])
    written = (None if entry.written is None
               else content(entry.written, max_bytes, "written content"))
    return entry.model_copy(update={"by": decider(entry.by), "written": written,
                                    "item": pending_item(entry.item, max_bytes)})
