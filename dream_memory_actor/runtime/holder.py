"""What the two kinds of owner-holding actors share: the engine and every call.

:class:`OwnerHolder` opens its engine lazily, so a restarted actor (``max_restarts``)
comes back empty and reloads each owner from the backend on first use: nothing
acknowledged is lost, since every write was written through before it was
acknowledged. Subclasses (``owner_actor``) say where an owner's
:class:`~.owner.OwnerMemory` lives: ``_use``, ``_held`` and ``_used``. Once its engine is
open, each actor follows the store's change feed (``follow``): an owner written
behind it (by the CLI, another engine) is reloaded within moments.

Extraction runs here too: what leaves a chat window is extracted in the
background, holding the owner as a call does; every write of the extraction
service goes through the owner's memory (:class:`_OwnerWriter`).
"""

from __future__ import annotations

import abc
import asyncio
import logging
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import Any

import ray

from ..engine import MemoryEngine, operations
from ..engine.doors import LocalBackend
from ..errors import ExtractionError
from ..extraction import ExtractionReport, ExtractionService, open_extractor
from ..metrics import get_metrics
from ..models import (
    AuditAction,
    AuditEntry,
    ChatAppend,
    ChatMessage,
    MemoryPendingItem,
    MemorySnapshot,
    StoreResult,
    Tombstone,
)
from ..storage.ops import L1Op
from .follow import Follower
from .owner import OwnerMemory
from .placement import parse_read_task_name
from .spec import SystemSpec, open_owner_engine
from .vector_index import IndexL2

log = logging.getLogger(__name__)

# Reads cross Ray as lists, not tuples: Ray serializes str/int/None/list with msgpack
# alone, but any tuple goes through pickle as well (bench: a no-op returning a tuple
# ran at ~0.85-0.95x the rate of one returning None; a list, ~1.0x).

#: A snapshot read's answer: [lineage token, version, the snapshot or None if unchanged].
SnapshotReply = list[Any]


