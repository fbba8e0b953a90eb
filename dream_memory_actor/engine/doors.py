"""What the doors (the MCP server, the CLI, the review pages) talk to: one interface
over the memory, in this process (:class:`LocalBackend`) or in a running memory system
on Ray (``runtime.doors.RayBackend``).

A door runs a described operation (``engine.operations``) with
:meth:`MemoryBackend.call`, which checks its arguments by their rules and hands it to
:meth:`MemoryBackend.perform`; the rest (the snapshot, a search over several owners,
the L1 writes, superseding an item of either layer) is written here, and takes
already-checked arguments: its callers validate (and the MCP server authorizes) first.
The pending queue is the snapshot's, read the same way over either backend.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, cast

from ..config import MemorySettings
from ..metrics import get_metrics
from ..models import (
    MemoryFact,
    MemoryPendingItem,
    MemoryRule,
    MemorySnapshot,
    SearchHit,
    VectorMemory,
)
from ..storage.ops import L1Op
from . import operations as ops
from .operations import Operation, Scope

if TYPE_CHECKING:
    from ..extraction.service import ExtractionService
    from .memory_engine import MemoryEngine

Hits = list[SearchHit]
P = ParamSpec("P")
R = TypeVar("R")


class MemoryBackend(abc.ABC):
    """The memory operations the doors need, each with the owner first."""

    settings: MemorySettings
    #: Where the operations go, for people: ``"storage"`` (opened in this process) or
    #: ``"system NAME"`` (a running memory system).
    route: str

    @abc.abstractmethod
    async def perform(self, op: Operation[Any, Any], owner: str, args: Sequence[Any],
                      kwargs: Mapping[str, Any]) -> Any:
        """Run the described operation ``op`` for ``owner``, its arguments as its
        signature takes them, already checked, an operation id made (``call`` checks
        them; they are not checked again on the way to the store)."""

    @abc.abstractmethod
    async def snapshot(self, owner: str) -> MemorySnapshot: ...

    @abc.abstractmethod
    async def search(self, owners: Sequence[str], query: str, limit: int,
                     filter: Mapping[str, Any] | None = None) -> Hits: ...

    @abc.abstractmethod
    async def apply(self, owner: str, ops: Sequence[L1Op]) -> MemorySnapshot: ...

    @abc.abstractmethod
    async def supersede(self, owner: str, item_id: str, content: str, by: str,
                        reason: str | None) -> MemoryRule | MemoryFact | VectorMemory:
        """Supersede the rule, fact or semantic memory ``item_id``; the new item."""

    async def pending(self, owner: str) -> tuple[MemoryPendingItem, ...]:
        """The items waiting for a person's decision: the snapshot's."""
        return (await self.snapshot(owner)).pending

    async def call(self, op: Operation[P, R], owner: str, *args: P.args, **kwargs: P.kwargs
                   ) -> R:
        """``op`` for ``owner``, its arguments checked first by their rules (the check a
        door makes, the same at every door)."""
        s = self.settings
        named = op.named(op.check(Scope(owner, s.max_content_bytes, s.limits), args, kwargs))
        return cast(R, await self.perform(op, owner, (), named))

    async def close(self) -> None:
        """Release what this backend opened (nothing, unless it says otherwise)."""
        return None


class LocalBackend(MemoryBackend):
    """The memory in this process: ``MemoryEngine`` + ``ExtractionService``.

    An operation is the engine's method of its name, or else the extraction
    service's. What leaves a chat window, and a conversation's last window when it
    ends, is extracted here, in the server process, before the tool answers.
    """

    route = "storage"

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
        from .memory_engine import MemoryEngine

        return cls(await MemoryEngine.open(settings), owns_engine=True)

    async def perform(self, op: Operation[Any, Any], owner: str, args: Sequence[Any],
                      kwargs: Mapping[str, Any]) -> Any:
        named = op.bind(args, kwargs)
        named.pop("op_id", None)  # a call in this process is not retried: no id is kept
        return await self.run(op, owner, named)

    async def run(self, op: Operation[Any, Any], owner: str, named: Mapping[str, Any]
                  ) -> Any:
        """The described operation ``op`` for ``owner``, its checked arguments by name
        (an ``op_id`` among them is kept with the write: a retry applies it once)."""
        if op is ops.snapshot_as_of:
            return await self.engine.snapshot(owner, as_of=named["at"])
        if op is ops.append_messages:  # and extract what leaves the window, here
            appended, _ = await self.service.observe(owner, named["conversation"],
                                                     named["messages"])
            return appended
        if op is ops.end_conversation:
            return await self.service.finish(owner, named["conversation"])
        if op is ops.flush_extractions:
            return 0  # nothing runs in the background here: every extraction is awaited
        if op is ops.consolidate:  # its proposals are confirmed as a person confirms them
            return await self.service.consolidate(owner, **named)
        if op is ops.undo_proposal:  # recorded and queued again as a decision is
            return await self.service.undo_proposal(owner, **named)
        if op is ops.import_document:  # the document's owner was checked by its rule
            return await self.engine.import_document(named["lines"])
        run = getattr(self.engine, op.name, None) or getattr(self.service, op.name)
        return await run(owner, **named)

    async def snapshot(self, owner: str) -> MemorySnapshot:
        snap = await self.engine.snapshot(owner)
        get_metrics().snapshot_read("store")
        return snap

    async def search(self, owners: Sequence[str], query: str, limit: int,
                     filter: Mapping[str, Any] | None = None) -> Hits:
        return await self.engine.search(owners, query, limit=limit, filter=filter)

    async def apply(self, owner: str, ops: Sequence[L1Op]) -> MemorySnapshot:
        return await self.engine.apply(owner, ops)

    async def supersede(self, owner: str, item_id: str, content: str, by: str,
                        reason: str | None) -> MemoryRule | MemoryFact | VectorMemory:
        return await self.engine.supersede(owner, item_id, content, by=by, reason=reason)

    async def close(self) -> None:
        if self._owns_engine:
            await self.engine.close()
