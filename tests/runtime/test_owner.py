"""One owner's live memory and the shard table, without Ray (in-memory engine)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from dream_memory_actor.config import MemorySettings
from dream_memory_actor.engine import MemoryEngine, operations
from dream_memory_actor.errors import RuleNotFound
from dream_memory_actor.models import MemorySnapshot
from dream_memory_actor.runtime.errors import OwnerMoved, RuntimeTimeout
from dream_memory_actor.runtime.owner import OwnerMemory, OwnerTable
from dream_memory_actor.storage.ops import AddFact, RemoveRule, SetStatus


@pytest.fixture
async def engine() -> AsyncIterator[MemoryEngine]:
    e = await MemoryEngine.open(MemorySettings(backend="memory"))
    try:
        yield e
    finally:
        await e.close()


async def test_concurrent_writes_are_serialized(engine: MemoryEngine) -> None:
    mem = OwnerMemory("alice", engine, engine)
    snaps = await asyncio.gather(*(mem.apply([AddFact(f"fact {i}")], None) for i in range(50)))
    assert sorted(s.version for s in snaps) == list(range(1, 51))
    final = await mem.snapshot()
    assert final.version == 50 and len(final.facts) == 50
    assert (await engine.snapshot("alice")).version == 50  # written through


async def test_snapshot_is_served_from_memory(engine: MemoryEngine) -> None:
    mem = OwnerMemory("alice", engine, engine)
    await mem.apply([SetStatus("k", "v")], None)
    calls = 0
    real = engine.snapshot

    async def counting(owner: str) -> MemorySnapshot:
        nonlocal calls
        calls += 1
        return await real(owner)

    engine.snapshot = counting  # type: ignore[method-assign]
    for _ in range(10):
        assert dict((await mem.snapshot()).status) == {"k": "v"}
    assert calls == 0


async def test_same_op_id_is_applied_once(engine: MemoryEngine) -> None:
    mem = OwnerMemory("alice", engine, engine)
    first = await mem.apply([AddFact("once")], "op-1")
    again = await mem.apply([AddFact("once, really")], "op-1")
    assert again.version == first.version == 1
    r1 = await mem.l2(operations.store, ("went live", None, None, "op-2"))
    r2 = await mem.l2(operations.store, ("went live", None, None, "op-2"))
    assert r1.memory.id == r2.memory.id and not r2.merged
    assert len(await engine.list("alice")) == 1


async def test_failed_write_changes_nothing(engine: MemoryEngine) -> None:
    mem = OwnerMemory("alice", engine, engine)
    await mem.apply([AddFact("kept")], None)
    with pytest.raises(RuleNotFound):
        await mem.apply([AddFact("not kept"), RemoveRule("nope")], None)
    snap = await mem.snapshot()
    assert snap.version == 1 and [f.content for f in snap.facts] == ["kept"]


async def test_min_version_waits_for_the_write(engine: MemoryEngine) -> None:
    mem = OwnerMemory("alice", engine, engine)
    waiter = asyncio.ensure_future(mem.snapshot(min_version=2, timeout_s=5))
    await asyncio.sleep(0.05)
    assert not waiter.done()
    await mem.apply([AddFact("one")], None)
    await mem.apply([AddFact("two")], None)
    assert (await waiter).version == 2


async def test_min_version_sees_writes_made_elsewhere(engine: MemoryEngine) -> None:
    mem = OwnerMemory("alice", engine, engine)
    await mem.snapshot()
    await engine.apply("alice", [AddFact("written by a batch job")])
    assert (await mem.snapshot(min_version=1, timeout_s=5)).version == 1


async def test_min_version_times_out(engine: MemoryEngine) -> None:
    mem = OwnerMemory("alice", engine, engine)
    with pytest.raises(RuntimeTimeout):
        await mem.snapshot(min_version=3, timeout_s=0.3)


async def test_a_new_epoch_replaces_the_held_snapshot(engine: MemoryEngine) -> None:
    """The backend lost the owner's state (as Redis restarting empty): versions restart."""
    mem = OwnerMemory("alice", engine, engine)
    for i in range(3):
        old = await mem.apply([AddFact(f"old {i}")], None)
    engine.structured._snapshots.clear()  # type: ignore[attr-defined]
    new = await mem.apply([AddFact("new")], None)
    assert new.version == 1 and new.epoch > old.epoch
    held = await mem.snapshot()
    assert [f.content for f in held.facts] == ["new"]
    # version 3 of the old epoch: reached by the new state at once; of the new one: waited for
    assert (await mem.snapshot(min_version=3, min_epoch=old.epoch, timeout_s=1)) == held
    assert mem.peek(3, old.epoch) is not None and mem.peek(3, new.epoch) is None
    with pytest.raises(RuntimeTimeout):
        await mem.snapshot(min_version=3, min_epoch=new.epoch, timeout_s=0.3)


async def test_a_decision_on_nothing_queued_writes_nothing(engine: MemoryEngine) -> None:
    mem = OwnerMemory("alice", engine, engine)
    assert await asyncio.wait_for(mem.decide("never-queued", "rejected", "bob", None, None),
                                  5) is None
    assert (await mem.snapshot()).version == 0