class OwnerHolder(abc.ABC):
    """What the two kinds of owner-holding actors share: the engine and the calls."""

    def __init__(self, spec: SystemSpec) -> None:
        self._spec = spec
        self._l2 = IndexL2(spec.name, spec.index_replicas, spec.call_timeout_s)
        self._engine: MemoryEngine | None = None
        self._opening = asyncio.Lock()
        self._extraction: ExtractionService | None = None
        self._backend: LocalBackend | None = None
        #: Background extractions of overflowing chat windows, per owner.
        self._extracting: dict[str, set[asyncio.Task[None]]] = {}
        self._follower = Follower(self._held, self._all_held)

    async def _open(self) -> MemoryEngine:
        if self._engine is None:
            async with self._opening:
                if self._engine is None:
                    engine = await open_owner_engine(self._spec)
                    # Listening before the first snapshot is loaded: no write made
                    # elsewhere falls between a load and the start of the feed.
                    await self._follower.start(engine.structured)
                    self._engine = engine
        return self._engine

    @abc.abstractmethod
    def _use(self, owner: str) -> AbstractAsyncContextManager[OwnerMemory]:
        """The owner's memory (activated if needed), counted as busy while in use."""

    @abc.abstractmethod
    def _held(self, owner: str) -> OwnerMemory | None:
        """The owner's memory if it is live here, without recording a use."""

    @abc.abstractmethod
    def _used(self, owner: str) -> None:
        """Record a use of ``owner``, live here: what keeps it from passivation as idle."""

    @abc.abstractmethod
    def _all_held(self) -> Iterable[OwnerMemory]:
        """Every owner memory live here (none recorded as used)."""

    async def close(self) -> None:
        """Stop following the change feed and close the engine."""
        await self._follower.close()
        if self._engine is not None:
            await self._engine.close()

    def read(self) -> SnapshotReply | None:
        """The fast read: no argument (each argument of a Ray call costs it a
        serialization both ways), its question in the task's name (see
        :func:`~.placement.read_task_name`); run on Ray's call thread without an event
        loop hop.

        Answers from memory only; ``None`` sends the caller to :meth:`snapshot` (the
        owner is not loaded here, ``min_version`` is ahead, or the task is not a read).
        A caller that already holds version ``version`` of lineage ``token`` gets no
        snapshot back, only the confirmation it is current.
        """
        question = parse_read_task_name(ray.get_runtime_context().get_task_name())
        if question is None:
            return None
        owner, min_version, token, version = question
        mem = self._held(owner)
        if mem is None:
            return None
        self._used(owner)
        snap = mem.peek(min_version)
        if snap is None:
            return None
        lineage = _lineage(mem, snap)
        get_metrics().snapshot_read("actor")
        if token == lineage and version == snap.version:
            return [lineage, snap.version, None]
        return [lineage, snap.version, snap]

    async def snapshot(self, owner: str, min_version: int | None, timeout_s: float,
                       min_epoch: str | None = None) -> SnapshotReply:
        """The full read: loads the owner if needed, waits for ``min_version`` (of
        ``min_epoch``, see ``MemorySnapshot.reached``)."""
        async with self._use(owner) as mem:
            snap: MemorySnapshot = await mem.snapshot(min_version, timeout_s, min_epoch)
            get_metrics().snapshot_read("actor")
            return [_lineage(mem, snap), snap.version, snap]

    async def apply(self, owner: str, ops: Sequence[L1Op], op_id: str | None
                    ) -> MemorySnapshot:
        async with self._use(owner) as mem:
            return await mem.apply(ops, op_id)

    async def forget(self, owner: str, by: str, op_id: str | None) -> Tombstone:
        """Erase the owner. Its background extractions are cancelled first: what they
        would write comes from what is being erased."""
        for task in list(self._extracting.get(owner, ())):
            task.cancel()
        await self.flush_extractions(owner)
        async with self._use(owner) as mem:
            return await mem.forget(by, op_id)

    async def export(self, owner: str) -> list[str]:
        """The owner's export document, read while no write of the owner runs. The
        VectorIndex makes it (and imports), since it holds the embedder and knows the
        model; the owner's actor holds the owner meanwhile."""
        self._one_storage("export")
        async with self._use(owner) as mem:
            lines: list[str] = await mem.exclusive(lambda: self._l2.export(owner))
            return lines

    async def import_document(self, owner: str, lines: list[str]) -> dict[str, int]:
        """Import a document of ``owner`` into it (the handle checked that its header
        names ``owner``; the engine checks the rest)."""
        self._one_storage("import")
        async with self._use(owner) as mem:
            counts: dict[str, int] = await mem.exclusive(
                lambda: self._l2.import_document(owner, lines), replaces=True)
            return counts

    def _one_storage(self, what: str) -> None:
        if self._spec.settings.backend == "memory":
            from ..errors import UnsupportedBackend

            raise UnsupportedBackend(
                f"{what} in a memory system needs a shared storage (postgres or redis): "
                "backend 'memory' keeps L1 in the owner actors and L2 in the VectorIndex")

    async def ping(self) -> None:
        """A no-op (benchmarks compare against it; the registry probes with it)."""
        return None

    # -- extraction and the L3 chat window ------------------------------------------------

    async def _service(self) -> ExtractionService:
        """The extraction service of this actor, writing through the owners held here."""
        if self._extraction is None:
            engine = await self._open()
            pool = self._spec.extractor_pool
            extractor = pool.as_extractor() if pool is not None else open_extractor(
                self._spec.settings)
            if self._extraction is None:
                self._extraction = ExtractionService(_OwnerWriter(self), engine.structured,
                                                     extractor, self._spec.settings)
        return self._extraction

    async def _local(self) -> LocalBackend:
        """This actor's engine and extraction service as a process of its own serves them."""
        if self._backend is None:
            self._backend = LocalBackend(await self._open(), await self._service())
        return self._backend

    async def append_messages(self, owner: str, conversation: str,
                              messages: Sequence[ChatMessage], op_id: str | None = None
                              ) -> ChatAppend:
        """Append to the (owner, conversation) window; what leaves it is extracted in the
        background (an extraction failure is logged, the append stands).

        The background extraction holds the owner as a call does, taken over before
        this call lets go: a busy owner is not passivated (sharded), and passivating
        its actor waits for it within the drain grace (dedicated).
        """
        async with self._use(owner):
            svc = await self._service()
            appended: ChatAppend = await svc.append_messages(owner, conversation, messages,
                                                             op_id=op_id)
            if appended.overflow:
                held = asyncio.Event()
                task = asyncio.get_running_loop().create_task(
                    self._extract_held(svc, owner, appended.overflow, held))
                tasks = self._extracting.setdefault(owner, set())
                tasks.add(task)
                task.add_done_callback(lambda t: self._extraction_done(owner, t))
                await held.wait()
        return appended

    async def _extract_held(self, svc: ExtractionService, owner: str,
                            messages: Sequence[ChatMessage], held: asyncio.Event) -> None:
        try:
            async with self._use(owner):
                held.set()
                await self._extract_quietly(svc, owner, messages)
        except Exception:  # could not hold the owner (shutting down): logged
            log.exception("extraction for owner %r could not start", owner)
        finally:
            held.set()

    def _extraction_done(self, owner: str, task: asyncio.Task[None]) -> None:
        tasks = self._extracting.get(owner)
        if tasks is not None:
            tasks.discard(task)
            if not tasks:
                del self._extracting[owner]

    async def _extract_quietly(self, svc: ExtractionService, owner: str,
                               messages: Sequence[ChatMessage]) -> None:
        try:
            await svc.extract(owner, messages)
        except ExtractionError as exc:
            log.warning("extraction for owner %r failed: %s", owner, exc)
        except Exception:  # never lost silently: the task has no one awaiting it
            log.exception("extraction for owner %r failed", owner)

    async def flush_extractions(self, owner: str) -> int:
        """Wait for the background extractions of ``owner`` started so far; how many."""
        tasks = list(self._extracting.get(owner, ()))
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        return len(tasks)

    async def end_conversation(self, owner: str, conversation: str
                               ) -> ExtractionReport | None:
        """Close the conversation and extract from its last window (``None``: it was
        empty). If extraction fails the window is put back and the error raised, so
        calling ``end_conversation`` again retries with the same messages."""
        async with self._use(owner):
            svc = await self._service()
            window = await svc.end_conversation(owner, conversation)
        if not window:
            return None
        try:
            return await svc.extract(owner, window)
        except ExtractionError:
            async with self._use(owner):
                await svc.append_messages(owner, conversation, window)
            raise

    async def extract(self, owner: str, messages: Sequence[ChatMessage]) -> ExtractionReport:
        """Extract from ``messages`` now and apply the result through the gate."""
        async with self._use(owner):
            svc = await self._service()
        return await svc.extract(owner, messages)


