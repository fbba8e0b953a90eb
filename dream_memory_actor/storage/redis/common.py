"""What both Redis stores share: the client, key names, error translation, locks.

Every key of an owner carries the hash tag ``{owner}`` (``<prefix>:{<owner>}:...``),
so one owner's keys live in one cluster slot and a MULTI/EXEC or a Lua script
may touch all of them. Owner ids cannot contain braces (see
``validation.OWNER_ID_PATTERN``), so the tag is always the owner id itself.

Lua scripts are redis-py ``Script`` objects (``client.register_script``): run by
SHA and loaded again when the server forgot them; in a pipeline, ``execute``
loads the missing ones first.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import TYPE_CHECKING, Any

from ...errors import BackendError, BackendUnavailable, ConfigurationError, missing_dependency

if TYPE_CHECKING:
    from ...config import MemorySettings

#: Optimistic transactions (WATCH/MULTI/EXEC) retried this often before giving up.
MAX_TX_ATTEMPTS = 200

#: How long an operation id (``op_id``) is remembered: a retry within this time is
#: applied once. Retries come after timeouts and actor restarts, minutes later.
OP_ID_RETENTION_S = 7 * 24 * 3600


def import_redis() -> Any:
    """The ``redis`` package, or ``MissingDependency`` naming the extra to install."""
    try:
        import redis
        import redis.asyncio
        import redis.exceptions
    except ImportError as exc:  # pragma: no cover - the dev install has redis
        raise missing_dependency("redis", "redis") from exc
    return redis


def connect(settings: MemorySettings) -> Any:
    """A client for ``settings.redis_url`` (connects lazily).

    A ``redis.asyncio.Redis`` for one server, or a ``cluster.ClusterClient`` on a
    Redis Cluster (``redis_cluster = True`` or a ``redis+cluster://`` URL): every
    call of an owner then goes to the master of the owner's slot.

    Commands are retried twice, briefly, on a dropped connection (all our writes
    are idempotent: they set absolute values); a server that stays down is a
    ``BackendUnavailable`` within about a second, not after long back-offs.
    With ``redis_wait_replicas`` each write transaction waits for that many
    replicas (see ``replication``).
    """
    import_redis()
    from redis.asyncio.retry import Retry
    from redis.backoff import ExponentialBackoff

    from .replication import waiting_client_class

    if settings.redis_url is None:
        raise ConfigurationError("backend 'redis' needs redis_url (e.g. redis://localhost:6379/0)")
    url = settings.redis_url.get_secret_value()
    client_class = waiting_client_class()

    def make(node_url: str) -> Any:
        try:
            client = client_class.from_url(
                node_url,
                decode_responses=False,
                socket_connect_timeout=5.0,
                socket_timeout=30.0,
                retry=Retry(ExponentialBackoff(cap=0.5, base=0.05), 2),
                health_check_interval=30,
            )
        except ValueError as exc:
            raise ConfigurationError(f"redis_url is not a valid Redis URL: {exc}") from exc
        client.wait_replicas = settings.redis_wait_replicas
        client.wait_timeout_ms = settings.redis_wait_timeout_ms
        return client

    if settings.redis_cluster or url.split("://", 1)[0].endswith("+cluster"):
        from .cluster import ClusterClient

        return ClusterClient(url, make)
    return make(url)


@contextmanager
def translate(what: str) -> Iterator[None]:
    """Turn redis-py's exceptions into ``BackendUnavailable`` / ``BackendError``."""
    from redis import exceptions as rx

    try:
        yield
    except (rx.ConnectionError, rx.TimeoutError) as exc:
        raise BackendUnavailable(f"Redis is unavailable during {what}: {exc}") from exc
    except rx.RedisError as exc:
        raise BackendError(f"Redis failed during {what}: {exc}") from exc
    except OSError as exc:
        raise BackendUnavailable(f"Redis is unavailable during {what}: {exc}") from exc


def lost_connection(exc: BaseException) -> bool:
    """True for redis-py's ``WatchError`` that stands for a dropped connection."""
    from redis import exceptions as rx

    context = exc.__cause__ or exc.__context__
    return (isinstance(context, (rx.ConnectionError, rx.TimeoutError))
            or "occurred while watching" in str(exc))


#: What a lost EXEC leaves unknown, for a write with an operation id.
UNSURE_WRITE = ("the write may or may not have been applied (retry with the same op_id "
                "to apply it exactly once)")


async def committed(pipe: Any, *, unsure: str = UNSURE_WRITE) -> list[Any] | None:
    """EXEC a transaction queued on ``pipe``: its replies once applied, ``None`` when a
    watched key changed first (the caller runs it again). A connection lost during EXEC
    is ``BackendUnavailable`` saying ``unsure``: the write may or may not be applied."""
    from redis.exceptions import WatchError

    try:
        return list(await pipe.execute())
    except WatchError as exc:
        if lost_connection(exc):
            raise BackendUnavailable(
                f"the connection to Redis was lost while committing; {unsure}") from exc
        return None


class Keys:
    """Key names of one prefix. ``tag(owner)`` is the hash-tagged owner part."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def owner(self, owner: str) -> str:
        """``<prefix>:{<owner>}:`` - the start of every key of ``owner``."""
        return f"{self.prefix}:{{{owner}}}:"

    # L1
    def l1_doc(self, owner: str) -> str:
        return self.owner(owner) + "l1"

    def l1_status_keys(self, owner: str) -> str:
        return self.owner(owner) + "l1:sk"

    def l1_pending_ids(self, owner: str) -> str:
        return self.owner(owner) + "l1:pq"

    def l1_status(self, owner: str, key: str) -> str:
        return self.owner(owner) + "l1:st:" + key

    def l1_pending(self, owner: str, item_id: str) -> str:
        return self.owner(owner) + "l1:pd:" + item_id

    def l1_op(self, owner: str, op_id: str) -> str:
        return self.owner(owner) + "l1:op:" + op_id

    def l1_audit_ids(self, owner: str) -> str:
        return self.owner(owner) + "l1:au"

    def l1_audit_prefix(self, owner: str) -> str:
        return self.owner(owner) + "l1:ad:"

    def l1_audit(self, owner: str, pending_id: str) -> str:
        return self.l1_audit_prefix(owner) + pending_id

    # L3
    def l3_window(self, owner: str, conversation: str) -> str:
        return self.owner(owner) + "l3:w:" + conversation

    # L2
    def l2_version(self, owner: str) -> str:
        return self.owner(owner) + "l2:ver"

    def l2_ids(self, owner: str) -> str:
        return self.owner(owner) + "l2:ids"

    def l2_df(self, owner: str) -> str:
        return self.owner(owner) + "l2:df"

    def l2_terms(self, owner: str) -> str:
        return self.owner(owner) + "l2:terms"

    def l2_op(self, owner: str, op_id: str) -> str:
        return self.owner(owner) + "l2:op:" + op_id

    def l2_doc_prefix(self, owner: str) -> str:
        return self.owner(owner) + "m:"

    def l2_doc(self, owner: str, memory_id: str) -> str:
        return self.l2_doc_prefix(owner) + memory_id

    def embedding_model(self) -> str:
        """The model the prefix's memory vectors were made with (JSON)."""
        return f"{self.prefix}:embedding-model"

    def index(self, dim: int | None) -> str:
        return f"{self.prefix}:idx:v1:{dim or 0}"


class OwnerLocks:
    """An ``asyncio.Lock`` per owner, dropped when nobody holds or waits for it.

    In-process writers of one owner queue here instead of failing each other's
    WATCH; writers in other processes are still caught by WATCH.
    """

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, list[int]]] = {}

    @asynccontextmanager
    async def hold(self, owner: str) -> AsyncIterator[None]:
        entry = self._locks.get(owner)
        if entry is None:
            entry = self._locks[owner] = (asyncio.Lock(), [0])
        lock, users = entry
        users[0] += 1
        try:
            async with lock:
                yield
        finally:
            users[0] -= 1
            if users[0] == 0:
                self._locks.pop(owner, None)


def text(value: bytes | str | None) -> str | None:
    """A reply decoded as UTF-8 (``None`` stays ``None``)."""
    if value is None or isinstance(value, str):
        return value
    return value.decode("utf-8")


async def close_client(client: Any) -> None:
    """Close a client and its pool; safe to repeat, never raises for a dead server."""
    from contextlib import suppress

    with suppress(Exception):
        await client.aclose()
