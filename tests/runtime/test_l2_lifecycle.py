"""Updates, supersessions, histories, filters and batches through the owner handles."""

from __future__ import annotations

import pytest

from dream_memory_actor.errors import (
    InvalidBatch,
    InvalidFilter,
    MemoryNotFound,
    MemorySuperseded,
)
from dream_memory_actor.runtime import MemorySystem


def test_update_supersede_history_and_filter(system: MemorySystem) -> None:
    h = system.owner("rt-life")
    first = h.store("t4: deploys with helm", {"agent": "deploy"}).memory
    other = h.store("t5: likes green tea", {"agent": "chat"}).memory
    updated = h.update(first.id, "t4: deploys with argo cd", op_id="rt-life-u1")
    again = h.update(first.id, "t4: deploys with argo cd", op_id="rt-life-u1")
    assert updated == again and h.get(first.id).content == "t4: deploys with argo cd"
    new = h.supersede_memory(first.id, "t4: deploys with flux", by="ops", reason="moved")
    assert new.metadata == {"agent": "deploy"}
    assert [v.content for v in h.memory_history(first.id)] == [
        "t4: deploys with helm",
        "t4: deploys with argo cd",
        "t4: deploys with flux",
    ]
    assert {m.id for m in h.list()} == {new.id, other.id}
    assert [m.id for m in h.list(filter={"agent": "deploy"})] == [new.id]
    hits = h.search("t4: deploys", filter={"agent": "deploy"})
    assert [x.memory.id for x in hits] == [new.id]
    assert h.search("t4: deploys", filter={"agent": "nobody"}) == []
    assert [
        x.memory.id for x in system.search(["rt-life"], "t5: tea", filter={"agent": "chat"})
    ] == [other.id]
    with pytest.raises(MemorySuperseded) as err:
        h.update(first.id, "t4: too late")
    assert err.value.superseded_by == new.id
    with pytest.raises(MemoryNotFound):
        system.owner("rt-life-other").update(new.id, "t4: not yours")
    with pytest.raises(InvalidFilter):  # refused here, before any remote call
        h.search("t4", filter={"agent": ["a"]})


async def test_async_twins(system: MemorySystem) -> None:
    h = system.owner("rt-life-async")
    results = await h.store_many_async(
        ["t6: one note", {"content": "T6: One note.", "metadata": {"k": 1}}, "t7: another"],
        op_id="rt-life-b1",
    )
    assert [r.merged for r in results] == [False, True, False]
    assert results[1].memory.id == results[0].memory.id
    retried = await h.store_many_async(
        ["t6: one note", "T6: One note.", "t7: another"], op_id="rt-life-b1"
    )
    assert retried == results
    assert len(await h.list_async()) == 2
    mid = results[2].memory.id
    await h.update_async(mid, "t7: another, edited")
    succ = await h.supersede_memory_async(mid, "t7: replaced")
    assert len(await h.memory_history_async(succ.id)) == 3
    assert [m.id for m in await h.list_async(filter={"k": 1})] == [results[0].memory.id]
    hits = await h.search_async("t6: note", filter={"k": 1})
    assert [x.memory.id for x in hits] == [results[0].memory.id]


def test_bad_batches_are_refused_at_the_handle(system: MemorySystem) -> None:
    h = system.owner("rt-life-bad")
    for items in ([], "text", [{"text": "x"}], ["ok"] * (h._view.limits.batch_items + 1)):
        with pytest.raises(InvalidBatch):
            h.store_many(items)  # type: ignore[arg-type]
    assert h.list() == []
