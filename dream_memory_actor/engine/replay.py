"""An owner's L1 state as the writes that made it: how an import rebuilds it, history
included, on any backend.

From an export's current rules and facts, its closed versions (superseded items), its
status changes and its pending items, :func:`l1_writes` gives each write at the time it
was first made: a chain's first version is added when it was created, and each later
one comes from a ``Supersede`` at the time the earlier one closed, so ids, times, who
and why are those of the original. A status key with kept changes is set and deleted
again change by change; one without is set to its current value. Every backend applies
the same writes through its own ``apply``, so nothing backend-specific is needed.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from ..history import ItemVersion, StatusChange
from ..models import MemoryFact, MemoryPendingItem, MemoryRule
from ..storage.ops import AddFact, AddPending, AddRule, DeleteStatus, L1Op, SetStatus, Supersede

#: Who a supersession is recorded as when the export did not say.
UNKNOWN_BY = "import"


def l1_writes(rules: Sequence[MemoryRule], facts: Sequence[MemoryFact],
              versions: Sequence[ItemVersion], status: Sequence[dict[str, Any]],
              changes: Sequence[StatusChange], pending: Sequence[MemoryPendingItem],
              now: datetime) -> list[tuple[datetime, L1Op]]:
    """The writes that rebuild this state, in the order to apply them (by time)."""
    current: dict[str, Any] = {i.id: ("rule", i) for i in rules} | {
        i.id: ("fact", i) for i in facts}
    closed = {v.id: v for v in versions}
    made_by: dict[str, ItemVersion] = {}  # an item id -> the version whose close made it
    for v in versions:
        if v.superseded_by is not None:
            made_by[v.superseded_by] = v
    writes: list[tuple[datetime, L1Op]] = []

    def add(kind: str, item_id: str, content: str, source: str, at: datetime) -> None:
        op = AddRule(content, source, item_id) if kind == "rule" else AddFact(
            content, source, item_id)
        writes.append((at, op))

    def successor(v: ItemVersion) -> tuple[str, str] | None:
        if v.superseded_by in closed:
            nxt = closed[v.superseded_by]
            return nxt.content, nxt.source
        if v.superseded_by in current:
            item = current[v.superseded_by][1]
            return item.content, item.source
        return None  # the successor was deleted since: the chain cannot be replayed

    replayable = {v.id: s for v in versions if (s := successor(v)) is not None}
    for v in versions:
        if v.id not in replayable:
            continue
        parent = made_by.get(v.id)
        if parent is None or parent.id not in replayable:  # the first version of a chain
            add(v.kind, v.id, v.content, v.source, v.created_at)
        content, source = replayable[v.id]
        assert v.valid_to is not None
        writes.append((v.valid_to, Supersede(v.id, content, v.by or UNKNOWN_BY, v.reason,
                                             source, v.superseded_by)))
    for item_id, (kind, item) in current.items():
        parent = made_by.get(item_id)
        if parent is None or parent.id not in replayable:  # not made by a replayed close
            add(kind, item_id, item.content, item.source, item.created_at)

    keys_with_changes = {c.key for c in changes}
    for c in changes:
        if c.value is None:
            writes.append((c.at, DeleteStatus(c.key)))
        elif c.expires_at is None or c.expires_at > now:
            ttl = None if c.expires_at is None else (c.expires_at - c.at).total_seconds()
            writes.append((c.at, SetStatus(c.key, c.value, ttl)))
    for r in status:
        if r["key"] in keys_with_changes:
            continue
        expires = r["expires_at"]
        if expires is None or expires > now:
            ttl = None if expires is None else (expires - now).total_seconds()
            writes.append((now, SetStatus(r["key"], r["value"], ttl)))
    writes += [(p.created_at, AddPending(p)) for p in pending]
    # A supersession after the add it needs, at equal times: adds sort first.
    order = {AddRule: 0, AddFact: 0, SetStatus: 1, DeleteStatus: 1, Supersede: 2, AddPending: 3}
    writes.sort(key=lambda w: (w[0], order.get(type(w[1]), 4)))
    return _drop_expired_deletes(writes, now)


def _drop_expired_deletes(writes: list[tuple[datetime, L1Op]], now: datetime
                          ) -> list[tuple[datetime, L1Op]]:
    """Without the expired sets it followed, a delete has nothing to delete: drop it."""
    live: dict[str, datetime | None] = {}  # key -> expiry of its value (None: no expiry)
    out = []
    for at, op in writes:
        if isinstance(op, SetStatus):
            live[op.key] = None if op.ttl_s is None else at + timedelta(seconds=op.ttl_s)
        elif isinstance(op, DeleteStatus):
            expiry = live.pop(op.key, "missing")
            if expiry == "missing" or (isinstance(expiry, datetime) and expiry <= at):
                continue
        out.append((at, op))
    return out
