"""What the review pages read and decide through: a running memory system, or the engine.

:class:`SystemReview` joins a running memory system by name and uses its owner
handles, so every decision is applied by the owner actor that holds the owner (one
writer per owner; agents read the decision at once). :class:`EngineReview` opens
the configured storage in this process; the owner actors of a system on the same
storage learn of its writes from the store's change feed.

Both answer a decision with :class:`Outcome`: written now, or already decided
before (by whom, when), never a second write.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from ..errors import PendingItemDecided, PendingItemNotFound
from ..models import AuditAction, AuditEntry, MemorySnapshot, MemoryVersion, SearchHit

if TYPE_CHECKING:
    from ..config import MemorySettings
    from ..engine import MemoryEngine
    from ..extraction.service import ExtractionService, HitlDecision
    from ..runtime.client import MemorySystem

#: The most audit entries one page of the trail may reach back (the stores' limit).
AUDIT_REACH = 1000


@dataclass(frozen=True)
class Outcome:
    """A decision as recorded. ``applied``: this request wrote it; else it was made before."""

    entry: AuditEntry
    applied: bool


class ReviewBackend(Protocol):
    """The memory operations of the review pages."""

    settings: MemorySettings
    #: ``"system NAME"`` or ``"storage"``: shown in the page footer.
    route: str

    async def snapshot(self, owner: str) -> MemorySnapshot: ...

    async def decide(
        self, owner: str, pending_id: str, action: AuditAction, by: str, edited: str | None
    ) -> Outcome: ...

    async def audit(self, owner: str, limit: int) -> list[AuditEntry]: ...

    async def search(self, owner: str, query: str, limit: int) -> list[SearchHit]: ...

    async def memory_history(self, owner: str, memory_id: str) -> list[MemoryVersion]: ...

    async def close(self) -> None: ...


async def decision_of(backend: ReviewBackend, owner: str, pending_id: str) -> AuditEntry | None:
    """The recorded decision on ``owner``'s item ``pending_id``, if there is one in reach."""
    return next(
        (e for e in await backend.audit(owner, AUDIT_REACH) if e.pending_id == pending_id), None
    )


async def _outcome(
    backend: ReviewBackend, owner: str, pending_id: str, decision: HitlDecision | None
) -> Outcome:
    if decision is not None:
        return Outcome(entry=decision.entry, applied=decision.applied)
    entry = await decision_of(backend, owner, pending_id)
    if entry is None:  # raced away and not in reach: say so plainly
        raise PendingItemNotFound(f"owner {owner!r} has no pending item {pending_id!r}")
    return Outcome(entry=entry, applied=False)


class EngineReview:
    """The configured storage, opened in this process."""

    route = "storage"

    def __init__(
        self,
        engine: MemoryEngine,
        service: ExtractionService | None = None,
        *,
        owns_engine: bool = False,
    ) -> None:
        from ..extraction.rules import RuleBasedExtractor
        from ..extraction.service import ExtractionService

        self.engine = engine
        self.settings = engine.settings
        # deciding needs no extractor: the rule-based one is never called here
        self.service = service or ExtractionService(
            engine, engine.structured, RuleBasedExtractor(), engine.settings
        )
        self._owns_engine = owns_engine

    @classmethod
    async def open(cls, settings: MemorySettings) -> EngineReview:
        from ..engine import MemoryEngine

        return cls(await MemoryEngine.open(settings), owns_engine=True)

    async def snapshot(self, owner: str) -> MemorySnapshot:
        return await self.engine.snapshot(owner)

    async def decide(
        self, owner: str, pending_id: str, action: AuditAction, by: str, edited: str | None
    ) -> Outcome:
        try:
            if action == "confirmed":
                done = await self.service.confirm(owner, pending_id, by=by, edited_content=edited)
            else:
                done = await self.service.reject(owner, pending_id, by=by)
        except PendingItemDecided:  # decided the other way: report that decision
            return await _outcome(self, owner, pending_id, None)
        return await _outcome(self, owner, pending_id, done)

    async def audit(self, owner: str, limit: int) -> list[AuditEntry]:
        return await self.service.audit(owner, limit=limit)

    async def search(self, owner: str, query: str, limit: int) -> list[SearchHit]:
        return await self.engine.search([owner], query, limit=limit)

    async def memory_history(self, owner: str, memory_id: str) -> list[MemoryVersion]:
        return await self.engine.memory_history(owner, memory_id)

    async def close(self) -> None:
        if self._owns_engine:
            await self.engine.close()


class SystemReview:
    """A running memory system, through its owner handles."""

    def __init__(self, system: MemorySystem, name: str) -> None:
        self.system = system
        self.settings = system.settings
        self.route = f"system {name}"

    @classmethod
    def connect(cls, name: str, ray_address: str | None = "auto") -> SystemReview:
        """Join the running system ``name`` (it keeps running when the pages stop)."""
        from ..runtime.client import MemorySystem

        return cls(MemorySystem.connect(name, ray_address=ray_address), name)

    async def snapshot(self, owner: str) -> MemorySnapshot:
        return await self.system.owner(owner).snapshot_async()

    async def decide(
        self, owner: str, pending_id: str, action: AuditAction, by: str, edited: str | None
    ) -> Outcome:
        handle = self.system.owner(owner)
        try:
            if action == "confirmed":
                done = await handle.confirm_async(pending_id, by, edited)
            else:
                done = await handle.reject_async(pending_id, by)
        except PendingItemDecided:
            return await _outcome(self, owner, pending_id, None)
        return await _outcome(self, owner, pending_id, done)

    async def audit(self, owner: str, limit: int) -> list[AuditEntry]:
        return await self.system.owner(owner).audit_async(limit)

    async def search(self, owner: str, query: str, limit: int) -> list[SearchHit]:
        return await self.system.search_async([owner], query, limit)

    async def memory_history(self, owner: str, memory_id: str) -> list[MemoryVersion]:
        return await self.system.owner(owner).memory_history_async(memory_id)

    async def close(self) -> None:
        """Nothing to close: the system keeps running for its agents."""
