"""``OwnerHandle``: one owner's memory, as a plain picklable object.

Each operation is built once as a :class:`~.connection.Call` by :mod:`.calls`
(arguments checked there, an operation id attached to writes) and run either
blocking (``x``) or as a coroutine (``x_async``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from .. import validation as check
from ..models import (
    AuditEntry,
    ChatAppend,
    ChatMessage,
    MemoryFact,
    MemoryPendingItem,
    MemoryRule,
    MemorySnapshot,
    MemoryVersion,
    SearchHit,
    StoreResult,
    Tombstone,
    VectorMemory,
)
from ..storage.ops import AddFact, AddRule, DeleteStatus, L1Op, RemoveFact, RemoveRule, SetStatus
from . import calls
from .calls import MAX_MESSAGES, snapshot_of
from .connection import Call, connection
from .history import HandleHistory
from .spec import ClientView

if TYPE_CHECKING:
    from ..extraction import ExtractionReport, HitlDecision

T = TypeVar("T")
# Aliases: inside OwnerHandle the name ``list`` is a method.
Hits = list[SearchHit]
Memories = list[VectorMemory]
Audit = list[AuditEntry]
#: An export document, line by line.
Lines = list[str]
Results = list[StoreResult]
Versions = list[MemoryVersion]

#: Kept importable from here: the search call ``MemorySystem.search`` makes too.
search_call = calls.search

__all__ = ["MAX_MESSAGES", "OwnerHandle", "search_call"]


class OwnerHandle(HandleHistory):
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
        return calls.apply(self._view, self.owner, ops, op_id, snapshot_of)

    def _add(self, kind: type[AddRule] | type[AddFact], content: str, source: str,
             op_id: str | None) -> Call[Any]:
        return calls.add(self._view, self.owner, kind, content, source, op_id)

    def _append(self, conversation: str, messages: Sequence[ChatMessage], op_id: str | None
                ) -> Call[ChatAppend]:
        return calls.append(self._view, self.owner, conversation, messages, op_id)

    def _confirm(self, pending_id: str, by: str, edited_content: str | None
                 ) -> Call[HitlDecision]:
        return calls.confirm(self._view, self.owner, pending_id, by, edited_content)

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
            self._add(AddRule, content, source, op_id))
        return rule

    async def add_rule_async(self, content: str, source: str = "user", *,
                             op_id: str | None = None) -> MemoryRule | MemoryPendingItem:
        rule: MemoryRule | MemoryPendingItem = await self._run_async(
            self._add(AddRule, content, source, op_id))
        return rule

    def add_fact(self, content: str, source: str = "user", *, op_id: str | None = None
                 ) -> MemoryFact | MemoryPendingItem:
        """Add a fact, as :meth:`add_rule` adds a rule ("a Go developer" beside "a Java
        developer" waits for a person's decision)."""
        fact: MemoryFact | MemoryPendingItem = self._run(
            self._add(AddFact, content, source, op_id))
        return fact

    async def add_fact_async(self, content: str, source: str = "user", *,
                             op_id: str | None = None) -> MemoryFact | MemoryPendingItem:
        fact: MemoryFact | MemoryPendingItem = await self._run_async(
            self._add(AddFact, content, source, op_id))
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

    # -- L2 -------------------------------------------------------------------------------

    def store(self, content: str, metadata: Mapping[str, Any] | None = None, *,
              op_id: str | None = None) -> StoreResult:
        """Store a semantic memory, merged into a near-duplicate if there is one."""
        return self._run(calls.store(self._view, self.owner, content, metadata, op_id))

    async def store_async(self, content: str, metadata: Mapping[str, Any] | None = None, *,
                          op_id: str | None = None) -> StoreResult:
        return await self._run_async(calls.store(self._view, self.owner, content, metadata, op_id))

    def search(self, query: str, limit: int = 10, also: Iterable[str] = (), *,
               min_score: float = 0.0, filter: Mapping[str, Any] | None = None) -> Hits:
        """Hybrid search over this owner's memories and those of the owners in ``also``;
        ``filter`` (``{"agent": "deploy"}``) keeps those whose metadata has these values."""
        return self._run(self._search(query, limit, also, min_score, filter))

    async def search_async(self, query: str, limit: int = 10, also: Iterable[str] = (), *,
                           min_score: float = 0.0, filter: Mapping[str, Any] | None = None
                           ) -> Hits:
        return await self._run_async(self._search(query, limit, also, min_score, filter))

    def get(self, memory_id: str) -> VectorMemory:
        return self._run(calls.get(self.owner, memory_id))

    async def get_async(self, memory_id: str) -> VectorMemory:
        return await self._run_async(calls.get(self.owner, memory_id))

    def delete(self, memory_id: str) -> bool:
        """Delete a semantic memory; ``False`` if there was none with that id."""
        return self._run(calls.delete(self.owner, memory_id))

    async def delete_async(self, memory_id: str) -> bool:
        return await self._run_async(calls.delete(self.owner, memory_id))

    def list(self, limit: int = 100, offset: int = 0, *,
             filter: Mapping[str, Any] | None = None) -> Memories:
        """Current semantic memories, newest first (``filter`` as in :meth:`search`)."""
        return self._run(calls.list_memories(self.owner, limit, offset, filter))

    async def list_async(self, limit: int = 100, offset: int = 0, *,
                         filter: Mapping[str, Any] | None = None) -> Memories:
        return await self._run_async(calls.list_memories(self.owner, limit, offset, filter))

    def store_many(self, items: Sequence[str | Mapping[str, Any]], *,
                   op_id: str | None = None) -> Results:
        """Store a batch (texts or ``{"content": ..., "metadata": ...}``) as ``store`` each
        would, near-duplicates merged, embedded in one call; one result per item."""
        return self._run(calls.store_many(self._view, self.owner, items, op_id))

    async def store_many_async(self, items: Sequence[str | Mapping[str, Any]], *,
                               op_id: str | None = None) -> Results:
        return await self._run_async(calls.store_many(self._view, self.owner, items, op_id))

    def update(self, memory_id: str, content: str, metadata: Mapping[str, Any] | None = None,
               *, op_id: str | None = None) -> VectorMemory:
        """Change a memory's content (and metadata, when given); the previous version
        stays in its history."""
        return self._run(calls.update(self._view, self.owner, memory_id, content, metadata,
                                      op_id))

    async def update_async(self, memory_id: str, content: str,
                           metadata: Mapping[str, Any] | None = None, *,
                           op_id: str | None = None) -> VectorMemory:
        return await self._run_async(calls.update(self._view, self.owner, memory_id, content,
                                                  metadata, op_id))

    def supersede_memory(self, memory_id: str, content: str,
                         metadata: Mapping[str, Any] | None = None, *, by: str | None = None,
                         reason: str | None = None, op_id: str | None = None
                         ) -> VectorMemory:
        """Replace a memory by a new one, closing the old in the same step; the new one."""
        return self._run(calls.supersede_memory(self._view, self.owner, memory_id, content,
                                                metadata, by, reason, op_id))

    async def supersede_memory_async(self, memory_id: str, content: str,
                                     metadata: Mapping[str, Any] | None = None, *,
                                     by: str | None = None, reason: str | None = None,
                                     op_id: str | None = None) -> VectorMemory:
        return await self._run_async(calls.supersede_memory(
            self._view, self.owner, memory_id, content, metadata, by, reason, op_id))

    def memory_history(self, memory_id: str) -> Versions:
        """The versions of the memory's chain of updates and supersessions, oldest first."""
        return self._run(calls.memory_history(self.owner, memory_id))

    async def memory_history_async(self, memory_id: str) -> Versions:
        return await self._run_async(calls.memory_history(self.owner, memory_id))

    # -- extraction, the pending queue and the L3 chat window --------------------------------

    def append_messages(self, conversation: str, messages: Sequence[ChatMessage], *,
                        op_id: str | None = None) -> ChatAppend:
        """Append to the chat window of ``conversation`` (the last ``chat_window``
        messages, kept by the owner's actor and persisted in the backend). What leaves
        the window (``overflow``) is extracted in the background by the owner's actor;
        an extraction failure never fails the append. Idempotent like every write: a
        retry (same ``op_id``, generated here unless given) appends nothing again."""
        return self._run(self._append(conversation, messages, op_id))

    async def append_messages_async(self, conversation: str, messages: Sequence[ChatMessage],
                                    *, op_id: str | None = None) -> ChatAppend:
        return await self._run_async(self._append(conversation, messages, op_id))

    def end_conversation(self, conversation: str) -> ExtractionReport | None:
        """Close ``conversation``: its window is deleted and extracted (awaited); the
        report, or ``None`` if the window was empty. An ``ExtractionError`` is raised."""
        return self._run(calls.end(self.owner, conversation))

    async def end_conversation_async(self, conversation: str) -> ExtractionReport | None:
        return await self._run_async(calls.end(self.owner, conversation))

    def extract(self, messages: Sequence[ChatMessage]) -> ExtractionReport:
        """Extract from ``messages`` now, through the gate: written, queued or skipped."""
        return self._run(calls.extract(self.owner, messages))

    async def extract_async(self, messages: Sequence[ChatMessage]) -> ExtractionReport:
        return await self._run_async(calls.extract(self.owner, messages))

    def flush_extractions(self) -> int:
        """Wait until the background extractions of this owner started so far have
        finished (on its current actor); how many there were."""
        n: int = self._run(calls.flush(self.owner))
        return n

    async def flush_extractions_async(self) -> int:
        n: int = await self._run_async(calls.flush(self.owner))
        return n

    def confirm(self, pending_id: str, by: str, edited_content: str | None = None
                ) -> HitlDecision:
        """Write a pending item (``edited_content`` replaces its text) and record who did.
        Idempotent; ``PendingItemDecided`` if it was rejected."""
        return self._run(self._confirm(pending_id, by, edited_content))

    async def confirm_async(self, pending_id: str, by: str, edited_content: str | None = None
                            ) -> HitlDecision:
        return await self._run_async(self._confirm(pending_id, by, edited_content))

    def reject(self, pending_id: str, by: str) -> HitlDecision:
        """Drop a pending item and record who did. Idempotent; ``PendingItemDecided`` if
        it was confirmed."""
        return self._run(calls.reject(self.owner, pending_id, by))

    async def reject_async(self, pending_id: str, by: str) -> HitlDecision:
        return await self._run_async(calls.reject(self.owner, pending_id, by))

    def audit(self, limit: int = 100) -> Audit:
        """Decisions on this owner's pending items (who, what, when), newest first."""
        return self._run(calls.audit(self.owner, limit))

    async def audit_async(self, limit: int = 100) -> Audit:
        return await self._run_async(calls.audit(self.owner, limit))

    # -- the owner as a whole ----------------------------------------------------------------

    def forget(self, *, by: str, op_id: str | None = None) -> Tombstone:
        """Erase everything of this owner on every layer (rules, facts, status and
        pending items, memories and their embeddings, chat windows, operation ids, the
        audit trail) and return the tombstone left: who, when, how many of each kind,
        and nothing that names the owner. Background extractions of the owner are
        cancelled first. Idempotent: a retry (same ``op_id``) returns the same tombstone."""
        return self._run(calls.forget(self.owner, by, op_id))

    async def forget_async(self, *, by: str, op_id: str | None = None) -> Tombstone:
        return await self._run_async(calls.forget(self.owner, by, op_id))

    def export(self) -> Lines:
        """This owner's export document, line by line: a versioned JSON Lines document
        with its rules, facts, status, pending items, audit trail and memories (with
        their embeddings and the model that made them). See ``portability``."""
        lines: Lines = self._run(calls.export(self.owner))
        return lines

    async def export_async(self) -> Lines:
        lines: Lines = await self._run_async(calls.export(self.owner))
        return lines

    def import_document(self, lines: Iterable[str]) -> dict[str, int]:
        """Import an export document of this owner (its header must name it) into it;
        the owner must be empty. Checked whole before anything is written."""
        counts: dict[str, int] = self._run(calls.import_document(self.owner, lines))
        return counts

    async def import_document_async(self, lines: Iterable[str]) -> dict[str, int]:
        counts: dict[str, int] = await self._run_async(calls.import_document(self.owner, lines))
        return counts
