"""The history half of the structured store: superseding, chains, the past, status values.

Every backend keeps, beside each owner's snapshot, the rules and facts that were
superseded (closed :class:`~..history.ItemVersion` records) and the last changes of
each status key, written in the transaction of the write that made them (the
``HistoryLog`` of ``ops.apply_ops``). It implements two reads, ``_item_history``
and ``_status_history``; chains and past snapshots are computed from them here,
once, so every backend answers alike. The same two reads enumerate everything an
owner's history holds.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from datetime import datetime

from .. import validation as check
from ..errors import DuplicateId, InvalidQuery, ItemNotFound, ItemSuperseded, SupersessionCycle
from ..history import ItemHistory, ItemVersion, StatusChange, ancestors, as_of, chain
from ..models import MemoryFact, MemoryRule, MemorySnapshot, utcnow
from ..text import content_hash
from .ops import L1Op, Supersede


class HistoryReads(ABC):
    """Superseding and the history reads of a structured store (mixed into it)."""

    max_content_bytes: int

    @abstractmethod
    async def load(self, owner: str, *, now: datetime | None = None) -> MemorySnapshot: ...

    @abstractmethod
    async def apply(self, owner: str, ops: Sequence[L1Op], *, now: datetime | None = None,
                    op_id: str | None = None) -> MemorySnapshot: ...

    @abstractmethod
    async def _item_history(self, owner: str) -> list[ItemVersion]:
        """Every closed rule and fact of ``owner``, oldest closed first."""

    @abstractmethod
    async def _status_history(self, owner: str, key: str | None) -> list[StatusChange]:
        """The kept changes of ``owner``'s status key ``key`` (every key: ``None``),
        oldest first."""

    async def supersede(self, owner: str, item_id: str, new_content: str, *, by: str,
                        reason: str | None = None, source: str = "user",
                        now: datetime | None = None, op_id: str | None = None
                        ) -> MemoryRule | MemoryFact:
        """Replace the current rule or fact ``item_id`` by ``new_content``: the new item
        is written and the old one closed (kept in the history with ``by`` and
        ``reason``), atomically. Returns the new item.

        ``ItemNotFound`` for an id the owner has no current rule or fact under (another
        owner's included), ``ItemSuperseded`` if it was superseded already; nothing is
        written then. ``op_id`` makes the call idempotent.
        """
        snap = await self.apply(owner, [Supersede(item_id, new_content, by, reason, source)],
                                now=now, op_id=op_id)
        return new_item(snap, check.content(new_content, self.max_content_bytes))

    async def history(self, owner: str, item_id: str) -> ItemHistory:
        """The chain of versions ``item_id`` belongs to, oldest first (see
        ``history.chain``); ``ItemNotFound`` if the owner never had it (or deleted it)."""
        check.owner_id(owner)
        check.ids([item_id], "item id")
        snap = await self.load(owner)
        found = chain(item_id, snap, await self._item_history(owner))
        if found is None:
            raise ItemNotFound(f"owner {owner!r} has no rule or fact {item_id!r}")
        return found

    async def load_as_of(self, owner: str, at: datetime) -> MemorySnapshot:
        """The rules, facts and status ``owner`` had at ``at`` (see ``history.as_of``)."""
        check.owner_id(owner)
        t = check_time(at)
        snap = await self.load(owner)
        return as_of(snap, await self._item_history(owner),
                     await self._status_history(owner, None), t)

    async def status_history(self, owner: str, key: str) -> list[StatusChange]:
        """The kept values of status ``key`` (``None``: deleted), oldest first."""
        check.owner_id(owner)
        return await self._status_history(owner, check.status_key(key))

    async def _check_supersessions(self, owner: str, ops: Sequence[L1Op]) -> None:
        """Refuse a ``Supersede`` naming its new item with an id of the owner's history:
        one of the items it descends from (a cycle) or another closed item."""
        named = [op for op in ops if isinstance(op, Supersede) and op.id is not None]
        if not named:
            return
        closed = await self._item_history(owner)
        for op in named:
            for kind in ("rule", "fact"):
                if op.id in ancestors(op.item_id, kind, closed):
                    raise SupersessionCycle(
                        f"{kind} {op.id!r} was superseded by {op.item_id!r}, directly or "
                        "not: it cannot supersede it back")
            if any(v.id == op.id for v in closed):
                raise DuplicateId(f"owner {owner!r} has a closed item {op.id!r}; use a new id")

    async def _refine_missing(self, owner: str, ops: Sequence[L1Op], exc: ItemNotFound
                              ) -> ItemNotFound:
        """``ItemSuperseded`` when the missing item of a ``Supersede`` was closed, else
        ``exc``."""
        wanted = {op.item_id for op in ops if isinstance(op, Supersede)}
        for v in await self._item_history(owner):
            if v.id in wanted:
                return ItemSuperseded(
                    f"{v.kind} {v.id!r} of owner {owner!r} was superseded by "
                    f"{v.superseded_by!r} at {v.valid_to}; supersede the current item")
        return exc


def new_item(snap: MemorySnapshot, text: str) -> MemoryRule | MemoryFact:
    """The current rule (else fact) of ``snap`` with the text ``text``."""
    h = content_hash(text)
    items: list[MemoryRule | MemoryFact] = [*snap.rules, *snap.facts]
    for item in items:
        if content_hash(item.content) == h:
            return item
    raise ItemNotFound("the new item was superseded or removed before this retry answered")


def check_time(value: object) -> datetime:
    """A timezone-aware datetime, not in the future."""
    if not isinstance(value, datetime) or value.tzinfo is None:
        raise InvalidQuery(f"as_of must be a timezone-aware datetime, got {value!r}")
    return min(value, utcnow())