def _lineage(mem: OwnerMemory, snap: MemorySnapshot) -> str:
    """What a reader's cached copy is valid for besides the version: this live instance
    (a reload elsewhere gets a new token) and the backend's epoch of the owner's state
    (a backend that restarted empty counts versions again from 1)."""
    return f"{mem.token}.{snap.epoch}"


class _OwnerWriter:
    """The extraction service's writer: every write goes through the owner's
    :class:`OwnerMemory` in this actor, serialized with the owner's other writes, so
    the live snapshot stays current. Each call enters and leaves the owner on its own:
    no write is made while another holds the owner's lock."""

    def __init__(self, holder: OwnerHolder) -> None:
        self._holder = holder

    async def snapshot(self, owner: str) -> MemorySnapshot:
        async with self._holder._use(owner) as mem:
            return await mem.snapshot()

    async def apply(self, owner: str, ops: Sequence[L1Op], *, op_id: str | None = None
                    ) -> MemorySnapshot:
        async with self._holder._use(owner) as mem:
            return await mem.apply(ops, op_id)

    async def decide(self, owner: str, pending_id: str, action: AuditAction, by: str, *,
                     edited: str | None = None, op_id: str | None = None
                     ) -> tuple[MemorySnapshot, AuditEntry] | None:
        async with self._holder._use(owner) as mem:
            return await mem.decide(pending_id, action, by, edited, op_id)

    async def store(self, owner: str, content: str, *,
                    metadata: Mapping[str, Any] | None = None, op_id: str | None = None,
                    context: str | None = None) -> StoreResult:
        async with self._holder._use(owner) as mem:
            result: StoreResult = await mem.l2(operations.store,
                                               (content, metadata, context, op_id))
            return result

    async def propose(self, owner: str) -> list[MemoryPendingItem]:
        async with self._holder._use(owner) as mem:  # a read: the owner's writes go on
            found: list[MemoryPendingItem] = await mem.read(operations.propose, ())
            return found

    async def apply_proposal(self, owner: str, item: MemoryPendingItem, *, by: str,
                             edited: str | None = None) -> str | None:
        async with self._holder._use(owner) as mem:
            kept: str | None = await mem.l2(operations.apply_proposal, (item, by, edited))
            return kept

    async def unapply_proposal(self, owner: str, pending_id: str) -> int:
        async with self._holder._use(owner) as mem:
            came_back: int = await mem.l2(operations.unapply_proposal, (pending_id,))
            return came_back

    async def undo_decision(self, owner: str, pending_id: str, by: str, *, restored: int,
                            expires_at: datetime | None = None, op_id: str | None = None
                            ) -> tuple[MemorySnapshot, AuditEntry] | None:
        async with self._holder._use(owner) as mem:
            return await mem.undo_decision(pending_id, by, restored, expires_at, op_id)


def _writer_method(op: operations.Operation[Any, Any]) -> Any:
    """An L2 write through the owner's writer (``OwnerMemory.l2``)."""

    async def method(self: OwnerHolder, owner: str, *values: Any) -> Any:
        async with self._use(owner) as mem:
            return await mem.l2(op, values)

    return method


def _owner_method(op: operations.Operation[Any, Any]) -> Any:
    """An owner operation served as a process of its own serves it (``LocalBackend``,
    over this actor's engine and extraction service), holding the owner as a call does."""

    async def method(self: OwnerHolder, owner: str, *values: Any) -> Any:
        async with self._use(owner):
            return await (await self._local()).run(op, owner, op.named(values))

    return method


# The described operations this actor serves that need nothing of their own here: an
# L2 write goes through the owner's writer, the owner's other operations (the history,
# a past snapshot, the decisions on pending items and their audit trail) as in a
# process of its own.
for _op in operations.serving("writer", "owner"):
    if _op.name not in vars(OwnerHolder):
        _op.install(OwnerHolder, _writer_method(_op) if _op.serves == "writer"
                    else _owner_method(_op))
