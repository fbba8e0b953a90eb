"""Redis Cluster specifics: owners spread over masters, URL forms, WAIT, and a failover.

The contract suite (tests/contract) runs on a cluster too (backend ``redis-cluster``);
these tests cover what only a cluster has.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import Any

import pytest

from dream_memory_actor.config import MemorySettings
from dream_memory_actor.errors import BackendUnavailable, ConfigurationError
from dream_memory_actor.storage import open_stores
from dream_memory_actor.storage.dedup import Cuts
from dream_memory_actor.storage.redis.cluster import ClusterClient, split_cluster_url
from dream_memory_actor.storage.redis.common import connect
from dream_memory_actor.storage.redis.replication import ReplicationTimeout
from tests.conftest import DIM, fresh_schema
from tests.support.redis_cluster import RedisCluster, drop_cluster_prefix, redis_cluster


def masters_by_port(url: str) -> dict[int, list[tuple[int, int]]]:
    """master port -> its slot ranges, from the cluster at ``url``."""
    import redis

    from tests.support.redis_cluster import _raw_slots

    host, _, port = url.split("://", 1)[1].split(",")[0].rpartition(":")
    c: Any = redis.Redis(host=host, port=int(port))
    try:
        out: dict[int, list[tuple[int, int]]] = {}
        for start, end, (_, p) in _raw_slots(c):
            out.setdefault(int(p), []).append((int(start), int(end)))
        return out
    finally:
        c.close()


def owner_on_each_master(url: str, stem: str) -> dict[int, str]:
    from redis.crc import key_slot

    masters = masters_by_port(url)
    found: dict[int, str] = {}
    for i in range(10_000):
        owner = f"{stem}{i}"
        slot = key_slot(owner.encode())
        port = next(p for p, ranges in masters.items() if any(a <= slot <= b
                                                              for a, b in ranges))
        found.setdefault(port, owner)
        if len(found) == len(masters):
            return found
    raise AssertionError("no owner found for some master")


def vec(i: int) -> list[float]:
    v = [0.0] * DIM
    v[i % DIM] = 1.0
    v[(i + 1) % DIM] = 0.3
    return v


async def test_owners_on_three_masters_are_searched_together(redis_cluster_url: str) -> None:
    import redis

    prefix = fresh_schema()
    owners = owner_on_each_master(redis_cluster_url, "team")
    assert len(owners) == 3
    settings = MemorySettings(backend="redis", redis_url=redis_cluster_url, redis_prefix=prefix)
    structured, vector = await open_stores(settings, DIM)
    try:
        await vector.setup()
        for i, owner in enumerate(owners.values()):
            await vector.store(owner, f"deploy runbook number {i} for {owner}",
                               embedding=vec(i))
            await structured.add_fact(owner, f"{owner} runs the on-call rota")
        hits = await vector.search(list(owners.values()), "deploy runbook",
                                   embedding=vec(0), limit=10)
        assert {h.memory.owner for h in hits} == set(owners.values())
        # each owner's keys, all of them, on the master of its slot and nowhere else
        for port, owner in owners.items():
            for other in masters_by_port(redis_cluster_url):
                c: Any = redis.Redis(port=other)
                try:
                    keys = list(c.scan_iter(match=f"{prefix}:{{{owner}}}:*"))
                finally:
                    c.close()
                assert bool(keys) == (other == port), (owner, other, keys)
    finally:
        await structured.close()
        await vector.close()
        drop_cluster_prefix(redis_cluster_url, prefix)


def test_cluster_url_forms() -> None:
    node_url, startup = split_cluster_url("redis+cluster://:pw@h1:7000,h2:7001")
    assert startup == [("h1", 7000), ("h2", 7001)]
    assert node_url("10.0.0.5", 7002) == "redis://:pw@10.0.0.5:7002/0"
    _, startup = split_cluster_url("rediss://cache")
    assert startup == [("cache", 6379)]
    with pytest.raises(ConfigurationError, match="database 0"):
        split_cluster_url("redis+cluster://h1:7000/2")
    with pytest.raises(ConfigurationError, match="host:port"):
        split_cluster_url("redis+cluster://h1:x")
    with pytest.raises(ConfigurationError, match="redis://"):
        split_cluster_url("http+cluster://h1:7000")
    for settings in (MemorySettings(backend="redis", redis_url="redis+cluster://h:1"),
                     MemorySettings(backend="redis", redis_url="redis://h:1",
                                    redis_cluster=True)):
        assert isinstance(connect(settings), ClusterClient)
    assert not isinstance(connect(MemorySettings(backend="redis", redis_url="redis://h:1")),
                          ClusterClient)


async def test_wait_without_enough_replicas_is_a_typed_error(redis_url: str) -> None:
    """A server without replicas never acknowledges: the write is applied, the call says so."""
    prefix = fresh_schema()
    settings = MemorySettings(backend="redis", redis_url=redis_url, redis_prefix=prefix,
                              redis_wait_replicas=1, redis_wait_timeout_ms=50)
    structured, vector = await open_stores(settings, None)
    try:
        with pytest.raises(ReplicationTimeout, match="0 of 1 replicas"):
            await structured.add_fact("alice", "prefers tea")
        with pytest.raises(ReplicationTimeout):
            await vector.store("alice", "moved to Lisbon", op_id="op-1")
        snap = await structured.load("alice")
        assert [f.content for f in snap.facts] == ["prefers tea"]  # applied on the master
        # the retry finds its operation id: applied once, answered without waiting
        again = await vector.store("alice", "moved to Lisbon", op_id="op-1")
        assert await vector.count("alice") == 1 and not again.merged
    finally:
        await structured.close()
        await vector.close()
        from tests.support.redis_servers import drop_prefix

        drop_prefix(redis_url, prefix)


async def _until(cond: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await asyncio.to_thread(cond):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


async def test_failover_keeps_every_write_acknowledged_by_a_replica() -> None:
    """Kill a master mid-load: its replica is promoted, and

    * every write acknowledged with ``redis_wait_replicas=1`` is there;
    * a write that timed out waiting (``ReplicationTimeout``), or was acknowledged
      without waiting, is there at most once, and a retry with its ``op_id`` after
      the failover makes it there exactly once;
    * owners on the other masters are served throughout.
    """
    with redis_cluster() as cluster:
        await _failover_scenario(cluster)


#: Numbered entries are entries of their own, not new values of one another: stored
#: unjudged, so the scenario counts writes, not judgements.
UNJUDGED = Cuts.off()


async def _failover_scenario(cluster: RedisCluster) -> None:
    prefix = fresh_schema()
    owners = owner_on_each_master(cluster.url, "acct")
    victim = next(n for n in cluster.nodes if n.port == next(iter(owners)))
    target = owners[victim.port]
    others = [o for p, o in owners.items() if p != victim.port]
    replica = cluster.replica_of(victim)

    def settings(wait: int) -> MemorySettings:
        return MemorySettings(backend="redis", redis_url=cluster.url, redis_prefix=prefix,
                              redis_wait_replicas=wait, redis_wait_timeout_ms=300)

    _, waiting = await open_stores(settings(1), None)
    _, fast = await open_stores(settings(0), None)
    acked: list[tuple[str, str]] = []  # acknowledged by a replica
    loose: dict[str, tuple[str, str]] = {}  # op_id -> (owner, content): not acknowledged
    other_failures: list[BaseException] = []
    stop = asyncio.Event()

    async def load(owner: str) -> None:
        i = 0
        while not stop.is_set():
            content = f"{owner} background entry {i}"
            try:
                await waiting.store(owner, content, op_id=f"bg-{owner}-{i}", threshold=UNJUDGED)
                acked.append((owner, content))
            except BackendUnavailable as exc:
                other_failures.append(exc)
            i += 1
            await asyncio.sleep(0.01)

    try:
        background = [asyncio.create_task(load(o)) for o in others]
        for i in range(10):
            await waiting.store(target, f"{target} acknowledged entry {i}", threshold=UNJUDGED)
            acked.append((target, f"{target} acknowledged entry {i}"))

        assert replica.proc is not None
        os.kill(replica.proc.pid, signal.SIGSTOP)  # the replica stops reading the stream
        try:
            for i in range(3):
                content, op = f"{target} unreplicated entry {i}", f"un-{i}"
                with pytest.raises(ReplicationTimeout):
                    await waiting.store(target, content, op_id=op, threshold=UNJUDGED)
                loose[op] = (target, content)
            for i in range(3):
                content, op = f"{target} unwaited entry {i}", f"nw-{i}"
                await fast.store(target, content, op_id=op, threshold=UNJUDGED)
                loose[op] = (target, content)
            victim.stop()  # SIGKILL, mid-load
        finally:
            os.kill(replica.proc.pid, signal.SIGCONT)

        await _until(lambda: cluster.role(replica) == "master", 30, "the replica's promotion")
        t0 = time.monotonic()
        while True:  # the owner of the lost master is served again, by the promoted one
            try:
                await fast.store(target, f"{target} after failover", threshold=UNJUDGED)
                break
            except BackendUnavailable:
                assert time.monotonic() - t0 < 30, "the promoted master never served"
                await asyncio.sleep(0.2)
        for op, (owner, content) in loose.items():  # retries: applied at most once
            await fast.store(owner, content, op_id=op, threshold=UNJUDGED)
        await asyncio.sleep(0.3)
        stop.set()
        await asyncio.gather(*background)
    finally:
        stop.set()
        await waiting.close()
        await fast.close()

    assert not other_failures, other_failures[:3]
    _, reader = await open_stores(settings(0), None)  # a fresh process's view
    try:
        stored: dict[str, list[str]] = {}
        for owner in owners.values():
            stored[owner] = []
            while page := await reader.list(owner, limit=1000, offset=len(stored[owner])):
                stored[owner] += [m.content for m in page]
    finally:
        await reader.close()
    for owner, content in acked:
        assert content in stored[owner], f"acknowledged write lost: {content}"
    for owner, content in loose.values():
        assert stored[owner].count(content) == 1, content
    assert len(stored[target]) == len(set(stored[target]))
    assert sum(1 for o, _ in acked if o in others) > 10  # the load ran during the failover


async def test_redis_stack_cluster_indexes_one_shard_so_search_runs_in_the_client() -> None:
    """Why the search module is not used on a cluster, shown on Redis Stack itself:
    FT.CREATE is routed by the index name's slot, and the index sees only the keys
    of that one master. The stores work there, with vector search in the client."""
    import redis
    from redis.cluster import RedisCluster as SyncCluster

    from tests.support.redis_servers import stack_server

    with redis_cluster(stack_server()) as cluster:
        rc: Any = SyncCluster(host="127.0.0.1", port=cluster.nodes[0].port)
        try:
            rc.execute_command("FT.CREATE", "probe", "ON", "HASH", "PREFIX", "1", "probe:",
                               "SCHEMA", "t", "TEXT")
            for i in range(30):
                rc.hset(f"probe:{{o{i}}}", mapping={"t": "hello"})
            found = rc.execute_command("FT.SEARCH", "probe", "hello", "NOCONTENT", "LIMIT",
                                       "0", "0")
        finally:
            rc.close()
        total = found[b"total_results"] if isinstance(found, dict) else found[0]
        assert 0 < int(total) < 30  # one shard's share of the 30 hashes
        home = cluster.master_of("probe")
        c: Any = redis.Redis(port=home.port)
        try:
            assert int(total) == len(list(c.scan_iter(match="probe:*")))
        finally:
            c.close()

        prefix = fresh_schema()
        settings = MemorySettings(backend="redis", redis_url=cluster.url, redis_prefix=prefix)
        _, vector = await open_stores(settings, DIM)
        try:
            await vector.setup()
            assert vector.search_module is False
            owners = owner_on_each_master(cluster.url, "s")
            for i, owner in enumerate(owners.values()):
                await vector.store(owner, f"note {i}", embedding=vec(i))
            hits = await vector.search(list(owners.values()), "note", embedding=vec(1))
            assert {h.memory.owner for h in hits} == set(owners.values())
        finally:
            await vector.close()


def _move_slot(url: str, slot: int, to_port: int) -> None:
    """Migrate ``slot`` with its keys to the master on ``to_port`` (as resharding does)."""
    import redis

    masters = masters_by_port(url)
    src_port = next(p for p, ranges in masters.items()
                    if any(a <= slot <= b for a, b in ranges))
    src: Any = redis.Redis(port=src_port)
    dst: Any = redis.Redis(port=to_port)
    try:
        src_id, dst_id = (c.execute_command("CLUSTER MYID").decode() for c in (src, dst))
        dst.execute_command("CLUSTER SETSLOT", slot, "IMPORTING", src_id)
        src.execute_command("CLUSTER SETSLOT", slot, "MIGRATING", dst_id)
        while keys := src.execute_command("CLUSTER GETKEYSINSLOT", slot, 100):
            src.execute_command("MIGRATE", "127.0.0.1", to_port, "", 0, 5000, "KEYS", *keys)
        for port in masters:
            c: Any = redis.Redis(port=port)
            try:
                c.execute_command("CLUSTER SETSLOT", slot, "NODE", dst_id)
            finally:
                c.close()
    finally:
        src.close()
        dst.close()


async def test_an_owner_moved_to_another_master_is_followed(redis_cluster_url: str) -> None:
    """Resharding moves an owner's slot: the next calls get MOVED, read the slot map
    again and go on on the new master, reads, writes and transactions alike."""
    from redis.crc import key_slot

    prefix = fresh_schema()
    owners = owner_on_each_master(redis_cluster_url, "mover")
    (home, owner), (target, _) = list(owners.items())[:2]
    settings = MemorySettings(backend="redis", redis_url=redis_cluster_url, redis_prefix=prefix)
    structured, vector = await open_stores(settings, DIM)
    try:
        await vector.setup()
        first = await vector.store(owner, "the runbook lives in the wiki", embedding=vec(1))
        await structured.add_fact(owner, "on call this week")
        before = await vector._r.addr_for(owner)  # type: ignore[attr-defined]
        _move_slot(redis_cluster_url, key_slot(owner.encode()), target)  # the stores' map is stale
        assert before == f"127.0.0.1:{home}"
        assert (await vector.get(owner, first.memory.id)).content == first.memory.content
        await structured.add_fact(owner, "moved to the other master")  # WATCH/MULTI/EXEC
        await vector.store(owner, "a second note after the move", embedding=vec(3))
        hits = await vector.search([owner, *[o for o in owners.values() if o != owner]],
                                   "runbook", embedding=vec(1))
        assert first.memory.id in {h.memory.id for h in hits}
        snap = await structured.load(owner)
        assert [f.content for f in snap.facts] == ["on call this week",
                                                   "moved to the other master"]
        for store in (structured, vector):  # each client followed the move
            assert await store._r.addr_for(owner) == f"127.0.0.1:{target}"  # type: ignore[attr-defined]
        import redis

        c: Any = redis.Redis(port=target)
        try:
            assert len(list(c.scan_iter(match=f"{prefix}:{{{owner}}}:*"))) >= 4
        finally:
            c.close()
        assert home != target
    finally:
        await structured.close()
        await vector.close()
        drop_cluster_prefix(redis_cluster_url, prefix)
