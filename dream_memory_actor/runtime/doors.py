"""The doors' memory interface (``engine.doors.MemoryBackend``) over a running memory
system on Ray: :class:`RayBackend`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..engine import operations as ops
from ..engine.doors import MemoryBackend
from ..engine.operations import Operation
from ..errors import ItemNotFound, ItemSuperseded, MemoryNotFound
from ..metrics import get_metrics
from ..models import (
    MemoryFact,
    MemoryRule,
    MemorySnapshot,
    SearchHit,
    VectorMemory,
    new_id,
)
from ..storage.base import new_item
from ..storage.ops import L1Op, Supersede
from . import calls
from .client import MemorySystem


class RayBackend(MemoryBackend):
    """A running memory system on a Ray cluster, through its owner handles.

    An operation goes to the system's actors as the call an owner handle would send
    for it, made from the arguments the door checked (not checked again here: the
    store checks them in the actor, as the authority). The engines run in
    the system's actors; this process counts the operations it asks for
    (``dream_memory_operations_total`` and the latencies, under each operation's
    ``metric``), so the server's own ``/metrics`` shows what its clients did.
    """

    def __init__(self, system: MemorySystem) -> None:
        self.system = system
        self.settings = system.settings
        self.route = f"system {system.name}"
        self._metrics = get_metrics()

    @classmethod
    def connect(cls, name: str = "default", ray_address: str | None = "auto") -> RayBackend:
        """Join the running system ``name`` (it keeps running when the server stops)."""
        return cls(MemorySystem.connect(name, ray_address=ray_address))

    def _op(self, kind: str) -> Any:
        return self._metrics.operation(kind, self.settings.backend)

    async def perform(self, op: Operation[Any, Any], owner: str, args: Sequence[Any],
                      kwargs: Mapping[str, Any]) -> Any:
        send = self.system.connection.call_async
        call = calls.checked(op, owner, tuple(op.bind(args, kwargs).values()))
        if op.metric is None:
            return await send(call)
        with self._op(op.metric):
            done = await send(call)
        if op is ops.store:
            self._metrics.judged(self.settings.backend, done.judgement)
        elif op in (ops.confirm, ops.reject, ops.undo_proposal) and done.applied:
            self._metrics.hitl_decision(done.entry.action)
        return done

    async def snapshot(self, owner: str) -> MemorySnapshot:
        with self._op("snapshot"):
            snap = await self.system.owner(owner).snapshot_async()
        self._metrics.snapshot_read("actor")
        self._metrics.observe_pending(owner, len(snap.pending))
        return snap

    async def search(self, owners: Sequence[str], query: str, limit: int,
                     filter: Mapping[str, Any] | None = None) -> list[SearchHit]:
        with self._op("search"):
            return await self.system.connection.call_async(
                calls.searched(list(owners), query, limit, 0.0, filter))

    async def apply(self, owner: str, ops: Sequence[L1Op]) -> MemorySnapshot:
        with self._op("apply"):
            return await self.system.connection.call_async(
                calls.applied(owner, ops, new_id(), calls.same))

    async def supersede(self, owner: str, item_id: str, content: str, by: str,
                        reason: str | None) -> MemoryRule | MemoryFact | VectorMemory:
        send = self.system.connection.call_async
        replace = Supersede(item_id, content, by, reason)
        with self._op("apply"):
            try:
                return await send(calls.applied(owner, [replace], new_id(),
                                                lambda snap: new_item(snap, content)))
            except ItemNotFound as exc:  # not a rule or fact: a semantic memory, perhaps
                if isinstance(exc, ItemSuperseded):
                    raise
                try:
                    await send(calls.checked(ops.get, owner, (item_id,)))
                except MemoryNotFound:
                    raise exc from None
            memory = ops.supersede_memory.bind((), {"memory_id": item_id, "content": content,
                                                    "by": by, "reason": reason,
                                                    "op_id": new_id()})
            return await send(calls.checked(ops.supersede_memory, owner,
                                            tuple(memory.values())))
