"""The change feed of the structured stores: each committed L1 write is announced to
every watcher on the same storage, a write that fails is not, and a watcher whose
connection is cut reports ``None`` and hears later writes again."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from dream_memory_actor.config import MemorySettings
from dream_memory_actor.errors import RuleNotFound
from dream_memory_actor.models import MemoryPendingItem
from dream_memory_actor.storage import open_stores
from dream_memory_actor.storage.base import StructuredStore
from dream_memory_actor.storage.changes import Change
from dream_memory_actor.storage.ops import AddFact, AddPending, RemoveRule
from tests.conftest import fresh_schema

WAIT_S = 1.0


def _settings(backend: str, request: pytest.FixtureRequest) -> MemorySettings:
    if backend == "postgres":
        return MemorySettings(backend="postgres", postgres_dsn=request.getfixturevalue("pg_dsn"),
                              postgres_schema=fresh_schema(), postgres_pool_max=2)
    from tests.support.redis_servers import drop_prefix

    url = request.getfixturevalue("redis_url")
    prefix = fresh_schema()
    request.addfinalizer(lambda: drop_prefix(url, prefix))
    return MemorySettings(backend="redis", redis_url=url, redis_prefix=prefix)


class Heard:
    """What a watcher was told, with a wait for the next matching announcement."""

    def __init__(self) -> None:
        self.items: list[Change | None] = []
        self._new = asyncio.Event()

    def __call__(self, change: Change | None) -> None:
        self.items.append(change)
        self._new.set()

    async def until(self, match: Any, timeout: float = WAIT_S) -> float:
        """Seconds until an announcement for which ``match`` is true arrived."""
        start = time.monotonic()
        while not any(match(c) for c in self.items):
            self._new.clear()
            left = timeout - (time.monotonic() - start)
            assert left > 0, f"not announced within {timeout}s; heard {self.items}"
            await asyncio.wait_for(self._new.wait(), left)
        return time.monotonic() - start


@pytest.fixture(params=["postgres", "redis"])
async def two(request: pytest.FixtureRequest
              ) -> AsyncIterator[tuple[StructuredStore, StructuredStore]]:
    """A watching store and a writing one (another object: another process, to them)."""
    settings = _settings(request.param, request)
    made = []
    for _ in range(2):
        structured, vector = await open_stores(settings, None)
        await structured.setup()
        made.append((structured, vector))
    try:
        yield made[0][0], made[1][0]
    finally:
        for structured, vector in made:
            await structured.close()
            await vector.close()


async def test_writes_of_another_store_are_announced(
        two: tuple[StructuredStore, StructuredStore]) -> None:
    watcher, writer = two
    assert watcher.supports_change_feed
    heard = Heard()
    unwatch = await watcher.watch(heard)
    snap = await writer.apply("alice", [AddFact("likes tea")])
    await heard.until(lambda c: c == Change("alice", snap.version, snap.epoch))
    item = MemoryPendingItem(kind="rule", content="answer briefly", confidence=0.9)
    queued = await writer.apply("bob", [AddPending(item)])
    await heard.until(lambda c: c is not None and c.owner == "bob"
                      and c.version == queued.version)
    decided = await writer.decide("bob", item.id, "confirmed", "ops")
    assert decided is not None
    await heard.until(lambda c: c is not None and c.owner == "bob"
                      and c.version == decided[0].version)
    # the watcher's own writes are announced too (holders drop them by version)
    own = await watcher.apply("alice", [AddFact("likes coffee")])
    await heard.until(lambda c: c is not None and c.version == own.version)
    await unwatch()
    await unwatch()  # safe twice


async def test_a_refused_or_repeated_write_is_not_announced(
        two: tuple[StructuredStore, StructuredStore]) -> None:
    watcher, writer = two
    heard = Heard()
    await watcher.watch(heard)
    first = await writer.apply("alice", [AddFact("likes tea")], op_id="op-1")
    await heard.until(lambda c: c is not None and c.version == first.version)
    with pytest.raises(RuleNotFound):
        await writer.apply("alice", [RemoveRule("no-such-rule")])
    again = await writer.apply("alice", [AddFact("likes tea")], op_id="op-1")
    assert again.version == first.version
    marker = await writer.apply("carol", [AddFact("a later write")])
    await heard.until(lambda c: c is not None and c.owner == "carol"
                      and c.version == marker.version)
    assert [c.owner for c in heard.items if c is not None] == ["alice", "carol"]


async def test_memory_store_has_no_feed() -> None:
    structured, _ = await open_stores(MemorySettings(backend="memory"), None)
    assert not structured.supports_change_feed
    heard = Heard()
    unwatch = await structured.watch(heard)
    await structured.apply("alice", [AddFact("likes tea")])
    await asyncio.sleep(0.05)
    assert heard.items == []
    await unwatch()


async def test_postgres_listener_killed_reconnects(pg_dsn: str) -> None:
    import asyncpg

    settings = MemorySettings(backend="postgres", postgres_dsn=pg_dsn,
                              postgres_schema=fresh_schema(), postgres_pool_max=2)
    structured, vector = await open_stores(settings, None)
    await structured.setup()
    try:
        heard = Heard()
        await structured.watch(heard)
        feed = structured.backend._feeds._running[0]  # type: ignore[attr-defined]
        old_pid = feed.pid
        admin = await asyncpg.connect(pg_dsn)
        try:
            assert await admin.fetchval("SELECT pg_terminate_backend($1)", old_pid)
        finally:
            await admin.close()
        await heard.until(lambda c: c is None, timeout=3.0)  # back, maybe missed some
        assert feed.pid not in (None, old_pid)
        snap = await structured.apply("alice", [AddFact("after the cut")])
        await heard.until(lambda c: c is not None and c.version == snap.version)
    finally:
        await structured.close()
        await vector.close()
