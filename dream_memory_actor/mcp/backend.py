"""What the MCP server talks to: one small interface, two implementations.

* :class:`LocalBackend` runs a :class:`~dream_memory_actor.engine.MemoryEngine` and an
  :class:`~dream_memory_actor.extraction.service.ExtractionService` in the server process.
* :class:`RayBackend` joins a running :class:`~dream_memory_actor.runtime.client.MemorySystem`
  (``MemorySystem.connect``) and uses its owner handles.

Both take already-checked arguments; the server validates and authorizes first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ..config import MemorySettings
from ..models import MemoryPendingItem, MemorySnapshot, SearchHit, StoreResult

if TYPE_CHECKING:
    from ..engine import MemoryEngine
    from ..extraction.service import ExtractionService, HitlDecision
    from ..runtime.client import MemorySystem


class MemoryBackend(Protocol):
    """The memory operations the MCP tools need."""

    settings: MemorySettings

    async def snapshot(self, owner: str) -> MemorySnapshot: ...

    async def search(self, owners: Sequence[str], query: str, limit: int) -> list[SearchHit]: ...

    async def store(self, owner: str, content: str, metadata: Mapping[str, Any] | None
                    ) -> StoreResult: ...

    async def pending(self, owner: str) -> tuple[MemoryPendingItem, ...]: ...

    async def confirm(self, owner: str, pending_id: str, by: str,
                      edited_content: str | None) -> HitlDecision: ...

    async def reject(self, owner: str, pending_id: str, by: str) -> HitlDecision: ...

    async def close(self) -> None: ...


class LocalBackend:
    """The memory in this process: ``MemoryEngine`` + ``ExtractionService``."""

    def __init__(self, engine: MemoryEngine, service: ExtractionService | None = None,
                 *, owns_engine: bool = False) -> None:
        from ..extraction.service import ExtractionService

        self.engine = engine
        self.settings = engine.settings
        self.service = service or ExtractionService.for_engine(engine)
        self._owns_engine = owns_engine

    @classmethod
    async def open(cls, settings: MemorySettings) -> LocalBackend:
        """Open the configured stores (closed again by :meth:`close`)."""
        from ..engine import MemoryEngine

        return cls(await MemoryEngine.open(settings), owns_engine=True)

    async def snapshot(self, owner: str) -> MemorySnapshot:
        return await self.engine.snapshot(owner)

    async def search(self, owners: Sequence[str], query: str, limit: int) -> list[SearchHit]:
        return await self.engine.search(owners, query, limit=limit)

    async def store(self, owner: str, content: str, metadata: Mapping[str, Any] | None
                    ) -> StoreResult:
        return await self.engine.store(owner, content, metadata=metadata)

    async def pending(self, owner: str) -> tuple[MemoryPendingItem, ...]:
        return await self.service.pending(owner)

    async def confirm(self, owner: str, pending_id: str, by: str,
                      edited_content: str | None) -> HitlDecision:
        return await self.service.confirm(owner, pending_id, by=by,
                                          edited_content=edited_content)

    async def reject(self, owner: str, pending_id: str, by: str) -> HitlDecision:
        return await self.service.reject(owner, pending_id, by=by)

    async def close(self) -> None:
        if self._owns_engine:
            await self.engine.close()


class RayBackend:
    """A running memory system on a Ray cluster, through its owner handles."""

    def __init__(self, system: MemorySystem) -> None:
        self.system = system
        self.settings = system.settings

    @classmethod
    def connect(cls, name: str = "default", ray_address: str | None = "auto") -> RayBackend:
        """Join the running system ``name`` (it keeps running when the server stops)."""
        from ..runtime.client import MemorySystem

        return cls(MemorySystem.connect(name, ray_address=ray_address))

    async def snapshot(self, owner: str) -> MemorySnapshot:
        return await self.system.owner(owner).snapshot_async()

    async def search(self, owners: Sequence[str], query: str, limit: int) -> list[SearchHit]:
        return await self.system.search_async(list(owners), query, limit)

    async def store(self, owner: str, content: str, metadata: Mapping[str, Any] | None
                    ) -> StoreResult:
        return await self.system.owner(owner).store_async(content, metadata)

    async def pending(self, owner: str) -> tuple[MemoryPendingItem, ...]:
        return (await self.snapshot(owner)).pending

    async def confirm(self, owner: str, pending_id: str, by: str,
                      edited_content: str | None) -> HitlDecision:
        return await self.system.owner(owner).confirm_async(pending_id, by, edited_content)

    async def reject(self, owner: str, pending_id: str, by: str) -> HitlDecision:
        return await self.system.owner(owner).reject_async(pending_id, by)

    async def close(self) -> None:
        """Nothing to do: the system keeps running for its other clients."""
