"""The change feed on PostgreSQL: ``LISTEN`` on a dedicated connection.

Every L1 write runs ``pg_notify(channel, change)`` in its transaction, so the
announcement is delivered when, and only if, the write commits. There is one
channel per schema (``channel_name``), the change names the owner: a process
opens one listening connection whatever the number of owners it holds, and
needs no ``LISTEN``/``UNLISTEN`` as owners come and go. The price is that a
listener hears the writes of every owner of the schema and drops those of
owners it does not hold; an announcement is a few dozen bytes, which PostgreSQL
delivers to all listeners of a channel at once.

The connection is not pooled (a pooled one would be reset and shared). When it
drops (a restart, ``pg_terminate_backend``, a network fault), the feed connects
again with a growing pause (``RETRY_S`` doubling up to ``MAX_RETRY_S``) and then
reports ``None``: announcements may have been missed in between.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from ..changes import (
    MAX_RETRY_S,
    RETRY_S,
    START_TIMEOUT_S,
    BackgroundFeed,
    ChangeCallback,
)

log = logging.getLogger(__name__)

#: How often the listening connection is checked for having closed, and how often a
#: query proves it still answers (a connection cut without a FIN never closes itself).
CHECK_S = 0.5
PROBE_S = 5.0


def channel_name(schema: str) -> str:
    """The channel of ``schema``'s L1 writes (schemas are plain identifiers of <= 48
    characters, so this is one of <= 54, within PostgreSQL's 63)."""
    return f"dm_l1_{schema}"


def application_name(schema: str) -> str:
    """The ``application_name`` of the listening connection (``pg_stat_activity``)."""
    return f"dream-memory feed {schema}"


class PostgresChangeFeed(BackgroundFeed):
    """One listening connection that reports each announcement on ``channel``."""

    def __init__(self, dsn: str, schema: str, callback: ChangeCallback) -> None:
        self._dsn = dsn
        self._schema = schema
        self._channel = channel_name(schema)
        super().__init__(callback)
        self._conn: Any = None
        #: The server process id of the listening connection (``None`` while down).
        self.pid: int | None = None

    def _on_notify(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        self._report(payload)

    async def _run(self) -> None:
        import asyncpg

        pause = RETRY_S
        while True:
            conn = None
            try:
                conn = await asyncpg.connect(
                    self._dsn, timeout=START_TIMEOUT_S,
                    server_settings={"application_name": application_name(self._schema)})
                lost = asyncio.Event()
                conn.add_termination_listener(lambda _c, ev=lost: ev.set())
                await conn.add_listener(self._channel, self._on_notify)
                self.pid = conn.get_server_pid()
                pause = RETRY_S
                self._connected()
                await self._watch(conn, lost)
                log.warning("the change feed of schema %r lost its connection; reconnecting",
                            self._schema)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # down or refused: try again after a pause
                log.warning("the change feed of schema %r cannot listen: %s", self._schema, exc)
                self._ready.set()
            finally:
                self.pid = None
                if conn is not None:
                    conn.terminate()
            await asyncio.sleep(pause)
            pause = min(pause * 2, MAX_RETRY_S)

    @staticmethod
    async def _watch(conn: Any, lost: asyncio.Event) -> None:
        """Return when ``conn`` is lost: closed, or not answering a probe in time."""
        loop = asyncio.get_running_loop()
        probe_at = loop.time() + PROBE_S
        while not conn.is_closed():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(lost.wait(), CHECK_S)
                return
            if loop.time() >= probe_at:
                await conn.execute("SELECT 1", timeout=PROBE_S)
                probe_at = loop.time() + PROBE_S
