"""One interface over the memory, two implementations: what the MCP server, the CLI and
the LangGraph store talk to.

* :class:`LocalBackend` runs a :class:`~dream_memory_actor.engine.MemoryEngine` and an
  :class:`~dream_memory_actor.extraction.service.ExtractionService` in the server process.
* :class:`RayBackend` joins a running :class:`~dream_memory_actor.runtime.client.MemorySystem`
  (``MemorySystem.connect``) and uses its owner handles.

Both take already-checked arguments; their callers validate (and the MCP server
authorizes) first. A new operation is one more method here, in the protocol and in
both classes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from .config import MemorySettings
from .errors import InvalidImport, ItemNotFound, ItemSuperseded, MemoryNotFound
from .history import ItemHistory, StatusChange
from .metrics import get_metrics
from .models import (
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
from .storage.ops import L1Op

if TYPE_CHECKING:
    from .engine import MemoryEngine
    from .extraction.service import ExtractionReport, ExtractionService, HitlDecision
    from .runtime.client import MemorySystem


class MemoryBackend(Protocol):
    """The memory operations the doors (MCP, CLI, LangGraph store) need."""

    settings: MemorySettings

    async def snapshot(self, owner: str) -> MemorySnapshot: ...

    async def search(self, owners: Sequence[str], query: str, limit: int,
                     filter: Mapping[str, Any] | None = None) -> list[SearchHit]: ...

    async def store(self, owner: str, content: str, metadata: Mapping[str, Any] | None
                    ) -> StoreResult: ...

    async def apply(self, owner: str, ops: Sequence[L1Op]) -> MemorySnapshot: ...

    async def delete(self, owner: str, memory_id: str) -> bool: ...

    async def list_memories(self, owner: str, limit: int, offset: int,
                            filter: Mapping[str, Any] | None = None) -> list[VectorMemory]: ...

    async def update(self, owner: str, memory_id: str, content: str,
                     metadata: Mapping[str, Any] | None) -> VectorMemory: ...

    async def store_many(self, owner: str, items: Sequence[str | Mapping[str, Any]]
                         ) -> list[StoreResult]: ...

    async def memory_history(self, owner: str, memory_id: str) -> list[MemoryVersion]: ...

    async def pending(self, owner: str) -> tuple[MemoryPendingItem, ...]: ...

    async def confirm(self, owner: str, pending_id: str, by: str,
                      edited_content: str | None) -> HitlDecision: ...

    async def reject(self, owner: str, pending_id: str, by: str) -> HitlDecision: ...

    async def append_messages(self, owner: str, conversation: str,
                              messages: Sequence[ChatMessage]) -> ChatAppend: ...

    async def end_conversation(self, owner: str, conversation: str
                               ) -> ExtractionReport | None: ...

    async def audit(self, owner: str, limit: int) -> list[AuditEntry]: ...

    async def supersede(self, owner: str, item_id: str, content: str, by: str,
                        reason: str | None) -> MemoryRule | MemoryFact | VectorMemory: ...

    async def history(self, owner: str, item_id: str) -> ItemHistory: ...

    async def status_history(self, owner: str, key: str) -> list[StatusChange]: ...

    async def snapshot_as_of(self, owner: str, at: datetime) -> MemorySnapshot: ...

    async def forget(self, owner: str, by: str) -> Tombstone: ...

    async def export(self, owner: str) -> list[str]: ...

    async def import_document(self, owner: str, lines: Sequence[str]) -> dict[str, int]: ...

    async def close(self) -> None: ...


class LocalBackend:
    """The memory in this process: ``MemoryEngine`` + ``ExtractionService``.

    What leaves a chat window, and a conversation's last window when it ends, is
    extracted here, in the server process, before the tool answers.
    """

    def __init__(self, engine: MemoryEngine, service: ExtractionService | None = None,
                 *, owns_engine: bool = False) -> None:
        from .extraction.service import ExtractionService

        self.engine = engine
        self.settings = engine.settings
        self.service = service or ExtractionService.for_engine(engine)
        self._owns_engine = owns_engine

    @classmethod
    async def open(cls, settings: MemorySettings) -> LocalBackend:
        """Open the configured stores (closed again by :meth:`close`)."""
        from .engine import MemoryEngine

        return cls(await MemoryEngine.open(settings), owns_engine=True)

    async def snapshot(self, owner: str) -> MemorySnapshot:
        snap = await self.engine.snapshot(owner)
        get_metrics().snapshot_read("store")
        return snap

    async def search(self, owners: Sequence[str], query: str, limit: int,
                     filter: Mapping[str, Any] | None = None) -> list[SearchHit]:
        return await self.engine.search(owners, query, limit=limit, filter=filter)

    async def store(self, owner: str, content: str, metadata: Mapping[str, Any] | None
                    ) -> StoreResult:
        return await self.engine.store(owner, content, metadata=metadata)

    async def apply(self, owner: str, ops: Sequence[L1Op]) -> MemorySnapshot:
        return await self.engine.apply(owner, ops)

    async def delete(self, owner: str, memory_id: str) -> bool:
        return await self.engine.delete(owner, memory_id)

    async def list_memories(self, owner: str, limit: int, offset: int,
                            filter: Mapping[str, Any] | None = None) -> list[VectorMemory]:
        return await self.engine.list(owner, limit=limit, offset=offset, filter=filter)

    async def update(self, owner: str, memory_id: str, content: str,
                     metadata: Mapping[str, Any] | None) -> VectorMemory:
        return await self.engine.update(owner, memory_id, content, metadata=metadata)

    async def store_many(self, owner: str, items: Sequence[str | Mapping[str, Any]]
                         ) -> list[StoreResult]:
        return await self.engine.store_many(owner, items)

    async def memory_history(self, owner: str, memory_id: str) -> list[MemoryVersion]:
        return await self.engine.memory_history(owner, memory_id)

    async def pending(self, owner: str) -> tuple[MemoryPendingItem, ...]:
        return await self.service.pending(owner)

    async def confirm(self, owner: str, pending_id: str, by: str,
                      edited_content: str | None) -> HitlDecision:
        return await self.service.confirm(owner, pending_id, by=by,
                                          edited_content=edited_content)

    async def reject(self, owner: str, pending_id: str, by: str) -> HitlDecision:
        return await self.service.reject(owner, pending_id, by=by)

    async def append_messages(self, owner: str, conversation: str,
                              messages: Sequence[ChatMessage]) -> ChatAppend:
        appended, _ = await self.service.observe(owner, conversation, messages)
        return appended

    async def end_conversation(self, owner: str, conversation: str
                               ) -> ExtractionReport | None:
        return await self.service.finish(owner, conversation)

    async def audit(self, owner: str, limit: int) -> list[AuditEntry]:
        return await self.service.audit(owner, limit=limit)

    async def supersede(self, owner: str, item_id: str, content: str, by: str,
                        reason: str | None) -> MemoryRule | MemoryFact | VectorMemory:
        return await self.engine.supersede(owner, item_id, content, by=by, reason=reason)

    async def history(self, owner: str, item_id: str) -> ItemHistory:
        return await self.engine.history(owner, item_id)

    async def status_history(self, owner: str, key: str) -> list[StatusChange]:
        return await self.engine.status_history(owner, key)

    async def snapshot_as_of(self, owner: str, at: datetime) -> MemorySnapshot:
        return await self.engine.snapshot(owner, as_of=at)

    async def forget(self, owner: str, by: str) -> Tombstone:
        return await self.engine.forget(owner, by=by)

    async def export(self, owner: str) -> list[str]:
        return await self.engine.export(owner)

    async def import_document(self, owner: str, lines: Sequence[str]) -> dict[str, int]:
        """Import ``lines``, a document of ``owner`` (``InvalidImport`` if of another)."""
        from .engine.portability import parse

        if parse(lines).owner != owner:
            raise InvalidImport(f"the document is not of owner {owner!r}")
        return await self.engine.import_document(lines)

    async def close(self) -> None:
        if self._owns_engine:
            await self.engine.close()


class RayBackend:
    """A running memory system on a Ray cluster, through its owner handles.

    The engines run in the system's actors; this process counts the operations it
    asks for (``dream_memory_operations_total`` and the latencies), so the server's
    own ``/metrics`` shows what its clients did.
    """

    def __init__(self, system: MemorySystem) -> None:
        self.system = system
        self.settings = system.settings
        self._metrics = get_metrics()

    @classmethod
    def connect(cls, name: str = "default", ray_address: str | None = "auto") -> RayBackend:
        """Join the running system ``name`` (it keeps running when the server stops)."""
        from .runtime.client import MemorySystem

        return cls(MemorySystem.connect(name, ray_address=ray_address))

    def _op(self, kind: str) -> Any:
        return self._metrics.operation(kind, self.settings.backend)

    async def snapshot(self, owner: str) -> MemorySnapshot:
        with self._op("snapshot"):
            snap = await self.system.owner(owner).snapshot_async()
        self._metrics.snapshot_read("actor")
        self._metrics.observe_pending(owner, len(snap.pending))
        return snap

    async def search(self, owners: Sequence[str], query: str, limit: int,
                     filter: Mapping[str, Any] | None = None) -> list[SearchHit]:
        with self._op("search"):
            return await self.system.search_async(list(owners), query, limit, filter=filter)

    async def store(self, owner: str, content: str, metadata: Mapping[str, Any] | None
                    ) -> StoreResult:
        with self._op("store"):
            result = await self.system.owner(owner).store_async(content, metadata)
        self._metrics.judged(self.settings.backend, result.judgement)
        return result

    async def apply(self, owner: str, ops: Sequence[L1Op]) -> MemorySnapshot:
        with self._op("apply"):
            return await self.system.owner(owner).apply_async(ops)

    async def delete(self, owner: str, memory_id: str) -> bool:
        with self._op("delete"):
            return await self.system.owner(owner).delete_async(memory_id)

    async def list_memories(self, owner: str, limit: int, offset: int,
                            filter: Mapping[str, Any] | None = None) -> list[VectorMemory]:
        with self._op("list"):
            return await self.system.owner(owner).list_async(limit, offset, filter=filter)

    async def update(self, owner: str, memory_id: str, content: str,
                     metadata: Mapping[str, Any] | None) -> VectorMemory:
        with self._op("update"):
            return await self.system.owner(owner).update_async(memory_id, content, metadata)

    async def store_many(self, owner: str, items: Sequence[str | Mapping[str, Any]]
                         ) -> list[StoreResult]:
        with self._op("store_many"):
            return await self.system.owner(owner).store_many_async(items)

    async def memory_history(self, owner: str, memory_id: str) -> list[MemoryVersion]:
        return await self.system.owner(owner).memory_history_async(memory_id)

    async def pending(self, owner: str) -> tuple[MemoryPendingItem, ...]:
        return (await self.snapshot(owner)).pending

    async def confirm(self, owner: str, pending_id: str, by: str,
                      edited_content: str | None) -> HitlDecision:
        with self._op("apply"):
            done = await self.system.owner(owner).confirm_async(pending_id, by, edited_content)
        if done.applied:
            self._metrics.hitl_decision("confirmed")
        return done

    async def reject(self, owner: str, pending_id: str, by: str) -> HitlDecision:
        with self._op("apply"):
            done = await self.system.owner(owner).reject_async(pending_id, by)
        if done.applied:
            self._metrics.hitl_decision("rejected")
        return done

    async def append_messages(self, owner: str, conversation: str,
                              messages: Sequence[ChatMessage]) -> ChatAppend:
        """The owner's actor extracts what leaves the window, in the background."""
        with self._op("append"):
            return await self.system.owner(owner).append_messages_async(conversation, messages)

    async def end_conversation(self, owner: str, conversation: str
                               ) -> ExtractionReport | None:
        with self._op("extract"):
            return await self.system.owner(owner).end_conversation_async(conversation)

    async def audit(self, owner: str, limit: int) -> list[AuditEntry]:
        return await self.system.owner(owner).audit_async(limit)

    async def supersede(self, owner: str, item_id: str, content: str, by: str,
                        reason: str | None) -> MemoryRule | MemoryFact | VectorMemory:
        handle = self.system.owner(owner)
        with self._op("apply"):
            try:
                return await handle.supersede_async(item_id, content, by=by, reason=reason)
            except ItemNotFound as exc:  # not a rule or fact: a semantic memory, perhaps
                if isinstance(exc, ItemSuperseded):
                    raise
                try:
                    await handle.get_async(item_id)
                except MemoryNotFound:
                    raise exc from None
            return await handle.supersede_memory_async(item_id, content, by=by, reason=reason)

    async def history(self, owner: str, item_id: str) -> ItemHistory:
        return await self.system.owner(owner).history_async(item_id)

    async def status_history(self, owner: str, key: str) -> list[StatusChange]:
        return await self.system.owner(owner).status_history_async(key)

    async def snapshot_as_of(self, owner: str, at: datetime) -> MemorySnapshot:
        return await self.system.owner(owner).snapshot_as_of_async(at)

    async def forget(self, owner: str, by: str) -> Tombstone:
        with self._op("forget"):
            return await self.system.owner(owner).forget_async(by=by)

    async def export(self, owner: str) -> list[str]:
        return await self.system.owner(owner).export_async()

    async def import_document(self, owner: str, lines: Sequence[str]) -> dict[str, int]:
        with self._op("import"):
            return await self.system.owner(owner).import_document_async(lines)

    async def close(self) -> None:
        """Nothing to do: the system keeps running for its other clients."""
