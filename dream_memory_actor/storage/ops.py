"""Structured (L1) write operations and their meaning, as pure data and functions.

A write to the structured store is a list of operations applied atomically to
one owner. :func:`apply_ops` is the reference semantics: the in-memory backend
uses it directly, the other backends must agree with it (the contract suite
checks), and the owner actors use it to keep their live snapshot current.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Union, overload

from ..errors import (
    DuplicateId,
    FactNotFound,
    InvalidContent,
    InvalidStatusKey,
    ItemNotFound,
    PendingItemNotFound,
    ProposalChanged,
    RuleNotFound,
    SupersessionCycle,
    UnknownStatusKey,
)
from ..history import HistoryLog, ItemKind, StatusChange, closed_version
from ..models import (
    AuditEntry,
    FrozenMap,
    MemoryFact,
    MemoryPendingItem,
    MemoryRule,
    MemorySnapshot,
    new_epoch,
    new_id,
)
from ..text import content_hash
from .dedup import updated_item


@dataclass(frozen=True)
class AddRule:
    """Add a behaviour rule; an existing rule with the same text (case and spaces aside) is
    kept. With ``review_updates``, a rule that is a new version of a current one (another
    value, name or negation: :func:`reviewed`) is queued as a correction of it instead."""

    content: str
    source: str = "user"
    id: str = field(default_factory=new_id)
    review_updates: bool = False


@dataclass(frozen=True)
class RemoveRule:
    id: str


@dataclass(frozen=True)
class AddFact:
    """Add a fact; an existing fact with the same text is kept. ``review_updates`` as for
    :class:`AddRule`."""

    content: str
    source: str = "user"
    id: str = field(default_factory=new_id)
    review_updates: bool = False


@dataclass(frozen=True)
class RemoveFact:
    id: str


@dataclass(frozen=True)
class SetStatus:
    """Set a status entry; ``ttl_s`` makes it expire by itself."""

    key: str
    value: str
    ttl_s: float | None = None


@dataclass(frozen=True)
class DeleteStatus:
    """Delete a status entry; an unknown key is an error (``UnknownStatusKey``).

    With ``value``, only the entry as a status expiry was proposed for: still that
    value, with no expiry of its own; otherwise (the key gone too) ``ProposalChanged``,
    so a value set since is never deleted by an older decision."""

    key: str
    value: str | None = None


@dataclass(frozen=True)
class AddPending:
    """Queue an item for confirmation; the same candidate already queued is kept once."""

    item: MemoryPendingItem


@dataclass(frozen=True)
class RemovePending:
    """Remove a pending item (after it was confirmed or rejected)."""

    id: str


@dataclass(frozen=True)
class AddAudit:
    """Record a person's decision on a pending item, in the same transaction as the write.

    The audit trail is not part of the snapshot (only the version moves). One
    entry per pending item: a second entry for the same ``pending_id`` is
    ignored, the first decision stands. Read it with ``StructuredStore.audit``.
    """

    entry: AuditEntry


@dataclass(frozen=True)
class Supersede:
    """Replace the current rule or fact ``item_id`` by ``content``, recording who did it
    (``by``) and why: the old item is closed (kept in the owner's history, see
    ``history``), the new one written, atomically. If the owner already has an item of
    that kind with the new text, the old one is closed in its favour and nothing is
    added. ``id`` names the new item (generated when ``None``)."""

    item_id: str
    content: str
    by: str
    reason: str | None = None
    source: str = "user"
    id: str | None = None


L1Op = Union[  # noqa: UP007 - a runtime alias; "X | Y" of classes needs 3.10 at import
    AddRule, RemoveRule, AddFact, RemoveFact, SetStatus, DeleteStatus, AddPending, RemovePending,
    AddAudit, Supersede,
]


def pending_fingerprint(item: MemoryPendingItem) -> str:
    """Identity of a pending candidate: the same candidate extracted twice has one fingerprint."""
    if item.status_expiry:  # the same value of the same key
        return f"expire:status:{item.key}={content_hash(item.value or '')}"
    if item.proposal is not None:  # the same change of the same memories
        return f"{item.kind}:" + ",".join(sorted(t.id for t in item.proposal.touches))
    if item.kind == "status":
        return f"status:{item.key}={content_hash(item.value or '')}"
    if item.supersedes is not None:  # a correction is another candidate than the addition
        return f"{item.kind}:{content_hash(item.content or '')}>{item.supersedes}"
    return f"{item.kind}:{content_hash(item.content or '')}"


#: How much of the replaced item's text a queued correction shows (a pending side field).
SHOWN_CHARS = 2000


def reviewed(op: L1Op, rules: Sequence[MemoryRule], facts: Sequence[MemoryFact],
             now: datetime) -> L1Op:
    """The operation a write applies for ``op`` against the owner's current ``rules`` and
    ``facts``: ``op`` itself, except an ``AddRule``/``AddFact`` with ``review_updates``
    whose text is a new version of a current item of its kind (``dedup.updated_item``):
    that one becomes a pending correction naming the item (the op's id, no expiry), so
    two contradicting items never stand side by side without a person's decision.
    Every backend applies this at write time, under the owner's lock."""
    if not isinstance(op, (AddRule, AddFact)) or not op.review_updates:
        return op
    kind = "rule" if isinstance(op, AddRule) else "fact"
    found = updated_item(rules if kind == "rule" else facts, op.content)
    if found is None:
        return op
    old, why = found
    return AddPending(MemoryPendingItem(
        id=op.id, kind=kind, content=op.content, confidence=1.0, source=op.source,
        created_at=now, evidence=f"would replace {kind} {old.id!r}: {why}",
        supersedes=old.id, supersedes_content=old.content[:SHOWN_CHARS]))


@overload
def added(snap: MemorySnapshot, op: AddRule) -> MemoryRule | MemoryPendingItem: ...
@overload
def added(snap: MemorySnapshot, op: AddFact) -> MemoryFact | MemoryPendingItem: ...
def added(snap: MemorySnapshot, op: AddRule | AddFact
          ) -> MemoryRule | MemoryFact | MemoryPendingItem:
    """What ``op`` left in ``snap`` (the snapshot after it): the rule or fact with its text
    (an existing one is kept), else the correction it was queued as (:func:`reviewed`).
    ``RuleNotFound``/``FactNotFound`` when neither is there any more (a retried add whose
    item another writer removed since)."""
    items: Sequence[MemoryRule | MemoryFact] = (
        snap.rules if isinstance(op, AddRule) else snap.facts)
    h = content_hash(op.content)
    found = next((i for i in items if content_hash(i.content) == h), None)
    if found is not None:
        return found
    kind = "rule" if isinstance(op, AddRule) else "fact"
    queued = next((p for p in snap.pending if p.id == op.id or (
        p.kind == kind and p.supersedes is not None and content_hash(p.content or "") == h)),
        None)
    if queued is not None:
        return queued
    raise (RuleNotFound if kind == "rule" else FactNotFound)(
        f"the {kind} was written, then removed by another writer before this answer")


def apply_ops(snap: MemorySnapshot, ops: Sequence[L1Op], now: datetime,
              max_status_keys: int | None = None, log: HistoryLog | None = None
              ) -> MemorySnapshot:
    """The snapshot after ``ops``, or an error (and no change) if one cannot apply.

    Expired status entries and pending items are dropped first, so deleting an
    expired key is an ``UnknownStatusKey`` as it is on every backend. An id the
    owner already uses for other content is a ``DuplicateId``; more than
    ``max_status_keys`` status keys after ``ops`` an ``InvalidStatusKey`` (unless ``ops``
    add none: an owner over a lowered cap can still update and delete).

    With ``log``, what the write adds to the owner's history is appended to it: the
    items ``Supersede`` closes, and each status change (a value or expiry that differs
    from the current one, or a deletion).
    """
    snap = snap.live(now)
    rules = list(snap.rules)
    facts = list(snap.facts)
    status = dict(snap.status)
    expires = dict(snap.status_expires_at)
    pending = list(snap.pending)
    for op in ops:
        op = reviewed(op, rules, facts, now)
        if isinstance(op, AddRule):
            if all(content_hash(r.content) != content_hash(op.content) for r in rules):
                _unused_id(snap.owner, "rule", op.id, rules)
                rules.append(
                    MemoryRule(id=op.id, content=op.content, source=op.source, created_at=now)
                )
        elif isinstance(op, AddFact):
            if all(content_hash(f.content) != content_hash(op.content) for f in facts):
                _unused_id(snap.owner, "fact", op.id, facts)
                facts.append(
                    MemoryFact(id=op.id, content=op.content, source=op.source, created_at=now)
                )
        elif isinstance(op, RemoveRule):
            if not any(r.id == op.id for r in rules):
                raise RuleNotFound(f"owner {snap.owner!r} has no rule {op.id!r}")
            rules = [r for r in rules if r.id != op.id]
        elif isinstance(op, RemoveFact):
            if not any(f.id == op.id for f in facts):
                raise FactNotFound(f"owner {snap.owner!r} has no fact {op.id!r}")
            facts = [f for f in facts if f.id != op.id]
        elif isinstance(op, SetStatus):
            until = None if op.ttl_s is None else now + timedelta(seconds=op.ttl_s)
            if log is not None and (status.get(op.key) != op.value
                                    or expires.get(op.key) != until):
                log.status.append(StatusChange(key=op.key, value=op.value, at=now,
                                               expires_at=until))
            status[op.key] = op.value
            if until is None:
                expires.pop(op.key, None)
            else:
                expires[op.key] = until
        elif isinstance(op, DeleteStatus):
            if op.value is not None and (status.get(op.key) != op.value
                                         or op.key in expires):
                raise ProposalChanged(
                    f"owner {snap.owner!r}: status {op.key!r} changed since proposed to "
                    "expire; nothing was written")
            if op.key not in status:
                raise UnknownStatusKey(f"owner {snap.owner!r} has no status key {op.key!r}")
            del status[op.key]
            expires.pop(op.key, None)
            if log is not None:
                log.status.append(StatusChange(key=op.key, value=None, at=now))
        elif isinstance(op, Supersede):
            if any(r.id == op.item_id for r in rules):
                rules = supersede_in(snap.owner, "rule", rules, op, now, log)
            else:
                facts = supersede_in(snap.owner, "fact", facts, op, now, log)
        elif isinstance(op, AddPending):
            fp = pending_fingerprint(op.item)
            if all(pending_fingerprint(p) != fp for p in pending):
                _unused_id(snap.owner, "pending item", op.item.id, pending)
                pending.append(op.item)
        elif isinstance(op, RemovePending):
            if not any(p.id == op.id for p in pending):
                raise PendingItemNotFound(f"owner {snap.owner!r} has no pending item {op.id!r}")
            pending = [p for p in pending if p.id != op.id]
        elif isinstance(op, AddAudit):
            pass  # kept by the backend beside the snapshot, not in it
        else:  # pragma: no cover - the union is closed
            raise TypeError(f"unknown operation {op!r}")
    if max_status_keys is not None and len(status) > max(max_status_keys, len(snap.status)):
        raise InvalidStatusKey(f"owner {snap.owner!r} would have {len(status)} status keys; "
                               f"the limit is {max_status_keys} (max_status_keys): delete "
                               "some first")
    return MemorySnapshot(
        owner=snap.owner,
        rules=tuple(rules),
        facts=tuple(facts),
        status=FrozenMap(status),
        status_expires_at=expires,
        pending=tuple(pending),
        version=snap.version + 1,
        epoch=snap.epoch or new_epoch(),  # the owner's state is created by its first write
        updated_at=now,
    )


def supersede_in(owner: str, kind: ItemKind, items: Sequence[MemoryRule | MemoryFact],
                 op: Supersede, now: datetime, log: HistoryLog | None) -> list[Any]:
    """``items`` (the owner's current rules, or facts) after ``op``; the closed item is
    appended to ``log``. Every backend's supersession is this function."""
    old = next((i for i in items if i.id == op.item_id), None)
    if old is None:
        raise ItemNotFound(f"owner {owner!r} has no current rule or fact {op.item_id!r}")
    h = content_hash(op.content)
    if content_hash(old.content) == h:
        raise InvalidContent(f"the new content of {kind} {op.item_id!r} is its current content")
    if op.id == op.item_id:
        raise SupersessionCycle(f"{kind} {op.item_id!r} cannot supersede itself")
    kept: list[MemoryRule | MemoryFact] = [i for i in items if i.id != old.id]
    target = next((i for i in kept if content_hash(i.content) == h), None)
    if target is None:
        new_item_id = op.id or new_id()
        _unused_id(owner, kind, new_item_id, kept)
        cls = MemoryRule if kind == "rule" else MemoryFact
        target = cls(id=new_item_id, content=op.content, source=op.source, created_at=now)
        kept.append(target)
    if log is not None:
        log.closed.append(closed_version(kind, old, now, target.id, op.by, op.reason))
    return kept


def _unused_id(owner: str, kind: str, item_id: str,
               items: Sequence[MemoryRule | MemoryFact | MemoryPendingItem]) -> None:
    if any(i.id == item_id for i in items):
        raise DuplicateId(f"owner {owner!r} has a {kind} {item_id!r} with other content; "
                          "use a new id")
