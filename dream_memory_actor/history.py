"""What the structured memory believed before: superseded rules and facts, status values.

A rule or fact is never silently overwritten. ``supersede`` closes the current
item (its ``valid_to`` and ``superseded_by`` are set, with who did it and why)
and writes the new one, in one transaction. The closed item leaves the snapshot
(which holds current items only, so loading it costs what it did before) and
is kept beside it, in the owner's history. Each status key keeps its last
values too (``max_status_history``, the current one included; a deletion is a
change with no value).

Three reads come out of that, all computed here from plain data:

* :func:`chain`: the versions of one item, oldest first, whichever of them is
  asked about (an old id and the current one give the same chain);
* :func:`as_of`: the rules, facts and status believed at a past time. A rule or
  fact counts from its ``created_at`` until its ``valid_to``; a status key has
  the newest value set at or before that time, unless it was deleted or had
  expired by then. Deleted rules and facts are gone from every time: deleting
  is forgetting, superseding is correcting. Status values older than the kept
  history are not known.

>>> from datetime import datetime, timezone
>>> t = datetime(2026, 1, 1, tzinfo=timezone.utc)
>>> v = ItemVersion(kind="rule", id="a", content="Use spaces", source="user", created_at=t)
>>> v.current
True
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from .models import FrozenMap, MemoryFact, MemoryRule, MemorySnapshot, _Frozen

ItemKind = Literal["rule", "fact"]


class ItemVersion(_Frozen):
    """One version of a rule or fact: current (``valid_to`` is ``None``) or closed.

    A closed version says when it stopped being believed (``valid_to``), which item
    replaced it (``superseded_by``), who superseded it (``by``) and why (``reason``).
    """

    kind: ItemKind
    id: str
    content: str
    source: str
    created_at: datetime
    valid_to: datetime | None = None
    superseded_by: str | None = None
    by: str | None = None
    reason: str | None = None

    @property
    def current(self) -> bool:
        return self.valid_to is None

    def as_item(self) -> MemoryRule | MemoryFact:
        """This version as the rule or fact a snapshot holds."""
        cls = MemoryRule if self.kind == "rule" else MemoryFact
        return cls(id=self.id, content=self.content, source=self.source,
                   created_at=self.created_at)


class ItemHistory(_Frozen):
    """The chain of versions of one rule or fact, oldest first; the current one last
    (unless it was deleted since)."""

    item_id: str
    kind: ItemKind
    versions: tuple[ItemVersion, ...]

    @property
    def current(self) -> ItemVersion | None:
        last = self.versions[-1] if self.versions else None
        return last if last is not None and last.current else None


class StatusChange(_Frozen):
    """A status key set to ``value`` (``None``: deleted) at ``at``, until ``expires_at``."""

    key: str
    value: str | None
    at: datetime
    expires_at: datetime | None = None


@dataclass
class HistoryLog:
    """What one write adds to the history: filled by ``ops.apply_ops`` when given one."""

    closed: list[ItemVersion] = field(default_factory=list)
    status: list[StatusChange] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.closed or self.status)


def current_version(kind: ItemKind, item: MemoryRule | MemoryFact) -> ItemVersion:
    return ItemVersion(kind=kind, id=item.id, content=item.content, source=item.source,
                       created_at=item.created_at)


def closed_version(kind: ItemKind, item: MemoryRule | MemoryFact, at: datetime,
                   superseded_by: str, by: str, reason: str | None) -> ItemVersion:
    """``item`` closed at ``at``, replaced by ``superseded_by``."""
    return current_version(kind, item).model_copy(update={
        "valid_to": at, "superseded_by": superseded_by, "by": by, "reason": reason})


def _versions(snap: MemorySnapshot, closed: Iterable[ItemVersion]
              ) -> dict[tuple[str, str], ItemVersion]:
    out: dict[tuple[str, str], ItemVersion] = {}
    for r in snap.rules:
        out[("rule", r.id)] = current_version("rule", r)
    for f in snap.facts:
        out[("fact", f.id)] = current_version("fact", f)
    for v in closed:  # a closed record wins over a current one read before it closed
        out[(v.kind, v.id)] = v
    return out


def chain(item_id: str, snap: MemorySnapshot, closed: Iterable[ItemVersion]
          ) -> ItemHistory | None:
    """The versions linked to ``item_id`` by supersession, oldest first (``None``: the
    owner has no rule or fact with that id, current or closed). A rule id is looked
    up before a fact id."""
    nodes = _versions(snap, closed)
    start = next((k for k in (("rule", item_id), ("fact", item_id)) if k in nodes), None)
    if start is None:
        return None
    kind = start[0]
    links: dict[str, set[str]] = {}
    for (k, i), v in nodes.items():
        if k == kind and v.superseded_by is not None:
            links.setdefault(i, set()).add(v.superseded_by)
            links.setdefault(v.superseded_by, set()).add(i)
    seen = {item_id}
    todo = [item_id]
    while todo:
        for nxt in links.get(todo.pop(), ()):
            if nxt not in seen and (kind, nxt) in nodes:
                seen.add(nxt)
                todo.append(nxt)
    versions = sorted((nodes[(kind, i)] for i in seen), key=_order)
    return ItemHistory(item_id=item_id, kind=kind, versions=tuple(versions))


def _order(v: ItemVersion) -> tuple[int, datetime, str]:
    # closed versions first, by when they closed; the current one last
    return (0, v.valid_to, v.id) if v.valid_to is not None else (1, v.created_at, v.id)


def ancestors(item_id: str, kind: ItemKind, closed: Iterable[ItemVersion]) -> set[str]:
    """The ids of the items ``item_id`` superseded, directly or not."""
    parents: dict[str, set[str]] = {}
    for v in closed:
        if v.kind == kind and v.superseded_by is not None:
            parents.setdefault(v.superseded_by, set()).add(v.id)
    out: set[str] = set()
    todo = [item_id]
    while todo:
        for p in parents.get(todo.pop(), ()):
            if p not in out:
                out.add(p)
                todo.append(p)
    return out


def as_of(snap: MemorySnapshot, closed: Iterable[ItemVersion],
          status: Sequence[StatusChange], t: datetime) -> MemorySnapshot:
    """What ``snap``'s owner believed at ``t`` (see the module doc). No pending items; the
    version is 0, so no cache ever takes it for a current snapshot."""
    nodes = _versions(snap, closed).values()

    def believed(kind: ItemKind) -> list[ItemVersion]:
        return sorted((v for v in nodes if v.kind == kind and v.created_at <= t
                       and (v.valid_to is None or v.valid_to > t)),
                      key=lambda v: (v.created_at, v.id))

    values: dict[str, str] = {}
    expires: dict[str, datetime] = {}
    latest: dict[str, StatusChange] = {}
    for c in status:
        if c.at <= t and (c.key not in latest or c.at >= latest[c.key].at):
            latest[c.key] = c
    for key, c in latest.items():
        if c.value is not None and (c.expires_at is None or c.expires_at > t):
            values[key] = c.value
            if c.expires_at is not None:
                expires[key] = c.expires_at
    return MemorySnapshot(
        owner=snap.owner,
        rules=tuple(MemoryRule(**v.as_item().model_dump()) for v in believed("rule")),
        facts=tuple(MemoryFact(**v.as_item().model_dump()) for v in believed("fact")),
        status=FrozenMap(values), status_expires_at=expires, version=0, updated_at=t)


def last_change(key: str, changes: Sequence[StatusChange]) -> datetime | None:
    """When status ``key`` last changed, per the kept ``changes`` (oldest first; ``None``:
    none kept)."""
    return next((c.at for c in reversed(changes) if c.key == key), None)


def trim_status(changes: Sequence[StatusChange], keep: int) -> list[StatusChange]:
    """The newest ``keep`` changes of each key, oldest first."""
    per_key: dict[str, list[StatusChange]] = {}
    for c in changes:
        per_key.setdefault(c.key, []).append(c)
    kept = [c for cs in per_key.values() for c in cs[-keep:]]
    return sorted(kept, key=lambda c: c.at)
