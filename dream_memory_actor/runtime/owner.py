"""One owner's live memory, and a table of many: pure asyncio, no Ray.

:class:`OwnerMemory` is the single writer of one owner. Every write takes its
lock, writes through to the backend, and only then answers; the snapshot it
keeps is the backend's, so reads need no round trip. The owner actors
(``dedicated``) hold one, the shard hosts (``sharded``) hold an
:class:`OwnerTable` of them. Writes and admissions only ever run inside one
event loop, which is what makes the bookkeeping below race-free without further
locks. The one exception is the fast read, which comes from other threads: it
only reads ``peek`` (one attribute) and records the use in the ``LiveSet``, which
locks.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any, Protocol

from ..engine.operations import Operation
from ..errors import InvalidInput, NotFound
from ..models import (
    AuditAction,
    AuditEntry,
    MemorySnapshot,
    Tombstone,
    new_id,
    utcnow,
)
from ..storage.ops import L1Op
from ..text import MemoryText
from .errors import OwnerMoved, RuntimeTimeout
from .placement import LiveSet

#: How often a ``min_version`` wait looks at the backend for writes made elsewhere.
VERSION_POLL_S = 0.25


class L1Engine(Protocol):
    async def snapshot(self, owner: str) -> MemorySnapshot: ...

    async def apply(self, owner: str, ops: Sequence[L1Op], *, op_id: str | None = None
                    ) -> MemorySnapshot: ...

    async def decide(self, owner: str, pending_id: str, action: AuditAction, by: str, *,
                     edited: str | None = None, op_id: str | None = None
                     ) -> tuple[MemorySnapshot, AuditEntry] | None: ...

    async def undo_decision(self, owner: str, pending_id: str, by: str, *, restored: int,
                            expires_at: datetime | None = None, op_id: str | None = None
                            ) -> tuple[MemorySnapshot, AuditEntry] | None: ...

    async def forget(self, owner: str, *, by: str, op_id: str | None = None,
                     memories: Callable[[str], Awaitable[int]] | None = None
                     ) -> Tombstone: ...


class L2Path(Protocol):
    """Where an owner's semantic memories are written: the VectorIndex (or an engine).
    Besides this, it has the engine's method of each L2 write (``engine.operations``,
    served by the ``"writer"``), called by name with keyword arguments."""

    async def forget_memories(self, owner: str) -> int: ...

    async def prepare(self, owner: str, memories: list[MemoryText]) -> bool: ...


class OwnerMemory:
    """The live snapshot of one owner and the lock that serializes its writes."""

    def __init__(self, owner: str, l1: L1Engine, l2: L2Path) -> None:
        self.owner = owner
        self._l1 = l1
        self._l2 = l2
        self._lock = asyncio.Lock()
        self._snap: MemorySnapshot | None = None
        self._bumped = asyncio.Event()
        #: Calls inside or waiting for this owner; a busy owner is never passivated.
        self.users = 0
        #: Set when passivated: calls still arriving are told to go elsewhere.
        self.closed = False
        #: Names this instance's snapshot lineage: a reader's cached copy is reused only
        #: for the same token and version (a reload, e.g. after a restart, gets a new one).
        self.token = new_id()
        self._idle = asyncio.Event()
        self._idle.set()

    # -- bookkeeping ------------------------------------------------------------------

    def enter(self) -> None:
        if self.closed:
            raise OwnerMoved(f"owner {self.owner!r} was passivated here")
        self.users += 1
        self._idle.clear()

    def leave(self) -> None:
        self.users -= 1
        if self.users == 0:
            self._idle.set()

    async def drain(self, grace_s: float) -> bool:
        """Refuse new calls and wait (bounded) for the calls in flight; True if none remain."""
        self.closed = True
        try:
            await asyncio.wait_for(self._idle.wait(), grace_s)
        except asyncio.TimeoutError:
            return False
        return True

    @property
    def version(self) -> int:
        return -1 if self._snap is None else self._snap.version

    def _set(self, snap: MemorySnapshot) -> None:
        # Versions only move forward within an epoch; a new epoch (the backend lost the
        # owner's state and made it again) replaces whatever was held, at any version.
        held = self._snap
        if held is None or snap.epoch != held.epoch or snap.version >= held.version:
            self._snap = snap
        self._bumped.set()
        self._bumped = asyncio.Event()

    async def _loaded(self) -> MemorySnapshot:
        if self._snap is None:
            async with self._lock:
                if self._snap is None:
                    self._set(await self._l1.snapshot(self.owner))
        assert self._snap is not None
        return self._snap

    # -- reads ------------------------------------------------------------------------

    def peek(self, min_version: int | None = None, min_epoch: str | None = None
             ) -> MemorySnapshot | None:
        """The snapshot if it is in memory (and at ``min_version`` of ``min_epoch``, see
        ``MemorySnapshot.reached``), without waiting.

        Not expired here: readers call ``live()`` on what they get.
        """
        snap = self._snap
        if self.closed or snap is None or (min_version is not None
                                            and not snap.reached(min_version, min_epoch)):
            return None
        return snap

    async def snapshot(self, min_version: int | None = None, timeout_s: float = 10.0,
                       min_epoch: str | None = None) -> MemorySnapshot:
        """The live snapshot, from memory; with ``min_version``, wait until it is reached."""
        snap = await self._loaded()
        if min_version is not None and not snap.reached(min_version, min_epoch):
            snap = await self._wait_version(min_version, min_epoch, timeout_s)
        return snap.live(utcnow())

    async def _wait_version(self, version: int, epoch: str | None, timeout_s: float
                            ) -> MemorySnapshot:
        deadline = time.monotonic() + timeout_s
        while True:
            snap = await self._loaded()
            if snap.reached(version, epoch):
                return snap
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RuntimeTimeout(
                    f"owner {self.owner!r} is at version {snap.version}; version {version} "
                    f"was not reached within {timeout_s}s"
                )
            try:
                await asyncio.wait_for(self._bumped.wait(), min(remaining, VERSION_POLL_S))
            except asyncio.TimeoutError:
                # No write came through here: look for one made outside the runtime.
                if not self._lock.locked():
                    async with self._lock:
                        self._set(await self._l1.snapshot(self.owner))

    async def catch_up(self, version: int | None = None, epoch: str = "") -> bool:
        """Reload the snapshot if the backend is ahead of it: a write was made behind
        this holder (announced by the change feed as ``version`` of ``epoch``;
        ``None``: anything may have changed). True if it reloaded.

        Cheap for this holder's own writes (already held, nothing read). Runs under
        the write lock, so a reload and a write never interleave, and ``_set`` never
        moves a version back within an epoch. If the reload fails the snapshot is
        dropped: the next read loads it (or reports that the backend is down) rather
        than answer from a copy known to be stale.
        """
        if not self.behind(version, epoch):
            return False
        async with self._lock:
            if not self.behind(version, epoch):
                return False
            try:
                self._set(await self._l1.snapshot(self.owner))
            except BaseException:
                self._snap = None
                raise
            return True

    def behind(self, version: int | None, epoch: str) -> bool:
        snap = self._snap
        if snap is None or self.closed:
            return False  # nothing held: the next read loads the current state
        return version is None or not snap.reached(version, epoch)

    # -- writes: one at a time, written through before the answer -----------------------

    async def apply(self, ops: Sequence[L1Op], op_id: str | None) -> MemorySnapshot:
        snap = await self._write(lambda: self._l1.apply(self.owner, ops, op_id=op_id))
        return snap.live(utcnow())

    async def decide(self, pending_id: str, action: AuditAction, by: str, edited: str | None,
                     op_id: str | None) -> tuple[MemorySnapshot, AuditEntry] | None:
        """A decision on a queued item with its audit entry (see ``storage.decisions``)."""
        return await self._with_entry(lambda: self._l1.decide(
            self.owner, pending_id, action, by, edited=edited, op_id=op_id))

    async def undo_decision(self, pending_id: str, by: str, restored: int,
                            expires_at: datetime | None, op_id: str | None
                            ) -> tuple[MemorySnapshot, AuditEntry] | None:
        """The undo of a confirmed proposal with its audit entry, the proposal queued
        again (see ``storage.decisions``); ``None`` if it was recorded before."""
        return await self._with_entry(lambda: self._l1.undo_decision(
            self.owner, pending_id, by, restored=restored, expires_at=expires_at,
            op_id=op_id))

    async def _with_entry(self, call: Callable[[], Awaitable[
            tuple[MemorySnapshot, AuditEntry] | None]]
            ) -> tuple[MemorySnapshot, AuditEntry] | None:
        """A write that records an audit entry (``call``), under the lock; ``None`` when
        it wrote nothing (the item was not queued, or the entry was recorded before)."""
        done: list[tuple[MemorySnapshot, AuditEntry]] = []

        async def write() -> MemorySnapshot:
            got = await call()
            if got is None:  # nothing written (this runs under the lock)
                return self._snap or await self._l1.snapshot(self.owner)
            done.append(got)
            return got[0]

        await self._write(write)
        return done[0] if done else None

    async def _write(self, write: Callable[[], Awaitable[MemorySnapshot]]) -> MemorySnapshot:
        async with self._lock:
            try:
                snap = await write()
            except (InvalidInput, NotFound):
                raise  # refused before anything was written
            except BaseException:
                self._snap = None  # the write may have landed: reload before the next read
                raise
            self._set(snap)
            return snap

    async def l2(self, op: Operation[Any, Any], values: Sequence[Any]) -> Any:
        """An L2 write (``op``, served by the ``"writer"``) with the values its call
        carried. Under the owner's lock, so a store's dedup check and its write, a
        batch's, an update and a supersession never interleave with another write.
        Its memories are embedded before the lock is taken (``L2Path.prepare``), so the
        owner's writes, L1 ones included, do not wait for each other's embeddings; the
        write finds them in the embedder's cache (a miss only embeds under the lock)."""
        memories = op.memories(values)
        if memories:
            await self._l2.prepare(self.owner, memories)
        async with self._lock:
            return await getattr(self._l2, op.name)(self.owner, **op.named(values))

    async def read(self, op: Operation[Any, Any], values: Sequence[Any]) -> Any:
        """An L2 read (``op``, served by the ``"index"``) for this owner's actor, as a
        handle would make it: no lock, the owner's writes go on meanwhile."""
        return await getattr(self._l2, op.name)(self.owner, **op.named(values))

    async def exclusive(self, call: Callable[[], Awaitable[Any]], *, replaces: bool = False
                        ) -> Any:
        """Run ``call`` while no write of the owner runs. ``replaces``: it writes around
        the snapshot (an import), which is then loaded again under a new lineage."""
        async with self._lock:
            try:
                return await call()
            finally:
                if replaces:
                    await self._reload_new_lineage()

    async def _reload_new_lineage(self) -> None:
        self._snap = None
        self.token = new_id()
        with contextlib.suppress(Exception):  # the next read loads it otherwise
            self._set(await self._l1.snapshot(self.owner))

    async def forget(self, by: str, op_id: str | None) -> Tombstone:
        """Erase the owner on both layers (L2 through the same path as its writes)."""
        async with self._lock:
            try:
                tombstone = await self._l1.forget(self.owner, by=by, op_id=op_id,
                                                  memories=self._l2.forget_memories)
            finally:
                # Whatever happened, the held snapshot may be of erased state; a copy a
                # reader caches is of the old lineage and must not be confirmed again.
                self._snap = None
                self.token = new_id()
            self._set(await self._l1.snapshot(self.owner))
            return tombstone


