"""Writes made behind the owner actors are read through the handles within a second.

A handle reads first (so the owner's actor holds its snapshot), then the write is
made without the system: by a second ``MemoryEngine`` on the same storage, by the
CLI in this process, by the MCP server's local backend. The handle's next reads
must show it within ``LAG_S`` (the actor hears the store's change feed). Also:
the CLI through a named system, and an actor whose listening connection is cut.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import asyncpg
import pytest
import redis

from dream_memory_actor import cli
from dream_memory_actor.config import MemorySettings
from dream_memory_actor.engine import MemoryEngine, operations
from dream_memory_actor.models import MemoryPendingItem, MemorySnapshot
from dream_memory_actor.runtime import MemorySystem, OwnerHandle
from dream_memory_actor.storage import open_stores
from dream_memory_actor.storage.ops import AddFact, AddPending
from dream_memory_actor.storage.postgres.feed import application_name
from tests.conftest import fresh_schema
from tests.runtime.embedders import TopicEmbedder
from tests.support.redis_servers import RedisServer, plain_server, started

#: The promise: a read never lags an acknowledged write by more than this.
LAG_S = 1.0


def _owner() -> str:
    return f"behind-{uuid.uuid4().hex[:8]}"


def behind(settings: MemorySettings, write: Callable[[MemoryEngine], Awaitable[Any]]) -> Any:
    """Run ``write`` on an engine of its own (L1 only), as another process would."""
    async def go() -> Any:
        structured, vector = await open_stores(settings, None)
        engine = MemoryEngine(settings, structured, vector, None)
        try:
            return await write(engine)
        finally:
            await engine.close()

    return asyncio.run(go())


def read_until(handle: OwnerHandle, seen: Callable[[MemorySnapshot], bool],
               within: float = LAG_S) -> tuple[MemorySnapshot, float]:
    """Read until ``seen``; the snapshot and how long it took (asserted within ``within``)."""
    start = time.monotonic()
    while True:
        snap = handle.snapshot()
        took = time.monotonic() - start
        if seen(snap):
            return snap, took
        assert took < within, f"not read within {within}s: version {snap.version}"
        time.sleep(0.01)


def facts(snap: MemorySnapshot) -> list[str]:
    return [f.content for f in snap.facts]


def queue(settings: MemorySettings, owner: str, content: str) -> MemoryPendingItem:
    item = MemoryPendingItem(kind="fact", content=content, confidence=0.7)
    behind(settings, lambda e: e.apply(owner, [AddPending(item)]))
    return item


def _check_doors(system: MemorySystem, settings: MemorySettings,
                 monkeypatch: pytest.MonkeyPatch) -> None:
    """apply, decide (confirm, reject), the CLI and the MCP local backend, behind ``system``."""
    owner = _owner()
    handle = system.owner(owner)
    assert handle.snapshot().version == 0  # the actor holds the owner now

    behind(settings, lambda e: e.apply(owner, [AddFact("written behind")]))
    snap, took = read_until(handle, lambda s: "written behind" in facts(s))
    assert took < LAG_S

    item = queue(settings, owner, "queued behind")
    read_until(handle, lambda s: item.id in {p.id for p in s.pending})
    behind(settings, lambda e: e.decide(owner, item.id, "rejected", "ops"))
    after, _ = read_until(handle, lambda s: not s.pending)
    assert after.version > snap.version

    # the CLI, in this process, on the same storage (no system named)
    _cli_env(monkeypatch, settings)
    item = queue(settings, owner, "confirmed by the cli")
    read_until(handle, lambda s: bool(s.pending))
    assert cli.main(["pending", "confirm", "--owner", owner, "--id", item.id]) == 0
    _, took = read_until(handle, lambda s: "confirmed by the cli" in facts(s) and not s.pending)
    assert took < LAG_S

    # the MCP server's local backend
    from dream_memory_actor.engine.doors import LocalBackend

    item = queue(settings, owner, "confirmed over mcp")
    read_until(handle, lambda s: bool(s.pending))

    async def mcp_confirm() -> None:
        backend = await LocalBackend.open(settings)
        try:
            await backend.call(operations.confirm, owner, item.id, "mcp-user", None)
        finally:
            await backend.close()

    asyncio.run(mcp_confirm())
    read_until(handle, lambda s: "confirmed over mcp" in facts(s))


def _cli_env(monkeypatch: pytest.MonkeyPatch, settings: MemorySettings) -> None:
    import os

    for key in [k for k in os.environ if k.startswith("DREAM_MEMORY_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("DREAM_MEMORY_BACKEND", settings.backend)
    if settings.backend == "postgres":
        assert settings.postgres_dsn is not None
        monkeypatch.setenv("DREAM_MEMORY_POSTGRES_DSN", settings.postgres_dsn.get_secret_value())
        monkeypatch.setenv("DREAM_MEMORY_POSTGRES_SCHEMA", settings.postgres_schema)
    else:
        assert settings.redis_url is not None
        monkeypatch.setenv("DREAM_MEMORY_REDIS_URL", settings.redis_url.get_secret_value())
        monkeypatch.setenv("DREAM_MEMORY_REDIS_PREFIX", settings.redis_prefix)


def test_writes_behind_are_read_postgres(system: MemorySystem,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    _check_doors(system, system.settings, monkeypatch)


@pytest.fixture(scope="module")
def redis_server(ray_runtime: None) -> Iterator[RedisServer]:
    """A server of this module's own: the last test restarts it."""
    with started(plain_server()) as server:
        yield server


