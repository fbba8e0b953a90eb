"""A Redis that restarts empty under a running memory system: acknowledged writes are read.

The owner's versions count again from 1 on the empty server; its snapshots carry a
new epoch, so neither the owner actor's snapshot nor a reader's cached copy (at an
equal version number) is taken for the new state.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import redis

from dream_memory_actor.config import MemorySettings
from dream_memory_actor.runtime import MemorySystem
from tests.conftest import fresh_schema
from tests.runtime.embedders import TopicEmbedder
from tests.support.redis_servers import RedisServer, plain_server, stack_server, started


@pytest.fixture(params=[("redis", "dedicated"), ("redis-stack", "sharded")],
                ids=lambda p: f"{p[0]}-{p[1]}")
def system_on_redis(request: pytest.FixtureRequest, ray_runtime: None
                    ) -> Iterator[tuple[MemorySystem, RedisServer]]:
    flavour, placement = request.param
    server = plain_server() if flavour == "redis" else stack_server()
    with started(server):
        settings = MemorySettings(backend="redis", redis_url=server.url,
                                  redis_prefix=fresh_schema(), placement=placement, shards=2,
                                  max_live_owners=4, idle_timeout_s=600.0)
        system = MemorySystem.start(settings, name=f"reset-{uuid.uuid4().hex[:8]}",
                                    embedder_factory=TopicEmbedder, call_timeout_s=60.0)
        try:
            yield system, server
        finally:
            system.shutdown(grace_period_s=1)


def facts(snap: object) -> list[str]:
    return [f.content for f in snap.facts]  # type: ignore[attr-defined]


def test_writes_after_redis_restarts_empty_are_read(
        system_on_redis: tuple[MemorySystem, RedisServer]) -> None:
    system, server = system_on_redis
    alice = system.owner("alice")
    for i in range(5):
        alice.add_fact(f"fact {i} of the old store")
    before = alice.snapshot()  # held by this process's connection cache
    assert before.version == 5 and len(facts(before)) == 5 and before.epoch

    server.stop()
    server.start()  # the same port, empty (no persistence)
    assert redis.Redis.from_url(server.url).dbsize() == 0

    acked = [alice.add_fact(f"fact {i} of the new store") for i in range(3)]
    assert len({a.id for a in acked}) == 3
    third = alice.snapshot()  # the actor held version 5 of the old state
    assert facts(third) == [f"fact {i} of the new store" for i in range(3)]
    assert third.version == 3 and third.epoch != before.epoch

    for i in range(3, 5):
        alice.add_fact(f"fact {i} of the new store")
    # version 5 again, as the cached copy: the epoch tells them apart
    for reader in (alice, system.owner("alice")):
        snap = reader.snapshot()
        assert snap.version == 5 and snap.epoch != before.epoch
        assert facts(snap) == [f"fact {i} of the new store" for i in range(5)]
    # a min_version of the old epoch is reached by the new state at once
    after = alice.snapshot(min_version=before.version, min_epoch=before.epoch, timeout_s=5)
    assert facts(after) == [f"fact {i} of the new store" for i in range(5)]
    current = alice.snapshot(min_version=5, min_epoch=after.epoch, timeout_s=5)
    assert current.version == 5 and current.epoch == after.epoch
