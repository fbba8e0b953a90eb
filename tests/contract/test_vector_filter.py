"""Contract of metadata filters on search and list: equality on keys, before the limit."""

from __future__ import annotations

import pytest

from dream_memory_actor.errors import InvalidFilter
from dream_memory_actor.validation.l2 import MAX_FILTER_KEYS
from tests.conftest import Stores
from tests.contract.test_vector import spread, vec


async def _corpus(stores: Stores) -> dict[str, str]:
    """Ten deploy notes of agent "ops" nearest to the query (kept apart: threshold 1),
    one of agent "deploy" far from it."""
    v = stores.vector
    ids = {}
    for i in range(10):
        r = await v.store(
            "alice",
            f"deploy note {i} on kubernetes",
            embedding=vec(1, 0.01 * i, 0.3),
            metadata={"agent": "ops", "n": i},
            threshold=1.0,
        )
        assert not r.merged
    far = await v.store(
        "alice",
        "deploy with helm, far away",
        embedding=spread(3),
        metadata={"agent": "deploy", "n": 1.0, "ok": True},
    )
    ids["far"] = far.memory.id
    await v.store("bob", "deploy of bob", embedding=vec(1), metadata={"agent": "deploy"})
    return ids


async def test_filter_applies_before_the_limit(stores: Stores) -> None:
    ids = await _corpus(stores)
    v = stores.vector
    # Unfiltered, the far memory is not among the 3 best; filtered it is the only one.
    top = await v.search("alice", "deploy", embedding=vec(1, 0, 0.3), limit=3)
    assert ids["far"] not in {h.memory.id for h in top}
    hits = await v.search(
        "alice", "deploy", embedding=vec(1, 0, 0.3), limit=3, filter={"agent": "deploy"}
    )
    assert [h.memory.id for h in hits] == [ids["far"]]
    # vector_k / keyword_k of 1 still find it: the filter is applied before the cuts
    hits = await v.search(
        "alice",
        "kubernetes",
        embedding=vec(1, 0, 0.3),
        limit=1,
        vector_k=1,
        keyword_k=1,
        filter={"agent": "deploy"},
    )
    assert [h.memory.id for h in hits] == [ids["far"]]


async def test_filter_equality_semantics(stores: Stores) -> None:
    ids = await _corpus(stores)
    v = stores.vector

    async def found(where: dict[str, object]) -> set[str]:
        hits = await v.search("alice", "deploy", embedding=vec(1), limit=50, filter=where)
        listed = await v.list("alice", filter=where)
        assert {h.memory.id for h in hits} == {m.id for m in listed}
        return {m.id for m in listed}

    assert len(await found({"agent": "ops"})) == 10
    assert await found({"agent": "deploy", "n": 1}) == {ids["far"]}  # 1 equals 1.0
    assert await found({"ok": True}) == {ids["far"]}
    assert await found({"ok": 1}) == set()  # true is not 1
    assert len(await found({"n": True})) == 0
    assert await found({"agent": "nobody"}) == set()
    assert await found({"missing": None}) == set()
    assert len(await found({})) == 11  # an empty filter filters nothing


async def test_filter_with_hostile_text(stores: Stores) -> None:
    v = stores.vector
    odd = "x' OR '1'='1\"}) | @owner:{*} -- %_\\"
    r = await v.store("alice", "odd metadata", embedding=spread(0), metadata={odd: odd})
    await v.store("alice", "plain", embedding=spread(1), metadata={"k": "v"})
    assert [m.id for m in await v.list("alice", filter={odd: odd})] == [r.memory.id]
    assert [
        h.memory.id
        for h in await v.search("alice", "metadata", embedding=spread(0), filter={odd: odd})
    ] == [r.memory.id]
    assert await v.list("alice", filter={"k": odd}) == []


async def test_filter_in_keyword_mode(keyword_stores: Stores) -> None:
    v = keyword_stores.vector
    await v.store("alice", "deploy on kubernetes", metadata={"agent": "ops"})
    b = await v.store("alice", "deploy with helm", metadata={"agent": "deploy"})
    hits = await v.search("alice", "deploy", filter={"agent": "deploy"})
    assert [h.memory.id for h in hits] == [b.memory.id]
    assert [m.id for m in await v.list("alice", filter={"agent": "deploy"}, limit=1)] == [
        b.memory.id
    ]


async def test_filter_over_several_owners(stores: Stores) -> None:
    v = stores.vector
    a = await v.store("alice", "deploy note", embedding=spread(0), metadata={"team": "x"})
    b = await v.store("bob", "deploy note of bob", embedding=spread(1), metadata={"team": "x"})
    await v.store("bob", "deploy other", embedding=spread(2), metadata={"team": "y"})
    hits = await v.search(["alice", "bob"], "deploy", embedding=spread(0), filter={"team": "x"})
    assert {h.memory.id for h in hits} == {a.memory.id, b.memory.id}


@pytest.mark.parametrize(
    "where",
    [
        {"agent": ["a", "b"]},
        {"agent": {"$in": ["a"]}},
        {"n": float("nan")},
        {"": "x"},
        {1: "x"},
        {"k": b"bytes"},
        {"k": "a\x00b"},
        "agent=deploy",
        ["agent"],
        {f"k{i}": i for i in range(MAX_FILTER_KEYS + 1)},
        {"k": "x" * 2000},
    ],
)
async def test_bad_filters_are_refused(stores: Stores, where: object) -> None:
    v = stores.vector
    await v.store("alice", "a note", embedding=spread(0))
    with pytest.raises(InvalidFilter):
        await v.search("alice", "note", embedding=spread(0), filter=where)  # type: ignore[arg-type]
    with pytest.raises(InvalidFilter):
        await v.list("alice", filter=where)  # type: ignore[arg-type]
