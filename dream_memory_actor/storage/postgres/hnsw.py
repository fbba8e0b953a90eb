"""The HNSW index of the ``memories`` table, built the first time a read would take it.

A search scans an owner's vectors exactly while that costs less than the filtered
HNSW search (``plan.prefer_exact``: every owner of a table of small owners), so until
one owner is large enough the index serves no read, and every insert pays its upkeep:
``python -m benchmarks locomo-ingest`` (seven conversations, one ``store_many`` a
session) stored 575-591 turns/s with the index made at setup and 686-695 with this
build, in three alternating pairs. So the index is not made with the schema: the first
search or near read whose plan prefers it starts its build in the background
(``CREATE INDEX CONCURRENTLY``, writes go on), and reads scan exactly until it is
valid. A schema made by a version that built it at setup keeps it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from .migrations import dim_sql, hnsw_index_name

log = logging.getLogger(__name__)


def index_sql(schema: str, dim: int, *, concurrently: bool = True) -> str:
    """The statement that builds the index of ``dim`` (an int from settings)."""
    how = "CONCURRENTLY " if concurrently else ""
    return (f"CREATE INDEX {how}IF NOT EXISTS {hnsw_index_name(dim)} ON {schema}.memories "
            f"USING hnsw (({dim_sql(dim)}) vector_cosine_ops) WHERE embedding_dim = {int(dim)}")


class HnswIndex:
    """Whether the index of one schema and dimension is there, and its build.

    ``ready`` is read with the schema's setup and set when a build ends. A build runs
    on a connection of its own (no statement timeout: it takes minutes on a large
    table), under a session advisory lock: of several processes that want the index,
    one builds it and the others scan exactly until they find it built. A process that
    closes (a CLI command ends) leaves its build to the server: it drops the connection
    without a cancel, and the server, which sends the build no message meanwhile,
    finishes it.
    """

    #: Seconds before a process tries again after a build failed or another held it.
    RETRY_S = 60.0

    def __init__(self, dsn: str, schema: str, dim: int | None,
                 translate: Callable[[BaseException], BaseException]) -> None:
        self.dsn = dsn
        self.schema = schema
        self.dim = dim
        self._translate = translate  #: the backend's error for a driver error
        self.ready = False
        self._task: asyncio.Task[bool] | None = None
        self._conn: Any = None  #: the running build's connection
        self._closing = False
        self._retry_at = 0.0

    async def check(self, conn: Any) -> bool:
        """Read whether the index is there and valid (``ready``)."""
        self.ready = bool(await self._validity(conn))
        return self.ready

    async def _validity(self, conn: Any) -> bool | None:
        """Whether the index is valid; ``None`` when there is none."""
        if self.dim is None:
            return None
        valid = await conn.fetchval(
            """SELECT i.indisvalid FROM pg_index i
                 JOIN pg_class c ON c.oid = i.indexrelid
                 JOIN pg_namespace n ON n.oid = c.relnamespace
                WHERE n.nspname = $1 AND c.relname = $2""",
            self.schema, hnsw_index_name(self.dim))
        return None if valid is None else bool(valid)

    def wanted(self) -> bool:
        """A read's plan prefers the index: whether it may take it. ``True`` once it is
        built; otherwise its build starts in the background (one at a time in this
        process, and again :data:`RETRY_S` after one that did not end with the index)
        and the read scans exactly."""
        if self.ready or self.dim is None:
            return self.ready
        if (self._task is None or self._task.done()) and time.monotonic() >= self._retry_at:
            self._task = asyncio.get_running_loop().create_task(self._build_or_retry())
        return False

    async def _build_or_retry(self) -> bool:
        try:
            built = await self._build()
        except Exception:  # logged; reads go on scanning exactly, and try again later
            if not self._closing:
                log.warning("building the HNSW index of %s failed", self.schema,
                            exc_info=True)
            built = False
        if not built:
            self._retry_at = time.monotonic() + self.RETRY_S
        return built

    async def build(self) -> bool:
        """Build the index now unless it is there (or wait for this process's build),
        and say whether it is; ``False`` while another process builds it. Driver errors
        leave as the backend's (``BackendUnavailable``, ``BackendError``)."""
        if self._task is not None and not self._task.done():
            return await asyncio.shield(self._task)
        try:
            return await self._build()
        except Exception as exc:
            raise self._translate(exc) from exc

    async def _build(self) -> bool:
        """Under the build's lock: drop the invalid index an interrupted build left, and
        build it concurrently with writes (``ready`` when it ends)."""
        if self.dim is None:
            return False
        import asyncpg  # the backend's extra, imported by the pool first

        name = f"{self.schema}.{hnsw_index_name(self.dim)}"
        # No notice reaches the client: a server writing to a client that is gone ends
        # the build (``close``).
        conn = self._conn = await asyncpg.connect(
            self.dsn, server_settings={"client_min_messages": "error"})
        try:  # the session's advisory lock ends with the connection
            if not await conn.fetchval("SELECT pg_try_advisory_lock(hashtextextended($1, 0))",
                                       f"dream_memory:hnsw:{name}"):
                return await self.check(conn)
            if await self._validity(conn) is False:  # left by an interrupted build
                await conn.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
            await conn.execute(index_sql(self.schema, self.dim))
            return await self.check(conn)
        finally:
            self._conn = None
            if not conn.is_closed():
                await conn.close()

    async def close(self) -> None:
        """Leave a running build to the server: its connection is dropped without a
        cancel (cancelling would throw away minutes of work), and the index ends valid
        while this process goes on closing."""
        self._closing = True
        task, self._task = self._task, None
        if task is not None and not task.done():
            if self._conn is not None:
                self._conn.terminate()
            else:  # still connecting: nothing begun in the server
                task.cancel()
            await asyncio.wait([task])
