"""The change feed of the structured store: who learns of L1 writes made elsewhere.

Every L1 write (``apply``, a decision) announces ``Change(owner, version, epoch)``
when it commits, on a channel of its storage (a PostgreSQL schema, a Redis key
prefix). A process that holds snapshots (an owner actor) watches the channel
(``StructuredStore.watch``) and reloads an owner whose announced version is ahead
of the one it holds, so a write made behind it (the CLI, a second engine, the MCP
server in local mode) is read within moments rather than at the next write.

``None`` instead of a change means the feed lost its connection and is back:
announcements may have been missed, so everything held may be stale.

A change is one short text, ``"<version> <epoch> <owner>"``: owner ids and epochs
have no spaces (``validation.OWNER_ID_PATTERN``, ``models.new_epoch``), and the
owner comes last, so splitting twice is exact.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Change:
    """An L1 write of ``owner`` committed: its snapshot is now at ``version`` of ``epoch``."""

    owner: str
    version: int
    epoch: str = ""

    def encode(self) -> str:
        return f"{self.version} {self.epoch} {self.owner}"

    @classmethod
    def decode(cls, payload: bytes | str) -> Change | None:
        """The change in ``payload``, or ``None`` (logged) if it is not one."""
        text = payload.decode("utf-8", "replace") if isinstance(payload, bytes) else payload
        parts = text.split(" ", 2)
        if len(parts) != 3 or not parts[0].isdigit() or not parts[2]:
            log.warning("ignoring a change announcement that is not one: %r", text[:200])
            return None
        return cls(owner=parts[2], version=int(parts[0]), epoch=parts[1])


#: Called on the event loop of the watching process for each change, and with
#: ``None`` after the feed reconnected. It must not block: schedule work instead.
ChangeCallback = Callable[[Change | None], None]

#: Stops a watch; safe to call twice.
Unwatch = Callable[[], Awaitable[None]]


async def no_feed() -> None:
    """The closer of a watch that has nothing to stop."""


def notify(callback: ChangeCallback, change: Change | None) -> None:
    """Call ``callback``, logging (never raising) what it raises: the feed goes on."""
    try:
        callback(change)
    except Exception:
        log.exception("a change callback failed on %r", change)


#: The first pause before a feed connects again, doubled after each failure up to
#: MAX_RETRY_S; how long ``start`` waits for the first connection before going on
#: without it (the feed keeps trying, and reports ``None`` once connected).
RETRY_S = 0.05
MAX_RETRY_S = 2.0
START_TIMEOUT_S = 5.0


class BackgroundFeed(abc.ABC):
    """A feed run by one task (``_run``, which sets ``_ready`` once connected): what the
    PostgreSQL and Redis feeds share."""

    def __init__(self, callback: ChangeCallback) -> None:
        self._callback = callback
        self._ready = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        #: How many times the feed connected (1 + reconnections).
        self.connects = 0

    def _connected(self) -> None:
        """Count a connection; after the first, report ``None``: changes made while the
        feed was down were missed."""
        self.connects += 1
        reconnected = self._ready.is_set()
        self._ready.set()
        if reconnected:
            notify(self._callback, None)

    def _report(self, payload: str | bytes) -> None:
        """Report the change an announcement carries (none for a foreign payload)."""
        change = Change.decode(payload)
        if change is not None:
            notify(self._callback, change)

    async def start(self) -> None:
        """Start listening; waits up to ``START_TIMEOUT_S`` for the first connection."""
        self._task = asyncio.get_running_loop().create_task(self._run())
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._ready.wait()), START_TIMEOUT_S)
        self._ready.set()  # from now on every connection is announced as a reconnection

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    @abc.abstractmethod
    async def _run(self) -> None:
        """Connect, report changes, reconnect when lost; runs until cancelled."""


class Feed(Protocol):
    async def start(self) -> None: ...

    async def close(self) -> None: ...


class Feeds:
    """The running watches of one store: each stopped by its closer, all by ``close``."""

    def __init__(self) -> None:
        self._running: list[Feed] = []

    async def add(self, feed: Feed) -> Unwatch:
        """Start ``feed``; return its closer."""
        self._running.append(feed)
        await feed.start()

        async def unwatch() -> None:
            if feed in self._running:
                self._running.remove(feed)
            await feed.close()

        return unwatch

    async def close(self) -> None:
        running, self._running = self._running, []
        for feed in running:
            await feed.close()