async def test_drain_waits_for_calls_in_flight(engine: MemoryEngine) -> None:
    mem = OwnerMemory("alice", engine, engine)
    mem.enter()
    drained = asyncio.ensure_future(mem.drain(5))
    await asyncio.sleep(0.05)
    assert not drained.done()
    with pytest.raises(OwnerMoved):
        mem.enter()
    mem.leave()
    assert await drained


async def test_table_never_exceeds_its_cap(engine: MemoryEngine) -> None:
    table = OwnerTable(lambda o: OwnerMemory(o, engine, engine), cap=3, idle_timeout_s=60)

    async def write(owner: str) -> None:
        async with table.use(owner) as mem:
            await mem.apply([AddFact(f"fact of {owner}")], None)
            assert len(table.live) <= 3

    await asyncio.gather(*(write(f"u{i}") for i in range(12)))
    assert table.live.high_water == 3 and table.live.evicted >= 9
    async with table.use("u0") as mem:  # passivated, comes back from the backend
        assert [f.content for f in (await mem.snapshot()).facts] == ["fact of u0"]


async def test_table_does_not_evict_busy_owners(engine: MemoryEngine) -> None:
    table = OwnerTable(lambda o: OwnerMemory(o, engine, engine), cap=1, idle_timeout_s=60)
    release = asyncio.Event()

    async def hold() -> None:
        async with table.use("busy"):
            await release.wait()

    holder = asyncio.ensure_future(hold())
    await asyncio.sleep(0.01)
    other = asyncio.ensure_future(_touch(table, "other"))
    await asyncio.sleep(0.05)
    assert not other.done() and "busy" in table.live
    release.set()
    await asyncio.gather(holder, other)
    assert "other" in table.live and "busy" not in table.live


async def _touch(table: OwnerTable, owner: str) -> None:
    async with table.use(owner) as mem:
        await mem.snapshot()


async def test_table_sweeps_idle_owners(engine: MemoryEngine) -> None:
    now = [0.0]
    table = OwnerTable(lambda o: OwnerMemory(o, engine, engine), cap=10, idle_timeout_s=5,
                       clock=lambda: now[0])
    await _touch(table, "a")
    now[0] = 3.0
    await _touch(table, "b")
    now[0] = 6.0
    assert table.sweep() == 1 and "a" not in table.live and "b" in table.live


class HeldEmbedder:
    """An embedder that embeds only when let go (a model busy for as long as it likes)."""

    model = "held-test"
    dim = 4

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.calls = 0
        self.texts: list[str] = []

    async def embed(self, texts: list[str]) -> list[list[float]]:
        self.calls += 1
        self.texts += texts
        self.entered.set()
        await self.release.wait()
        return [[1.0, float(len(t)), 0.5, 0.25] for t in texts]


async def test_an_owner_s_writes_do_not_wait_for_an_embedding() -> None:
    """A store embeds before it takes the owner's lock: an L1 write sent while the model
    works is applied (it would wait for ever behind the lock before), and the store
    then embeds its text once and writes it."""
    from dream_memory_actor.embedding.base import CachedEmbedder
    from dream_memory_actor.storage import open_stores

    settings = MemorySettings(backend="memory")
    held = HeldEmbedder()
    structured, vector = await open_stores(settings, held.dim)
    engine = MemoryEngine(settings, structured, vector, CachedEmbedder(held))
    try:
        mem = OwnerMemory("alice", engine, engine)
        store = asyncio.ensure_future(mem.l2(operations.store, ("went live", None, None, "op-1")))
        await asyncio.wait_for(held.entered.wait(), 5)
        snap = await asyncio.wait_for(mem.apply([AddFact("prefers tea")], None), 5)
        assert [f.content for f in snap.facts] == ["prefers tea"] and not store.done()
        held.release.set()
        result = await store
        assert result.memory.has_embedding and held.calls == 1
    finally:
        await engine.close()


async def test_a_store_with_context_embeds_its_content_and_lines_before_the_lock() -> None:
    """The owner's writer prepares the content and each line of the context in one call
    of the model; the store under the lock finds them all in the cache."""
    from dream_memory_actor.embedding.base import CachedEmbedder
    from dream_memory_actor.storage import open_stores

    settings = MemorySettings(backend="memory")
    held = HeldEmbedder()
    held.release.set()
    structured, vector = await open_stores(settings, held.dim)
    engine = MemoryEngine(settings, structured, vector, CachedEmbedder(held))
    try:
        mem = OwnerMemory("alice", engine, engine)
        result = await mem.l2(operations.store, (
            "Bob: which breed?", None, "8 May 2023\nAnn: I adopted a dog.", "op-2"))
        assert result.memory.context == "8 May 2023\nAnn: I adopted a dog."
        assert held.calls == 1
        assert held.texts == ["Bob: which breed?", "8 May 2023", "Ann: I adopted a dog."]
    finally:
        await engine.close()
