"""Superseding and the history reads in the Ray runtime: calls, handle methods, actor methods.

``supersede`` is an ``apply`` of one ``Supersede`` operation through the owner's
actor, with an operation id like every write (a retry is applied once); the
history reads go to the owner's actor too, which reads the backend. The handle
and holder classes mix these in (:class:`HandleHistory`, :class:`HolderHistory`).
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar, Union

from .. import validation as check
from ..history import ItemHistory, StatusChange
from ..models import MemoryFact, MemoryRule, MemorySnapshot
from ..storage.history import check_time, new_item
from ..storage.ops import Supersede
from . import calls
from .connection import Call
from .spec import ClientView

if TYPE_CHECKING:
    from ..engine import MemoryEngine
    from .owner import OwnerMemory

T = TypeVar("T")
Item = Union[MemoryRule, MemoryFact]  # noqa: UP007 - a runtime alias
Changes = list[StatusChange]


def same(value: Any) -> Any:
    return value


# -- calls -------------------------------------------------------------------------------


def supersede(view: ClientView, owner: str, item_id: str, new_content: str, by: str,
              reason: str | None, op_id: str | None) -> Call[Item]:
    """Supersede a rule or fact (see ``StructuredStore.supersede``). An id that is not a
    current rule or fact of the owner is an ``ItemNotFound`` from the actor."""
    text = check.content(new_content, view.max_content_bytes)
    op = Supersede(item_id, text, by, reason)
    return calls.apply(view, owner, [op], op_id, lambda snap: new_item(snap, text))


def history(owner: str, item_id: str) -> Call[ItemHistory]:
    check.ids([item_id], "item id")
    return calls._owner(owner, "history", (item_id,), same)


def snapshot_as_of(owner: str, at: datetime) -> Call[MemorySnapshot]:
    return calls._owner(owner, "snapshot_as_of", (check_time(at),), same)


def status_history(owner: str, key: str) -> Call[Changes]:
    return calls._owner(owner, "status_history", (check.status_key(key),), same)


# -- the handle's methods ----------------------------------------------------------------


class HandleHistory:
    """``OwnerHandle``'s supersede and history methods, blocking and ``_async``."""

    __slots__ = ()
    _view: ClientView
    owner: str

    if TYPE_CHECKING:  # OwnerHandle's
        def _run(self, call: Call[T]) -> T: ...

        async def _run_async(self, call: Call[T]) -> T: ...

    def supersede(self, item_id: str, new_content: str, *, by: str, reason: str | None = None,
                  op_id: str | None = None) -> Item:
        """Replace the current rule or fact ``item_id`` by ``new_content``; the old one is
        kept in its history (with ``by`` and ``reason``). Returns the new item."""
        return self._run(supersede(self._view, self.owner, item_id, new_content, by, reason,
                                   op_id))

    async def supersede_async(self, item_id: str, new_content: str, *, by: str,
                              reason: str | None = None, op_id: str | None = None) -> Item:
        return await self._run_async(supersede(self._view, self.owner, item_id, new_content,
                                               by, reason, op_id))

    def history(self, item_id: str) -> ItemHistory:
        """The versions of the rule or fact ``item_id`` belongs to, oldest first."""
        return self._run(history(self.owner, item_id))

    async def history_async(self, item_id: str) -> ItemHistory:
        return await self._run_async(history(self.owner, item_id))

    def snapshot_as_of(self, at: datetime) -> MemorySnapshot:
        """The rules, facts and status this owner had at ``at``."""
        return self._run(snapshot_as_of(self.owner, at))

    async def snapshot_as_of_async(self, at: datetime) -> MemorySnapshot:
        return await self._run_async(snapshot_as_of(self.owner, at))

    def status_history(self, key: str) -> Changes:
        """The kept values of status ``key``, oldest first (``None``: deleted)."""
        return self._run(status_history(self.owner, key))

    async def status_history_async(self, key: str) -> Changes:
        return await self._run_async(status_history(self.owner, key))


# -- the owner actors' methods -----------------------------------------------------------


class HolderHistory:
    """The history reads of the owner-holding actors (``OwnerHolder`` mixes them in)."""

    if TYPE_CHECKING:  # OwnerHolder's
        async def _open(self) -> MemoryEngine: ...

        def _use(self, owner: str) -> AbstractAsyncContextManager[OwnerMemory]: ...

    async def history(self, owner: str, item_id: str) -> ItemHistory:
        async with self._use(owner):
            return await (await self._open()).history(owner, item_id)

    async def snapshot_as_of(self, owner: str, at: datetime) -> MemorySnapshot:
        async with self._use(owner):
            return await (await self._open()).snapshot(owner, as_of=at)

    async def status_history(self, owner: str, key: str) -> Changes:
        async with self._use(owner):
            return await (await self._open()).status_history(owner, key)


__all__ = ["HandleHistory", "HolderHistory"]
