"""Owner holders keep up with writes made behind them (the CLI, a second engine, the
MCP server in local mode): each holder process watches its structured store's
change feed (``storage.changes``) once, when its engine opens, and reloads a live
owner whose announced version is ahead of the one it holds.

Announcements of owners not live here, and of this process's own writes (already
held), are dropped without a read. After the feed reconnected (announcements may
have been missed) every live owner is reloaded. A reload runs under the owner's
write lock (``OwnerMemory.catch_up``) and never takes a use of the owner: the
owner's idle time, hence its passivation, is not affected by writes it only hears.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

from ..storage.base import StructuredStore
from ..storage.changes import Change, Unwatch
from .owner import OwnerMemory

log = logging.getLogger(__name__)


class Follower:
    """Turns a store's announcements into reloads of the owners ``held`` / ``all_held``."""

    def __init__(self, held: Callable[[str], OwnerMemory | None],
                 all_held: Callable[[], Iterable[OwnerMemory]]) -> None:
        self._held = held
        self._all_held = all_held
        self._tasks: set[asyncio.Task[None]] = set()
        self._unwatch: Unwatch | None = None
        #: Reloads made because of an announcement (tests and ``info``).
        self.reloads = 0

    async def start(self, store: StructuredStore) -> None:
        if store.supports_change_feed and self._unwatch is None:
            self._unwatch = await store.watch(self.changed)

    async def close(self) -> None:
        unwatch, self._unwatch = self._unwatch, None
        if unwatch is not None:
            await unwatch()
        for task in list(self._tasks):
            task.cancel()

    def changed(self, change: Change | None) -> None:
        """The feed's callback (on the event loop): schedule the reloads it calls for."""
        if change is None:
            for live in list(self._all_held()):
                self._reload(live, None, "")
            return
        mem = self._held(change.owner)
        if mem is not None:
            self._reload(mem, change.version, change.epoch)

    def _reload(self, mem: OwnerMemory, version: int | None, epoch: str) -> None:
        if not mem.behind(version, epoch):
            return  # this holder's own write, or one it already reloaded past
        task = asyncio.get_running_loop().create_task(self._catch_up(mem, version, epoch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _catch_up(self, mem: OwnerMemory, version: int | None, epoch: str) -> None:
        try:
            if await mem.catch_up(version, epoch):
                self.reloads += 1
        except Exception as exc:  # the snapshot was dropped: the next read loads it
            log.warning("owner %r: reloading after a write made elsewhere failed: %s",
                        mem.owner, exc)
