"""An owner's L1 state as the writes that made it: how an import rebuilds it, history
included, on any backend.

From an export's current rules and facts, its closed versions (superseded items), its
status changes and its pending items, :func:`l1_writes` gives each write at the time it
was first made: a chain's first version is added when it was created, and each later
one comes from a ``Supersede`` at the time the earlier one closed, so ids, times, who
and why are those of the original (an item that was there before a supersession closed
another in its favour is added at its own time). A status key with kept changes is set
and deleted again change by change, lapsed values too; one without is set to its
current value. Every backend applies the same writes through its own ``apply``, so
nothing backend-specific is needed.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from ..history import ItemVersion, StatusChange
from ..models import MemoryFact, MemoryPendingItem, MemoryRule
from ..storage.ops import (
    AddFact,
    AddPending,
    AddRule,
    DeleteStatus,
    L1Op,
    RemoveFact,
    RemoveRule,
    SetStatus,
    Supersede,
)

#: Who a supersession is recorded as when the export did not say.
UNKNOWN_BY = "import"
#: The start of the text a deleted successor is made with while its predecessor is
#: closed again (it is removed in the same instant, so nothing reads it).
GONE = "(deleted)"


def l1_writes(rules: Sequence[MemoryRule], facts: Sequence[MemoryFact],
              versions: Sequence[ItemVersion], status: Sequence[dict[str, Any]],
              changes: Sequence[StatusChange], pending: Sequence[MemoryPendingItem],
              now: datetime) -> list[tuple[datetime, L1Op]]:
    """The writes that rebuild this state, in the order to apply them (by time)."""
    current: dict[str, Any] = {i.id: ("rule", i) for i in rules} | {
        i.id: ("fact", i) for i in facts}
    closed = {v.id: v for v in versions}
    made_at = {i: item.created_at for i, (_, item) in current.items()} | {
        v.id: v.created_at for v in versions}
    # An item id -> the version whose close made it: a supersession makes its successor
    # when it closes, unless the owner already had an item of the new text, which it
    # was closed in favour of (that one is added at its own time, as it was).
    made_by: dict[str, ItemVersion] = {}
    for v in versions:
        if v.superseded_by is not None and made_at.get(v.superseded_by) == v.valid_to:
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
        return None  # the successor was deleted since

    for v in versions:
        if v.superseded_by is None or v.valid_to is None:
            continue  # not closed by a supersession: nothing makes it
        if v.id not in made_by:  # the first version of a chain
            add(v.kind, v.id, v.content, v.source, v.created_at)
        by = v.by or UNKNOWN_BY
        found = successor(v)
        if found is None:
            # The close is kept as it was: the successor, whose text went with it, is
            # made under its id and removed again at once, as if it had never been.
            writes.append((v.valid_to, Supersede(v.id, f"{GONE} {v.superseded_by}", by,
                                                 v.reason, v.source, v.superseded_by)))
            remove = RemoveRule if v.kind == "rule" else RemoveFact
            writes.append((v.valid_to, remove(v.superseded_by)))
            continue
        content, source = found
        writes.append((v.valid_to, Supersede(v.id, content, by, v.reason, source,
                                             v.superseded_by)))
    for item_id, (kind, item) in current.items():
        if item_id not in made_by:  # not made by a replayed close
            add(kind, item_id, item.content, item.source, item.created_at)

    keys_with_changes = {c.key for c in changes}
    for c in changes:
        if c.value is None:
            writes.append((c.at, DeleteStatus(c.key)))
        else:  # lapsed values too: they are the key's history, as they were
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
    # (A successor removed again comes after the supersession that made it: a stable sort.)
    order = {AddRule: 0, AddFact: 0, SetStatus: 1, DeleteStatus: 1, Supersede: 2,
             RemoveRule: 2, RemoveFact: 2, AddPending: 3}
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
