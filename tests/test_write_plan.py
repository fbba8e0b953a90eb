"""A write plan's reads (``storage.writes.Plan``) against a made-up store: the near read
asks for just enough rows to still find the nearest memories the plan has not hidden."""

from __future__ import annotations

import math
from typing import Any

from dream_memory_actor.models import VectorMemory
from dream_memory_actor.storage.writes import KEEP, Plan, Row

OWNER = "plan-owner"


def unit(angle: float) -> list[float]:
    return [math.cos(angle), math.sin(angle)]


class Stored:
    """Rows at angles 0.1, 0.2, ...: the row at angle 0.1 * i is the i-th nearest to
    ``unit(0)``. It records the ``k`` of every near read."""

    def __init__(self, n: int) -> None:
        self.rows = [Row(VectorMemory(owner=OWNER, content=f"stored {i}", has_embedding=True),
                         unit(0.1 * i)) for i in range(1, n + 1)]
        self.asked: list[int] = []

    async def read(self, owner: str, *, near: Any = None, ids: Any = None,
                   text_hash: Any = None, **_: Any) -> list[Row]:
        if near is not None:
            vector, k = near
            self.asked.append(k)
            scored = sorted(self.rows, key=lambda r: -sum(a * b for a, b in
                                                          zip(vector, r.vector, strict=True)))
            return [Row(r.memory, None, sum(a * b for a, b in zip(vector, r.vector, strict=True)))
                    for r in scored[:k]]
        if ids is not None:
            return [r for r in self.rows if r.memory.id in ids]
        return []


async def test_new_memories_of_the_plan_do_not_widen_the_near_read() -> None:
    store = Stored(10)
    plan = Plan(OWNER, store.read)
    for i in range(5):  # five new memories, not stored yet
        plan.put(VectorMemory(owner=OWNER, content=f"new {i}"), unit(2.0 + 0.1 * i))
    near = await plan.neighbours("query", unit(0.0), 3)
    assert store.asked == [3]
    assert [n.content for n in near] == ["stored 1", "stored 2", "stored 3"]


async def test_hidden_stored_rows_are_read_past() -> None:
    store = Stored(10)
    plan = Plan(OWNER, store.read)
    first, second, third = (r.memory for r in store.rows[:3])
    plan.drop(first)  # gone
    plan.put(second.model_copy(update={"content": "second, new"}), unit(2.5),
             before=second)  # a new vector: scored as the plan's, not as stored
    plan.put(third.model_copy(update={"content": "third, merged"}), KEEP,
             before=third)  # the stored vector stays: still found by the read
    near = await plan.neighbours("query", unit(0.0), 3)
    assert store.asked == [5]  # 3 + the dropped row + the row with a new vector
    assert [n.content for n in near] == ["third, merged", "stored 4", "stored 5"]


async def test_a_batch_s_own_nearest_are_those_every_cosine_alone_gives() -> None:
    """The plan's new vectors nearest to a query, picked with one matrix product, are
    those of every cosine computed alone, in the order written, with those cosines:
    among equal vectors the earlier written win, a zero vector is never nearer than 0,
    and a put dropped or written again with another vector is seen as it now is."""
    import numpy as np

    from dream_memory_actor.scoring import cosine

    rng = np.random.default_rng(7)
    plan = Plan(OWNER, Stored(0).read)
    vectors = [list(rng.normal(size=16)) for _ in range(40)]
    vectors[5] = vectors[30] = vectors[12]  # ties: the earliest written comes first
    vectors[20] = [0.0] * 16
    mems = []
    for i, v in enumerate(vectors):
        mems.append(VectorMemory(owner=OWNER, content=f"new {i}", has_embedding=True))
        plan.put(mems[-1], list(v))

    def expected(query: list[float], k: int) -> list[tuple[float, str]]:
        live = [(cosine(query, p.vector), n, p.memory.content)
                for n, p in enumerate(plan._put.values()) if isinstance(p.vector, list)]
        best = sorted(live, key=lambda e: (-e[0], e[1]))[:k]
        return [(s, c) for s, _, c in sorted(best, key=lambda e: e[1])]

    def got(query: list[float], k: int) -> list[tuple[float, str]]:
        return [(s, p.memory.content) for s, p in plan._own_nearest(np.asarray(query), k)]

    for query in [vectors[12], *(list(rng.normal(size=16)) for _ in range(20))]:
        for k in (1, 3, 50):
            assert got(query, k) == expected(query, k)
    assert [c for _, c in got(vectors[12], 2)] == ["new 5", "new 12"]
    plan.drop(mems[5])  # a put dropped: the rows are made again
    plan.put(mems[12], list(rng.normal(size=16)))  # written again, another vector
    plan.put(mems[13], KEEP)  # written again, its vector kept
    for query in [vectors[30], *(list(rng.normal(size=16)) for _ in range(10))]:
        assert got(query, 3) == expected(query, 3)
    assert got(vectors[30], 1)[0][1] == "new 30"  # new 5 is gone, new 12 moved