@pytest.fixture(scope="module")
def redis_system(redis_server: RedisServer) -> Iterator[MemorySystem]:
    settings = MemorySettings(backend="redis", redis_url=redis_server.url,
                              redis_prefix=fresh_schema(), placement="dedicated",
                              max_live_owners=4, idle_timeout_s=600.0)
    system = MemorySystem.start(settings, name=f"behind-{uuid.uuid4().hex[:8]}",
                                embedder_factory=TopicEmbedder, call_timeout_s=60.0)
    try:
        yield system
    finally:
        system.shutdown(grace_period_s=1)


def test_writes_behind_are_read_redis(redis_system: MemorySystem,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    _check_doors(redis_system, redis_system.settings, monkeypatch)


def test_redis_subscriber_killed_still_hears(redis_system: MemorySystem) -> None:
    settings = redis_system.settings
    owner = _owner()
    handle = redis_system.owner(owner)
    handle.snapshot()
    assert settings.redis_url is not None
    admin = redis.Redis.from_url(settings.redis_url.get_secret_value())
    assert admin.client_kill_filter(_type="pubsub") >= 1
    behind(settings, lambda e: e.apply(owner, [AddFact("after the cut")]))
    read_until(handle, lambda s: "after the cut" in facts(s), within=3.0)  # gap reload
    time.sleep(0.5)
    behind(settings, lambda e: e.apply(owner, [AddFact("later")]))
    read_until(handle, lambda s: "later" in facts(s))


def test_cli_through_a_named_system(system: MemorySystem,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    owner = _owner()
    handle = system.owner(owner)
    item = MemoryPendingItem(kind="rule", content="answer in French", confidence=0.7)
    handle.apply([AddPending(item)])

    def no_engine(*_a: object, **_k: object) -> None:
        raise AssertionError("the CLI opened the storage instead of using the system")

    monkeypatch.setattr(MemoryEngine, "open", no_engine)
    monkeypatch.setenv("DREAM_MEMORY_SYSTEM", system.name)
    assert cli.main(["pending", "confirm", "--owner", owner, "--id", item.id]) == 0
    snap = handle.snapshot()  # the actor wrote it: read at once
    assert [r.content for r in snap.rules] == ["answer in French"] and not snap.pending
    monkeypatch.delenv("DREAM_MEMORY_SYSTEM")
    assert cli.main(["snapshot", "--owner", owner, "--system", system.name]) == 0
    assert cli.main(["pending", "list", "--owner", owner, "--system", "no-such-system"]) == 1


def _listeners(dsn: str, schema: str) -> list[int]:
    async def go() -> list[int]:
        conn = await asyncpg.connect(dsn)
        try:
            rows = await conn.fetch("SELECT pid FROM pg_stat_activity WHERE application_name "
                                    "= $1", application_name(schema))
            return [r["pid"] for r in rows]
        finally:
            await conn.close()

    return asyncio.run(go())


def _terminate(dsn: str, pids: list[int]) -> None:
    async def go() -> None:
        conn = await asyncpg.connect(dsn)
        try:
            for pid in pids:
                await conn.execute("SELECT pg_terminate_backend($1)", pid)
        finally:
            await conn.close()

    asyncio.run(go())


def test_listener_killed_the_actor_still_learns(system: MemorySystem, pg_dsn: str) -> None:
    settings = system.settings
    owner = _owner()
    handle = system.owner(owner)
    handle.snapshot()
    old = _listeners(pg_dsn, settings.postgres_schema)
    assert old, "no listening connection for the system's schema"
    _terminate(pg_dsn, old)
    # written at once, maybe while the listener is down: the reload after reconnecting
    behind(settings, lambda e: e.apply(owner, [AddFact("during the cut")]))
    read_until(handle, lambda s: "during the cut" in facts(s), within=3.0)
    deadline = time.monotonic() + 5.0
    while not (now := _listeners(pg_dsn, settings.postgres_schema)) or set(now) & set(old):
        assert time.monotonic() < deadline, f"listeners did not come back: {now} (were {old})"
        time.sleep(0.05)
    behind(settings, lambda e: e.apply(owner, [AddFact("after the cut")]))
    _, took = read_until(handle, lambda s: "after the cut" in facts(s))
    assert took < LAG_S


def test_read_only_owner_after_redis_restarts_empty(redis_system: MemorySystem,
                                                    redis_server: RedisServer) -> None:
    """Only read, never written through the actor: reloaded when its subscription is back.

    (Last in this module: it empties the module's server.)"""
    owner = _owner()
    handle = redis_system.owner(owner)
    handle.add_fact("lost with the server")
    before = handle.snapshot()
    assert facts(before) == ["lost with the server"]
    redis_server.stop()
    redis_server.start()  # the same port, empty
    snap, _ = read_until(handle, lambda s: s.version == 0, within=10.0)
    assert facts(snap) == [] and snap.epoch != before.epoch
