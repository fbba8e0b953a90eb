"""32 concurrent writers (in 4 Ray tasks) on one owner: nothing lost, nothing twice.

The workload is the ``concurrency`` benchmark's: L1 writes (facts, a status key
per writer, one status key everybody writes) mixed with L2 stores of
near-duplicates on four topics. The final snapshot must equal the sequential
replay of every acknowledged write in version order, and each topic must be one
memory that absorbed every other store of it exactly once.
"""

from __future__ import annotations

from benchmarks.concurrency import run_load, verify
from dream_memory_actor.runtime import MemorySystem
from tests.runtime.embedders import reworded


def topic_text(topic: int, writer: int, step: int) -> str:
    # One fact per topic, put differently by each writer: merges for the test embedder.
    return reworded(topic, writer, step)


def test_32_writers_on_one_owner(system: MemorySystem) -> None:
    handle = system.owner("conc-owner")
    base = handle.snapshot()
    records, _ = run_load(handle, writers=32, tasks=4, steps=6, text=topic_text)
    final = handle.snapshot()
    memories = handle.list(limit=1000)
    checks = verify(records, final, memories, base)
    assert checks == {"lost": 0, "duplicates": 0, "double_applied": 0,
                      "versions_contiguous": True, "replay_matches": True,
                      "merges_once": True}
    l1 = [r for r in records if r.kind == "l1"]
    assert final.version == base.version + len(l1)
    assert len(final.facts) == 32 * 2  # steps 0 and 3 of every writer
    assert {f"w{w}" for w in range(32)} <= set(final.status)
    assert len(memories) == 4 and sum(r.kind == "l2" for r in records) == 64


def test_the_check_sees_lost_duplicate_and_double_applied_writes() -> None:
    from benchmarks.concurrency import Record
    from dream_memory_actor.models import MemorySnapshot, VectorMemory, utcnow
    from dream_memory_actor.storage.ops import AddFact, apply_ops

    a, b = AddFact("first", id="f1"), AddFact("second", id="f2")
    records = [Record("l1", 0.1, ops=[a], version=1), Record("l1", 0.1, ops=[b], version=2),
               Record("l2", 0.1, topic=0, memory_id="m1", merged=False),
               Record("l2", 0.1, topic=0, memory_id="m2", merged=False)]
    lost_b = apply_ops(MemorySnapshot(owner="o"), [a], utcnow())
    memories = [VectorMemory(id="m1", owner="o", content="x"),
                VectorMemory(id="m2", owner="o", content="x")]
    checks = verify(records, lost_b, memories)
    assert checks["lost"] == 1 and checks["duplicates"] == 1
    assert not checks["replay_matches"] and not checks["merges_once"]
    twice = [*records[:2], Record("l1", 0.1, ops=[b], version=2)]
    assert verify(twice, lost_b, [])["double_applied"] == 1
