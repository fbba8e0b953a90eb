"""Connections to PostgreSQL: one asyncpg pool per backend, driver errors translated.

Each pooled connection registers pgvector's binary codec and sets the HNSW
search parameters: ``hnsw.iterative_scan = relaxed_order`` (pgvector 0.8) keeps
scanning the index until enough rows pass the owner filter, so a filtered
vector query keeps using the index instead of returning too few rows.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from contextvars import ContextVar
from typing import Any

from ...errors import BackendError, BackendUnavailable, SchemaError, SystemClosed
from ...errors import missing_dependency as _missing
from ..changes import ChangeCallback, Feeds, Unwatch
from .hnsw import HnswIndex

try:
    import asyncpg
except ImportError as exc:  # pragma: no cover - exercised via the extras message
    raise _missing("asyncpg", "postgres") from exc

#: What a statement raises that :func:`translate` turns into the project's errors.
DRIVER_ERRORS = (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, asyncio.TimeoutError)


def translate(exc: BaseException) -> BaseException:
    """The project's error for a driver error (returned, to be raised ``from exc``)."""
    if isinstance(exc, asyncpg.UndefinedTableError | asyncpg.InvalidSchemaNameError):
        return SchemaError(f"the database schema is not set up (run setup()): {exc}")
    if isinstance(exc, asyncio.TimeoutError):
        return BackendUnavailable(f"PostgreSQL did not answer in time: {exc!r}")
    if isinstance(exc, (asyncpg.CannotConnectNowError, asyncpg.TooManyConnectionsError,
                        asyncpg.ConnectionDoesNotExistError, asyncpg.InterfaceError,
                        asyncpg.PostgresConnectionError, OSError)):
        return BackendUnavailable(f"PostgreSQL is not reachable: {exc}")
    return BackendError(f"PostgreSQL error: {exc}")


class PostgresStore:
    """What both PostgreSQL stores share: one backend (pool), set up once, closed once,
    and the advisory locks their writes take."""

    def __init__(self, backend: PostgresBackend) -> None:
        self.backend = backend
        self.max_content_bytes: int = backend.max_content_bytes
        self._s = backend.schema
        backend.acquire_user()
        self._closed = False

    async def setup(self) -> None:
        await self.backend.setup()

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            await self.backend.release_user()

    async def _lock(self, conn: Any, layer: str, owner: str) -> None:
        """Hold the advisory lock of ``layer`` and ``owner`` (an owner, or an owner's
        conversation) until the transaction ends: the writes that take it take turns
        (an owner's L2 writes: judgement, counts), and nothing else is held."""
        await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
                           f"{self._s}:{layer}:{owner}")