class OwnerTable:
    """The owners one shard host holds: made live on first use, passivated when idle or
    least recently used, never more than ``cap`` at once."""

    def __init__(self, make: Callable[[str], OwnerMemory], cap: int, idle_timeout_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._make = make
        self.live: LiveSet[OwnerMemory] = LiveSet(cap, idle_timeout_s, clock)
        self._freed = asyncio.Event()

    @asynccontextmanager
    async def use(self, owner: str) -> AsyncIterator[OwnerMemory]:
        """The owner's memory, counted as busy for the duration of the block."""
        mem = self.live.get(owner)
        if mem is None:
            mem = await self._admit(owner)
        # No await between finding ``mem`` and entering it: an eviction cannot slip in.
        mem.enter()
        self.live.touch(owner)
        try:
            yield mem
        finally:
            mem.leave()
            self.live.touch(owner)
            if mem.users == 0:
                self._freed.set()

    async def _admit(self, owner: str) -> OwnerMemory:
        while True:
            mem = self.live.get(owner)
            if mem is not None:
                return mem
            if not self.live.full or self._evict_one():
                mem = self._make(owner)
                self.live.add(owner, mem)
                return mem
            # Every live owner is busy: wait for one to finish rather than exceed the cap.
            self._freed.clear()
            await self._freed.wait()

    def _evict_one(self) -> bool:
        return any(self.evict(victim) for victim in self.live.lru())

    def evict(self, owner: str) -> bool:
        """Passivate ``owner`` unless it is busy; True if it went."""
        mem = self.live.get(owner)
        if mem is None or mem.users:
            return False
        mem.closed = True
        self.live.pop(owner)
        return True

    def sweep(self) -> int:
        """Passivate the owners idle for ``idle_timeout_s``; how many went."""
        return sum(self.evict(o) for o in self.live.idle())
