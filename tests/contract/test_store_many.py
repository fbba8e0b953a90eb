"""Contract of ``store_many``: the same as storing each item in turn, written at once."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from dream_memory_actor.errors import InvalidBatch, InvalidContent, InvalidMetadata
from dream_memory_actor.limits import Limits
from dream_memory_actor.models import StoreResult, utcnow
from tests.conftest import Stores
from tests.contract.test_vector import spread, vec

#: Items with near-duplicates of each other and of memories stored before the batch,
#: and the same text under a dissimilar vector (merged by text).
ITEMS: list[tuple[str, list[float], dict[str, Any]]] = [
    ("went live on Kubernetes", vec(1, 0.1), {"a": 1}),
    ("likes green tea", vec(0, 1), {}),
    ("went live on K8s", vec(1, 0.2), {"b": 2}),  # merges into item 0
    ("prefers tabs", spread(0), {"k": "batch"}),  # merges into the stored one
    ("likes green tea", spread(5), {"c": 3}),  # same text as item 1
    ("uses vim", spread(6), {}),
    ("went live on K8s!", vec(1, 0.25), {"d": 4}),  # into item 0 again
]


def _shape(results: list[StoreResult], first: dict[str, int]) -> list[tuple[Any, ...]]:
    """What each store did, with memories named by the item (or -1: stored before) that
    created them, so two owners' results compare."""
    out = []
    for i, r in enumerate(results):
        if not r.merged:
            first.setdefault(r.memory.id, i)
        sim = None if r.similarity is None else round(r.similarity, 6)
        meta = {k: v for k, v in r.memory.metadata.items() if k != "merged_at"}
        out.append((first.get(r.memory.id, -1), r.merged, sim, r.memory.content, meta))
    return out


async def test_batch_merges_as_sequential_stores_would(stores: Stores) -> None:
    v = stores.vector
    now = utcnow() - timedelta(minutes=1)
    firsts: list[dict[str, int]] = []
    for owner in ("seq", "batch"):
        pre = await v.store(owner, "prefers tabs", embedding=spread(0), metadata={"p": 0}, now=now)
        firsts.append({pre.memory.id: -1})
    seq = [await v.store("seq", t, embedding=e, metadata=m, now=now) for t, e, m in ITEMS]
    batch = await v.store_many(
        "batch",
        [{"content": t, "metadata": m} for t, _, m in ITEMS],
        embeddings=[e for _, e, _ in ITEMS],
        now=now,
    )
    assert len(batch) == len(ITEMS)
    assert _shape(batch, firsts[1]) == _shape(seq, firsts[0])
    assert [r.merged for r in batch] == [False, False, True, True, True, False, True]

    def listing(mems: list[Any]) -> list[tuple[str, Any]]:
        return sorted(
            (m.content, {k: x for k, x in m.metadata.items() if k != "merged_at"}) for m in mems
        )

    assert listing(await v.list("batch")) == listing(await v.list("seq"))
    assert await v.count("batch") == await v.count("seq") == 4
    # the document frequencies moved as sequential stores move them: same ranking
    for q in ("went live", "tea", "tabs helm"):
        a = await v.search("batch", q, embedding=vec(1, 0.1), now=now)
        b = await v.search("seq", q, embedding=vec(1, 0.1), now=now)
        assert [(h.memory.content, round(h.score, 9)) for h in a] == [
            (h.memory.content, round(h.score, 9)) for h in b
        ]


async def test_batch_in_keyword_mode(keyword_stores: Stores) -> None:
    v = keyword_stores.vector
    got = await v.store_many(
        "alice", ["deploy on kubernetes", "Deploy  on Kubernetes", "likes tea"]
    )
    assert [r.merged for r in got] == [False, True, False]
    assert got[1].memory.id == got[0].memory.id
    assert await v.count("alice") == 2
    assert [h.memory.content for h in await v.search("alice", "tea")] == ["likes tea"]


async def test_batch_is_idempotent(stores: Stores) -> None:
    v = stores.vector
    items = ["one note", "another note"]
    embs = [spread(0), spread(1)]
    first = await v.store_many("alice", items, embeddings=embs, op_id="batch-1")
    again = await v.store_many("alice", items, embeddings=embs, op_id="batch-1")
    assert again == first
    assert await v.count("alice") == 2


@pytest.mark.parametrize(
    "items, error",
    [
        ([], InvalidBatch),
        ("just a string", InvalidBatch),
        ({"content": "a mapping, not a list"}, InvalidBatch),
        (["fine", {"text": "wrong key"}], InvalidBatch),
        (["fine", {"content": "x", "metadata": {}, "extra": 1}], InvalidBatch),
        (["fine", "   "], InvalidContent),
        (["fine", 42], InvalidContent),
        (["fine", {"content": "x", "metadata": {"merged_from": []}}], InvalidMetadata),
    ],
)
async def test_bad_batches_write_nothing(stores: Stores, items: Any, error: type) -> None:
    v = stores.vector
    with pytest.raises(error):
        await v.store_many("alice", items)
    assert await v.count("alice") == 0


async def test_oversized_batch_is_refused(stores: Stores) -> None:
    v = stores.vector
    small = Limits(batch_items=3, batch_bytes=100)
    v.limits = small
    with pytest.raises(InvalidBatch, match="limit is 3"):
        await v.store_many("alice", ["a", "b", "c", "d"])
    with pytest.raises(InvalidBatch, match="100 bytes"):
        await v.store_many("alice", ["x" * 60, "y" * 60])
    with pytest.raises(InvalidBatch, match="embeddings"):
        await v.store_many("alice", ["a", "b"], embeddings=[spread(0)])
    assert await v.count("alice") == 0


async def test_a_batch_reads_its_neighbours_as_its_items_would_one_by_one(
        stores: Stores) -> None:
    """``_nearest_many`` and ``_same_text_many`` (what a store_many reads before judging
    its items) give, on every backend, the rows ``_rows`` gives for each vector and each
    content hash alone, in the same order."""
    from dream_memory_actor.storage.dedup import Cuts
    from dream_memory_actor.text import content_hash

    v = stores.vector
    now = utcnow() - timedelta(minutes=1)
    for i in range(12):
        await v.store("o", f"fact number {i}", embedding=spread(i), now=now + timedelta(i))
    await v.store("o", "a text stored twice", embedding=spread(13), now=now)
    await v.store("o", "a text stored twice", embedding=spread(14), now=now,
                  threshold=Cuts.off())  # no judgement: kept beside the first
    probes = [spread(0), vec(1, 0.3), spread(7), spread(0)]
    many = await v._nearest_many("o", probes, 4)
    alone = [await v._rows("o", near=(p, 4)) for p in probes]

    def ids(rows: list[Any]) -> list[tuple[str, float | None]]:
        return [(r.memory.id, None if r.similarity is None else round(r.similarity, 5))
                for r in rows]

    assert [ids(r) for r in many] == [ids(r) for r in alone]
    assert all(len(r) == 4 for r in many)
    hashes = [content_hash(t) for t in ("a text stored twice", "fact number 3", "nothing",
                                        "a text stored twice")]
    same = await v._same_text_many("o", hashes)
    for h in hashes:
        assert ids(same[h]) == ids(await v._rows("o", text_hash=h))
    assert len(same[hashes[0]]) == 2 and same[hashes[2]] == []