class PostgresBackend:
    """One pool shared by the structured and the vector store of one configuration."""

    def __init__(self, dsn: str, schema: str, dim: int | None, *, min_size: int = 1,
                 max_size: int = 8, ef_search: int = 100, max_content_bytes: int = 32 * 1024,
                 cache_rows: int = 10_000) -> None:
        self.dsn = dsn
        self.schema = schema
        self.dim = dim
        self.min_size = min_size
        self.max_size = max_size
        self.ef_search = ef_search
        self.max_content_bytes = max_content_bytes
        #: The memories of searched owners the vector store keeps in the process.
        self.cache_rows = cache_rows
        #: The connection of the :meth:`unit` the current task is in, if any.
        self._unit: ContextVar[Any] = ContextVar(f"dream_memory_unit_{id(self)}", default=None)
        self._pool: Any = None
        self._pool_lock = asyncio.Lock()
        self._closed = False
        self._users = 0
        self._setup_done = False
        self._feeds = Feeds()  # listening connections, closed with the pool
        #: The vectors' HNSW index: whether it is built, and its build.
        self.hnsw = HnswIndex(dsn, schema, dim, translate)

    async def _init_connection(self, conn: Any) -> None:
        from pgvector.asyncpg import register_vector

        await register_vector(conn)

    @staticmethod
    async def _keep_session(conn: Any) -> None:
        """What a connection's release runs after asyncpg's own rollback of an open
        transaction: nothing. The default reset query (RESET ALL, CLOSE ALL,
        UNLISTEN *, pg_advisory_unlock_all) is one more round trip per query, about
        a millisecond here, and undoes nothing this library does: its settings are
        startup parameters, its locks and cursors end with their transaction, and it
        never listens."""

    def _server_settings(self) -> dict[str, str]:
        # Sent in the startup packet, not with SET: they hold for the session whatever
        # a release does (asyncpg's default reset runs RESET ALL, which undid a SET).
        # plan_cache_mode: asyncpg prepares each statement text once per connection, and
        # the server still planned a search's statement again at every execution (a plan
        # for the parameters' values looked cheaper to it than the generic one): about
        # 0.6 ms of planning in a LoCoMo search statement of 2.1 ms. The statement's text
        # already fixes the paths a search takes (``statements``, from
        # ``plan.search_plan``), and the generic plans are the same plans. Measured in
        # alternating runs, vectors given: LoCoMo searches through the engine, p50
        # 3.3-3.8 -> 2.6-2.9 ms (3 pairs); python -m benchmarks search-latency, one owner
        # of 1k, p50 2.5-3.0 -> 2.1-2.4 ms (5 pairs), of 10k the same, of 100k (HNSW,
        # trigram, recent window) 8.2-8.8 -> 6.7-8.1 ms (3 pairs).
        return {"hnsw.iterative_scan": "relaxed_order", "hnsw.ef_search": str(int(self.ef_search)),
                "plan_cache_mode": "force_generic_plan"}

    async def pool(self) -> Any:
        if self._closed:
            raise SystemClosed("this PostgreSQL backend was closed")
        if self._pool is None:
            async with self._pool_lock:
                if self._pool is None:
                    try:
                        self._pool = await asyncpg.create_pool(
                            self.dsn, min_size=self.min_size, max_size=self.max_size,
                            init=self._init_connection, reset=self._keep_session,
                            command_timeout=60, server_settings=self._server_settings())
                    except Exception as exc:
                        raise translate(exc) from exc
        return self._pool

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[Any]:
        """A pooled connection; driver errors leave as the project's errors. Inside a
        :meth:`unit` of this task, the unit's connection."""
        held = self._unit.get()
        try:
            if held is not None:
                yield held
            else:
                async with (await self.pool()).acquire() as conn:
                    yield conn
        except DRIVER_ERRORS as exc:
            raise translate(exc) from exc

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Any]:
        """A transaction; inside a :meth:`unit`, a savepoint of the unit's."""
        async with self.connection() as conn, conn.transaction():
            yield conn

    @asynccontextmanager
    async def unit(self) -> AsyncIterator[Any]:
        """One transaction that every statement of this task joins until it ends (each
        ``transaction`` inside it a savepoint): what is written inside is committed
        together, or not at all when the block raises or the process dies. A unit is
        one task's: nothing inside it may run statements concurrently."""
        async with self.transaction() as conn:
            token = self._unit.set(conn)
            try:
                yield conn
            finally:
                self._unit.reset(token)

    @asynccontextmanager
    async def plain_connection(self) -> AsyncIterator[Any]:
        """A connection of its own, without the pool's vector codec: for what is read
        before ``setup`` may have created the extension (the recorded embedding model).
        Inside a :meth:`unit`, the unit's (set up, and it sees the unit's writes)."""
        if self._unit.get() is not None:
            async with self.connection() as conn:
                yield conn
            return
        try:
            conn = await asyncpg.connect(self.dsn)
        except Exception as exc:
            raise translate(exc) from exc
        try:
            yield conn
        except DRIVER_ERRORS as exc:
            raise translate(exc) from exc
        finally:
            await conn.close()

    async def setup(self) -> None:
        """Apply migrations once per backend object (both stores share it)."""
        if self._setup_done:
            return
        from .migrations import migrate

        try:
            conn = await asyncpg.connect(self.dsn)
        except Exception as exc:
            raise translate(exc) from exc
        try:
            await migrate(conn, self.schema)
            await self.hnsw.check(conn)
        except asyncpg.PostgresError as exc:
            raise translate(exc) from exc
        finally:
            await conn.close()
        self._setup_done = True

    @property
    def channel(self) -> str:
        """The channel L1 writes announce themselves on (``feed``)."""
        from .feed import channel_name

        return channel_name(self.schema)

    async def watch(self, callback: ChangeCallback) -> Unwatch:
        """Listen for the L1 writes on this schema (see ``feed``); the closer stops it."""
        from .feed import PostgresChangeFeed

        if self._closed:
            raise SystemClosed("this PostgreSQL backend was closed")
        return await self._feeds.add(PostgresChangeFeed(self.dsn, self.schema, callback))

    def acquire_user(self) -> None:
        self._users += 1

    async def release_user(self) -> None:
        """Close the pool when the last store using it closes. Safe to call twice per user."""
        self._users = max(0, self._users - 1)
        if self._users == 0 and not self._closed:
            self._closed = True
            await self.hnsw.close()
            await self._feeds.close()
            if self._pool is not None:
                await self._pool.close()
