"""``OwnerHandle``: one owner's memory, as a plain picklable object.

Most methods are built from the operations' descriptions
(:mod:`dream_memory_actor.engine.operations`): the arguments are checked there,
an operation id is attached to writes, and one :class:`~.connection.Call` is run
either blocking (``x``) or as a coroutine (``x_async``). Written here by hand: the
snapshot read, the search, and the L1 writes, each an ``apply`` of operations.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar, Union

from .. import validation as check
from ..engine import operations as ops
from ..models import MemoryFact, MemoryPendingItem, MemoryRule, MemorySnapshot, SearchHit
from ..storage.base import new_item
from ..storage.ops import (
    AddFact,
    AddRule,
    DeleteStatus,
    L1Op,
    RemoveFact,
    RemoveRule,
    SetStatus,
    Supersede,
)
from . import calls
from .connection import Call, connection
from .spec import ClientView

T = TypeVar("T")
# Aliases: inside OwnerHandle the name ``list`` is a method.
Hits = list[SearchHit]
Item = Union[MemoryRule, MemoryFact]  # noqa: UP007 - a runtime alias

__all__ = ["OwnerHandle"]


class OwnerHandle:
    """The memory of one owner. Obtain it with ``MemorySystem.owner(owner_id)``.

    Holds no connection, only the system's name and limits, so it pickles to a
    few hundred bytes and works in any task or actor of the cluster.
    """

    __slots__ = ("_view", "owner")

    def __init__(self, view: ClientView, owner: str) -> None:
        self._view = view
        self.owner = check.owner_id(owner)

    def __reduce__(self) -> tuple[Any, ...]:
        return (OwnerHandle, (self._view, self.owner))

    def __repr__(self) -> str:
        return f"OwnerHandle({self.owner!r}, system={self._view.name!r})"

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, OwnerHandle) and other.owner == self.owner
                and other._view.incarnation == self._view.incarnation)

    def __hash__(self) -> int:
        return hash((self.owner, self._view.incarnation))

    def _run(self, call: Call[T]) -> T:
        return connection(self._view).call(call)

    async def _run_async(self, call: Call[T]) -> T:
        return await connection(self._view).call_async(call)

    def _apply(self, ops: Sequence[L1Op], op_id: str | None) -> Call[MemorySnapshot]:
        return calls.apply(self._view, self.owner, ops, op_id, calls.same)

    def _perform(self, op: ops.Operation[Any, Any], args: Sequence[Any],
                 kwargs: Mapping[str, Any]) -> Any:
        """A described operation (``engine.operations``), blocking."""
        return self._run(calls.of(op, self._view, self.owner, args, kwargs))

    async def _perform_async(self, op: ops.Operation[Any, Any], args: Sequence[Any],
                             kwargs: Mapping[str, Any]) -> Any:
        return await self._run_async(calls.of(op, self._view, self.owner, args, kwargs))

    def _search(self, query: str, limit: int, also: Iterable[str], min_score: float,
                where: Mapping[str, Any] | None = None) -> Call[Hits]:
        if isinstance(also, str):
            also = [also]
        return calls.search(self._view, (self.owner, *also), query, limit, min_score, where)

    # -- L1 -------------------------------------------------------------------------------

    def snapshot(self, min_version: int | None = None, *, timeout_s: float | None = None,
                 min_epoch: str | None = None, as_of: datetime | None = None
                 ) -> MemorySnapshot:
        """The owner's snapshot, served from its actor's memory.

        ``min_version``: wait (up to ``timeout_s``, default the system's read timeout)
        until the snapshot has at least this version, e.g. the version another agent's
        write returned; ``RuntimeTimeout`` if it does not come. ``min_epoch`` (that
        snapshot's ``epoch``) says which incarnation of the owner's state the version
        counts in: a snapshot of a later epoch (the backend lost the state and it was
        written again) is newer than any version of the old one. ``as_of``: what the
        owner held at that time instead (rules, facts, status), read from the backend.
        """
        if as_of is not None:
            return self.snapshot_as_of(as_of)
        conn = connection(self._view)
        for read in calls.reads(self._view, self.owner, conn, min_version, timeout_s,
                                min_epoch):
            snap = conn.call(read)
            if snap is not None:
                return snap
        raise AssertionError("the full read always carries the snapshot")

    async def snapshot_async(self, min_version: int | None = None, *,
                             timeout_s: float | None = None, min_epoch: str | None = None,
                             as_of: datetime | None = None) -> MemorySnapshot:
        if as_of is not None:
            return await self.snapshot_as_of_async(as_of)
        conn = connection(self._view)
        for read in calls.reads(self._view, self.owner, conn, min_version, timeout_s,
                                min_epoch):
            snap = await conn.call_async(read)
            if snap is not None:
                return snap
        raise AssertionError("the full read always carries the snapshot")

    def apply(self, ops: Sequence[L1Op], *, op_id: str | None = None) -> MemorySnapshot:
        """Apply L1 operations atomically (all or none); the new snapshot."""
        return self._run(self._apply(ops, op_id))

    async def apply_async(self, ops: Sequence[L1Op], *, op_id: str | None = None
                          ) -> MemorySnapshot:
        return await self._run_async(self._apply(ops, op_id))

    def add_rule(self, content: str, source: str = "user", *, op_id: str | None = None
                 ) -> MemoryRule | MemoryPendingItem:
        """Add a rule; the existing one if the same text is already a rule. A new version
        of a current rule ("answer in Chinese" beside "answer in English") is not added
        beside it: it waits as a pending correction naming that rule, which is returned."""
        rule: MemoryRule | MemoryPendingItem = self._run(
            calls.add(self._view, self.owner, AddRule, content, source, op_id))
        return rule

    async def add_rule_async(self, content: str, source: str = "user", *,
                             op_id: str | None = None) -> MemoryRule | MemoryPendingItem:
        rule: MemoryRule | MemoryPendingItem = await self._run_async(
            calls.add(self._view, self.owner, AddRule, content, source, op_id))
        return rule

    def add_fact(self, content: str, source: str = "user", *, op_id: str | None = None
                 ) -> MemoryFact | MemoryPendingItem:
        """Add a fact, as :meth:`add_rule` adds a rule ("a Go developer" beside "a Java
        developer" waits for a person's decision)."""
        fact: MemoryFact | MemoryPendingItem = self._run(
            calls.add(self._view, self.owner, AddFact, content, source, op_id))
        return fact

    async def add_fact_async(self, content: str, source: str = "user", *,
                             op_id: str | None = None) -> MemoryFact | MemoryPendingItem:
        fact: MemoryFact | MemoryPendingItem = await self._run_async(
            calls.add(self._view, self.owner, AddFact, content, source, op_id))
        return fact

    def remove_rule(self, rule_id: str, *, op_id: str | None = None) -> MemorySnapshot:
        return self._run(self._apply([RemoveRule(rule_id)], op_id))

    async def remove_rule_async(self, rule_id: str, *, op_id: str | None = None
                                ) -> MemorySnapshot:
        return await self._run_async(self._apply([RemoveRule(rule_id)], op_id))

    def remove_fact(self, fact_id: str, *, op_id: str | None = None) -> MemorySnapshot:
        return self._run(self._apply([RemoveFact(fact_id)], op_id))

    async def remove_fact_async(self, fact_id: str, *, op_id: str | None = None
                                ) -> MemorySnapshot:
        return await self._run_async(self._apply([RemoveFact(fact_id)], op_id))

    def set_status(self, key: str, value: str, ttl_s: float | None = None, *,
                   op_id: str | None = None) -> MemorySnapshot:
        """Set a status entry; ``ttl_s`` makes it expire by itself."""
        return self._run(self._apply([SetStatus(key, value, ttl_s)], op_id))

    async def set_status_async(self, key: str, value: str, ttl_s: float | None = None, *,
                               op_id: str | None = None) -> MemorySnapshot:
        call = self._apply([SetStatus(key, value, ttl_s)], op_id)
        return await self._run_async(call)

    def delete_status(self, key: str, *, op_id: str | None = None) -> MemorySnapshot:
        return self._run(self._apply([DeleteStatus(key)], op_id))

    async def delete_status_async(self, key: str, *, op_id: str | None = None
                                  ) -> MemorySnapshot:
        return await self._run_async(self._apply([DeleteStatus(key)], op_id))

    def supersede(self, item_id: str, new_content: str, *, by: str, reason: str | None = None,
                  op_id: str | None = None) -> Item:
        """Replace the current rule or fact ``item_id`` by ``new_content``; the old one is
        kept in its history (with ``by`` and ``reason``). Returns the new item. An id
        that is not a current rule or fact of the owner is an ``ItemNotFound``."""
        return self._run(self._supersede(item_id, new_content, by, reason, op_id))

    async def supersede_async(self, item_id: str, new_content: str, *, by: str,
                              reason: str | None = None, op_id: str | None = None) -> Item:
        return await self._run_async(self._supersede(item_id, new_content, by, reason, op_id))

    def _supersede(self, item_id: str, new_content: str, by: str, reason: str | None,
                   op_id: str | None) -> Call[Item]:
        return calls.apply(self._view, self.owner, [Supersede(item_id, new_content, by, reason)],
                           op_id, lambda snap: new_item(snap, new_content))  # checked by apply

    # -- L2 -------------------------------------------------------------------------------

    def search(self, query: str, limit: int = 10, also: Iterable[str] = (), *,
               min_score: float = 0.0, filter: Mapping[str, Any] | None = None) -> Hits:
        """Hybrid search over this owner's memories and those of the owners in ``also``;
        ``filter`` (``{"agent": "deploy"}``) keeps those whose metadata has these values."""
        return self._run(self._search(query, limit, also, min_score, filter))

    async def search_async(self, query: str, limit: int = 10, also: Iterable[str] = (), *,
                           min_score: float = 0.0, filter: Mapping[str, Any] | None = None
                           ) -> Hits:
        return await self._run_async(self._search(query, limit, also, min_score, filter))

    # The described operations (``engine.operations``), blocking and ``_async``.
    store = ops.store.blocking()
    store_async = ops.store.coroutine()
    store_many = ops.store_many.blocking()
    store_many_async = ops.store_many.coroutine()
    update = ops.update.blocking()
    update_async = ops.update.coroutine()
    supersede_memory = ops.supersede_memory.blocking()
    supersede_memory_async = ops.supersede_memory.coroutine()
    delete = ops.delete.blocking()
    delete_async = ops.delete.coroutine()
    get = ops.get.blocking()
    get_async = ops.get.coroutine()
    list = ops.list_memories.blocking()
    list_async = ops.list_memories.coroutine()
    memory_history = ops.memory_history.blocking()
    memory_history_async = ops.memory_history.coroutine()
    history = ops.history.blocking()
    history_async = ops.history.coroutine()
    snapshot_as_of = ops.snapshot_as_of.blocking()
    snapshot_as_of_async = ops.snapshot_as_of.coroutine()
    status_history = ops.status_history.blocking()
    status_history_async = ops.status_history.coroutine()
    append_messages = ops.append_messages.blocking()
    append_messages_async = ops.append_messages.coroutine()
    end_conversation = ops.end_conversation.blocking()
    end_conversation_async = ops.end_conversation.coroutine()
    extract = ops.extract.blocking()
    extract_async = ops.extract.coroutine()
    flush_extractions = ops.flush_extractions.blocking()
    flush_extractions_async = ops.flush_extractions.coroutine()
    confirm = ops.confirm.blocking()
    confirm_async = ops.confirm.coroutine()
    reject = ops.reject.blocking()
    reject_async = ops.reject.coroutine()
    audit = ops.audit.blocking()
    audit_async = ops.audit.coroutine()
    propose = ops.propose.blocking()
    propose_async = ops.propose.coroutine()
    consolidate = ops.consolidate.blocking()
    consolidate_async = ops.consolidate.coroutine()
    undo_proposal = ops.undo_proposal.blocking()
    undo_proposal_async = ops.undo_proposal.coroutine()
    forget = ops.forget.blocking()
    forget_async = ops.forget.coroutine()
    export = ops.export.blocking()
    export_async = ops.export.coroutine()
    import_document = ops.import_document.blocking()
    import_document_async = ops.import_document.coroutine()
