"""The actors that hold owners: one per owner (``dedicated``) or one per shard (``sharded``).

Both expose the same methods (:class:`~.holder.OwnerHolder`), each taking the owner
id first (the snapshot read finds it in its task's name), so a handle calls them the
same way whatever the placement.

They are asyncio objects; Ray runs them as threaded actors (``threaded.py``):
``read`` on Ray's call threads, every coroutine method on the actor's one event loop.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import ray

from .errors import OwnerMoved
from .holder import OwnerHolder
from .owner import OwnerMemory, OwnerTable
from .placement import NAMESPACE, registry_name
from .spec import SystemSpec
from .vector_index import process_info


def sweep_interval(idle_timeout_s: float) -> float:
    """How often idle owners are looked for: a quarter of the timeout, within 50 ms..30 s."""
    return min(max(idle_timeout_s / 4, 0.05), 30.0)


class OwnerActor(OwnerHolder):
    """``dedicated``: the single live instance of one owner, ``_owner.<system>.<owner>``."""

    def __init__(self, spec: SystemSpec, owner: str) -> None:
        super().__init__(spec)
        self._owner = owner
        self._registry: Any = None  # found by name on first use (see IndexL2)
        self._mem: OwnerMemory | None = None
        self._closed = False
        self._touched = 0.0
        # The registry keeps the LRU order from these reports; a few per second at most.
        self._touch_every = min(1.0, spec.settings.idle_timeout_s / 4)

    @asynccontextmanager
    async def _use(self, owner: str) -> AsyncIterator[OwnerMemory]:
        if owner != self._owner or self._closed:
            raise OwnerMoved(f"owner {owner!r} is not held by this actor")
        engine = await self._open()
        if self._mem is None:
            self._mem = OwnerMemory(owner, engine, self._l2)
        mem = self._mem
        mem.enter()
        self._used(owner)
        try:
            yield mem
        finally:
            mem.leave()

    def _used(self, owner: str) -> None:
        now = time.monotonic()
        if now - self._touched >= self._touch_every:
            self._touched = now
            try:
                if self._registry is None:
                    self._registry = ray.get_actor(registry_name(self._spec.name),
                                                   namespace=NAMESPACE)
                self._registry.touch.remote(self._owner)  # fire and forget
            except ValueError:  # the registry is gone: the system is shutting down
                pass

    async def drain(self, grace_s: float) -> bool:
        """Before passivation: refuse new calls, let the ones in flight finish (bounded)."""
        self._closed = True
        return True if self._mem is None else await self._mem.drain(grace_s)

    async def info(self) -> dict[str, Any]:
        info = process_info()
        info.update(owner=self._owner, live=0 if self._mem is None else 1,
                    version=None if self._mem is None else self._mem.version,
                    reloads=self._follower.reloads)
        return info

    def _held(self, owner: str) -> OwnerMemory | None:
        return self._mem if owner == self._owner and not self._closed else None

    def _all_held(self) -> list[OwnerMemory]:
        return [] if self._mem is None or self._closed else [self._mem]


class HostActor(OwnerHolder):
    """``sharded``: many owners' snapshots in one process, ``_shard.<system>.<i>``.

    Each owner has its own lock (in its :class:`OwnerMemory`), so owners of one
    shard never wait for each other. The host's share of ``max_live_owners`` is
    ``max_live_owners // shards`` (at least 1), so the system stays within the cap
    whenever ``max_live_owners >= shards``.
    """

    def __init__(self, spec: SystemSpec, shard: int) -> None:
        super().__init__(spec)
        s = spec.settings
        self._shard = shard
        self._table = OwnerTable(self._make, max(1, s.max_live_owners // s.shards),
                                 s.idle_timeout_s)
        self._sweeper: asyncio.Task[None] | None = None
        self._closed = False

    def _make(self, owner: str) -> OwnerMemory:
        assert self._engine is not None
        return OwnerMemory(owner, self._engine, self._l2)

    @asynccontextmanager
    async def _use(self, owner: str) -> AsyncIterator[OwnerMemory]:
        if self._closed:
            raise OwnerMoved(f"shard {self._shard} is shutting down")
        await self._open()
        if self._sweeper is None:
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep())
        async with self._table.use(owner) as mem:
            yield mem

    def _used(self, owner: str) -> None:
        self._table.live.touch(owner)

    async def _sweep(self) -> None:
        every = sweep_interval(self._spec.settings.idle_timeout_s)
        while True:
            await asyncio.sleep(every)
            self._table.sweep()

    async def passivate(self, owners: Sequence[str]) -> int:
        """Passivate these owners now if they are not busy; how many went (tests, admin)."""
        return sum(self._table.evict(o) for o in owners)

    async def drain(self, grace_s: float) -> bool:
        self._closed = True
        waits = [mem.drain(grace_s) for _, mem in self._table.live.items()]
        return all(await asyncio.gather(*waits)) if waits else True

    async def info(self) -> dict[str, Any]:
        live = self._table.live
        info = process_info()
        info.update(shard=self._shard, live=len(live), high_water=live.high_water,
                    passivated=live.evicted, cap=live.cap, reloads=self._follower.reloads)
        return info

    def _held(self, owner: str) -> OwnerMemory | None:
        return None if self._closed else self._table.live.get(owner)

    def _all_held(self) -> list[OwnerMemory]:
        return [] if self._closed else [mem for _, mem in self._table.live.items()]

    async def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
        await super().close()
