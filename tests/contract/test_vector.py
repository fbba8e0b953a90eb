"""Contract of the vector (L2) store: dedup-merge, hybrid search, CRUD, bad input."""

from __future__ import annotations

import asyncio
import math
from datetime import timedelta
from typing import Any

import pytest

from dream_memory_actor.errors import (
    InvalidContent,
    InvalidEmbedding,
    InvalidMetadata,
    InvalidOwnerId,
    InvalidQuery,
    MemoryNotFound,
)
from dream_memory_actor.models import utcnow
from tests.conftest import DIM, Stores


def vec(*head: float) -> list[float]:
    """A test embedding: the given leading components, zeros after."""
    v = list(head) + [0.0] * (DIM - len(head))
    return v[:DIM]


def spread(i: int) -> list[float]:
    """The i-th of 16 fixed vectors no two of which are near-duplicates (cos < 0.85)."""
    import numpy as np

    rng = np.random.default_rng(1234)
    table = rng.normal(size=(16, DIM))
    return [float(x) for x in table[i]]


async def test_store_and_get(stores: Stores) -> None:
    r = await stores.vector.store("alice", "went live on Kubernetes with helm",
                                  embedding=vec(1), metadata={"agent": "deploy"})
    assert not r.merged
    got = await stores.vector.get("alice", r.memory.id)
    assert got.content == "went live on Kubernetes with helm"
    assert got.metadata == {"agent": "deploy"} and got.has_embedding
    assert await stores.vector.count("alice") == 1


async def test_near_duplicate_is_merged(stores: Stores) -> None:
    v = stores.vector
    first = await v.store("alice", "went live on Kubernetes", embedding=vec(1, 0.1),
                          metadata={"a": 1, "keep": "old"})
    second = await v.store("alice", "went live on K8s", embedding=vec(1, 0.2),
                           metadata={"b": 2, "keep": "new"})
    assert second.merged and second.memory.id == first.memory.id
    assert second.similarity is not None and second.similarity > 0.85
    m = await v.get("alice", first.memory.id)
    assert m.content == "went live on K8s"
    assert m.metadata["a"] == 1 and m.metadata["b"] == 2 and m.metadata["keep"] == "new"
    assert m.metadata["merged_from"] == ["went live on Kubernetes"]
    assert "merged_at" in m.metadata and m.metadata["merge_count"] == 1
    assert await v.count("alice") == 1
    # the original embedding was kept: a query at the first vector is still a perfect match
    hits = await v.search("alice", "zzz", embedding=vec(1, 0.1))
    assert hits[0].vector_score == pytest.approx(1.0, abs=1e-5)


async def test_dissimilar_memories_are_not_merged(stores: Stores) -> None:
    v = stores.vector
    await v.store("alice", "went live on Kubernetes", embedding=vec(1, 0))
    r = await v.store("alice", "likes green tea", embedding=vec(0, 1))
    assert not r.merged
    assert await v.count("alice") == 2


async def test_threshold_is_strictly_greater(stores: Stores) -> None:
    v = stores.vector
    await v.store("alice", "a", embedding=vec(1, 0))
    # cos = 0.85 exactly is not a duplicate (the rule is "> 0.85")
    r = await v.store("alice", "b", embedding=vec(0.85, math.sqrt(1 - 0.85**2)), threshold=0.85)
    assert not r.merged or (r.similarity is not None and r.similarity > 0.85)


async def test_dedup_is_per_owner(stores: Stores) -> None:
    await stores.vector.store("alice", "same text", embedding=vec(1))
    r = await stores.vector.store("bob", "same text", embedding=vec(1))
    assert not r.merged


async def test_hybrid_scores_follow_the_documented_formula(stores: Stores) -> None:
    v = stores.vector
    now = utcnow()
    await v.store("alice", "went live on Kubernetes with helm", embedding=vec(1, 0),
                  now=now - timedelta(days=30))
    # one memory per query term, so both terms weigh the same (equal document frequency)
    await v.store("alice", "deployment checklist", embedding=vec(0, 1), now=now)
    hits = await v.search("alice", "kubernetes deployment", embedding=vec(1, 0), now=now)
    h = hits[0]
    assert h.memory.content == "went live on Kubernetes with helm"
    assert h.mode == "hybrid"
    assert h.vector_score == pytest.approx(1.0, abs=1e-5)
    assert h.keyword_score == pytest.approx(0.5)  # "kubernetes" found, "deployment" not
    assert h.time_score == pytest.approx(0.5)  # 30 days old: 1 / (1 + 30/30)
    assert h.score == pytest.approx(0.6 * 1.0 + 0.3 * 0.5 + 0.1 * 0.5, abs=1e-5)


async def test_semantics_beat_wording(stores: Stores) -> None:
    v = stores.vector
    await v.store("alice", "went live on Kubernetes with helm", embedding=vec(1, 0.1))
    await v.store("alice", "deployment of the cafeteria menu", embedding=vec(0, 1))
    hits = await v.search("alice", "K8s deployment", embedding=vec(1, 0))
    assert hits[0].memory.content == "went live on Kubernetes with helm"


async def test_keyword_signal_breaks_vector_ties(stores: Stores) -> None:
    v = stores.vector
    await v.store("alice", "notes about the garden", embedding=vec(1, 0, 0))
    await v.store("alice", "deploy notes for helm", embedding=vec(0, 0, 1))
    hits = await v.search("alice", "deploy helm", embedding=vec(1, 0, 1))
    assert hits[0].memory.content == "deploy notes for helm"


async def test_newer_memory_wins_a_tie(stores: Stores) -> None:
    v = stores.vector
    now = utcnow()
    await v.store("alice", "standup notes one", embedding=vec(1, 0), now=now - timedelta(days=90))
    await v.store("alice", "standup notes two", embedding=vec(0, 1), now=now)
    hits = await v.search("alice", "standup notes", embedding=vec(1, 1), now=now)
    assert [h.memory.content for h in hits] == ["standup notes two", "standup notes one"]


async def test_search_is_scoped_to_owners(stores: Stores) -> None:
    v = stores.vector
    await v.store("alice", "alice deploys with helm", embedding=vec(1))
    await v.store("bob", "bob deploys with helm", embedding=vec(1, 0.01))
    await v.store("team", "team deploys with argo", embedding=vec(0.9, 0.1))
    alice = await v.search("alice", "deploys", embedding=vec(1))
    assert {h.memory.owner for h in alice} == {"alice"}
    both = await v.search(["alice", "team"], "deploys", embedding=vec(1))
    assert {h.memory.owner for h in both} == {"alice", "team"}


async def test_search_over_several_owners_ranks_every_owners_memories(stores: Stores) -> None:
    """Three owners of four memories each (distinct vectors, no shared words): the
    vector ranking over all three equals the exact cosine order, each hit its owner's."""
    from dream_memory_actor.scoring import cosine

    v = stores.vector
    owners = ["ann", "ben", "cal"]
    stored = {}
    for i in range(12):
        r = await v.store(owners[i % 3], f"entry{i} zq{i}", embedding=spread(i))
        stored[r.memory.id] = (owners[i % 3], cosine(spread(i), spread(15)))
    hits = await v.search(owners, "unrelated", embedding=spread(15), limit=12)
    assert len(hits) == 12
    assert all(stored[h.memory.id][0] == h.memory.owner for h in hits)
    # (a negative cosine scores 0 as a vector signal: those tie, and recency decides)
    expected = sorted((mid for mid in stored if stored[mid][1] > 0),
                      key=lambda mid: -stored[mid][1])
    assert len(expected) >= 4
    assert [h.memory.id for h in hits][:len(expected)] == expected


async def test_limit_is_honoured(stores: Stores) -> None:
    v = stores.vector
    for i in range(12):
        await v.store("alice", f"memory number {i} about topic {i * 7}",
                      embedding=spread(i))
    assert len(await v.search("alice", "memory", embedding=vec(1), limit=5)) == 5
    assert len(await v.search("alice", "memory", embedding=vec(1), limit=50)) == 12


async def test_like_wildcards_in_query_match_literally(stores: Stores) -> None:
    v = stores.vector
    await v.store("alice", "progress is 50% done")
    await v.store("alice", "progress is 500 units")
    await v.store("alice", "snake_case names")
    await v.store("alice", "snakeXcase names")
    pct = await v.search("alice", "50%")
    # "%" is not part of a term: "50" is, and both contain it
    assert {h.memory.content for h in pct} == {"progress is 50% done", "progress is 500 units"}
    # "_" is part of the term "snake_case" and must not act as a LIKE wildcard
    us = await v.search("alice", "snake_case")
    assert {h.memory.content for h in us} == {"snake_case names"}


async def test_delete_and_list(stores: Stores) -> None:
    v = stores.vector
    now = utcnow()
    ids = [(await v.store("alice", f"item {i}", embedding=spread(i),
                          now=now + timedelta(seconds=i))).memory.id for i in range(5)]
    listed = await v.list("alice", limit=3)
    assert [m.content for m in listed] == ["item 4", "item 3", "item 2"]
    assert [m.content for m in await v.list("alice", limit=3, offset=3)] == ["item 1", "item 0"]
    assert await v.delete("alice", ids[0]) is True
    assert await v.delete("alice", ids[0]) is False
    assert await v.delete("bob", ids[1]) is False  # not bob's
    with pytest.raises(MemoryNotFound):
        await v.get("alice", ids[0])
    with pytest.raises(MemoryNotFound):
        await v.get("bob", ids[1])
    assert await v.count("alice") == 4


async def test_concurrent_near_duplicates_merge_into_one(stores: Stores) -> None:
    v = stores.vector
    results = await asyncio.gather(*(
        v.store("alice", "went live on Kubernetes" + "!" * i, embedding=vec(1, 0.01 * i))
        for i in range(16)))
    assert await v.count("alice") == 1
    assert sum(not r.merged for r in results) == 1


@pytest.mark.parametrize("bad", [
    vec(float("nan")), vec(float("inf")), [1.0] * (DIM + 1), [1.0] * (DIM - 1), [0.0] * DIM,
    "not a vector",
])
async def test_bad_embeddings_rejected_nothing_written(stores: Stores, bad: object) -> None:
    with pytest.raises(InvalidEmbedding):
        await stores.vector.store("alice", "x", embedding=bad)  # type: ignore[arg-type]
    assert await stores.vector.count("alice") == 0


@pytest.mark.parametrize("text", ["", "  ", "x" * (32 * 1024 + 1), "nul\x00"])
async def test_bad_content_rejected(stores: Stores, text: str) -> None:
    with pytest.raises(InvalidContent):
        await stores.vector.store("alice", text, embedding=vec(1))
    assert await stores.vector.count("alice") == 0


async def test_bad_metadata_and_owner_and_limit(stores: Stores) -> None:
    v = stores.vector
    with pytest.raises(InvalidMetadata):
        await v.store("alice", "x", metadata={"x": float("nan")})
    with pytest.raises(InvalidMetadata):
        await v.store("alice", "x", metadata={"merged_from": []})
    with pytest.raises(InvalidMetadata):
        await v.store("alice", "x", metadata={"x": object()})
    with pytest.raises(InvalidOwnerId):
        await v.store("a b", "x")
    with pytest.raises(InvalidQuery):
        await v.search("alice", "x", limit=0)
    with pytest.raises(InvalidOwnerId):
        await v.search([], "x")
    assert await v.count("alice") == 0


async def test_keyword_only_mode(keyword_stores: Stores) -> None:
    v = keyword_stores.vector
    await v.store("alice", "went live on Kubernetes with helm")
    await v.store("alice", "likes green tea")
    hits = await v.search("alice", "kubernetes helm")
    assert [h.memory.content for h in hits] == ["went live on Kubernetes with helm"]
    assert hits[0].mode == "keyword" and hits[0].vector_score is None
    assert hits[0].keyword_score == 1.0
    with pytest.raises(InvalidQuery):
        await v.store("alice", "x", embedding=vec(1))


async def test_keyword_only_dedup_is_exact_text(keyword_stores: Stores) -> None:
    v = keyword_stores.vector
    await v.store("alice", "Went live on Kubernetes")
    same = await v.store("alice", "went  live on kubernetes ")
    other = await v.store("alice", "went live on Kubernetes today")
    assert same.merged and not other.merged
    assert await v.count("alice") == 2


async def test_cjk_bigrams_match_without_segmenter(stores: Stores) -> None:
    v = stores.vector
    await v.store("alice", "上周系统部署到了K8s集群")
    await v.store("alice", "用户喜欢喝绿茶")
    hits = await v.search("alice", "部署")
    assert hits[0].memory.content == "上周系统部署到了K8s集群"
    assert hits[0].keyword_score == 1.0


async def test_retried_store_is_applied_once(stores: Stores) -> None:
    v = stores.vector
    a = await v.store("alice", "first text", embedding=vec(1, 0), op_id="op-7")
    b = await v.store("alice", "first text", embedding=vec(1, 0), op_id="op-7")
    assert b.memory.id == a.memory.id and not b.merged
    assert (await v.get("alice", a.memory.id)).metadata == {}  # no merge recorded
    c = await v.store("alice", "first text", embedding=vec(1, 0), op_id="op-8")
    assert c.merged and await v.count("alice") == 1


async def test_the_query_is_embedded_while_the_keyword_statistics_are_read(
        stores: Stores, monkeypatch: pytest.MonkeyPatch) -> None:
    """A search that embeds its query reads the keyword statistics meanwhile: here the
    embedding only finishes once that read has begun, so a search that waited for the
    embedding first would never finish."""
    v = stores.vector
    await v.store("alice", "deploys happen on Thursday", embedding=vec(1))
    reading = asyncio.Event()
    term_stats = v._term_stats

    async def counted(owners, terms):  # type: ignore[no-untyped-def]
        reading.set()
        return await term_stats(owners, terms)

    monkeypatch.setattr(v, "_term_stats", counted)

    async def embed(text: str) -> list[float]:
        await reading.wait()
        return vec(1)

    hits = await asyncio.wait_for(v.search("alice", "when do deploys happen", embed=embed), 10)
    assert [h.memory.content for h in hits] == ["deploys happen on Thursday"]
    assert hits[0].vector_score is not None


async def test_the_query_embedding_starts_before_the_query_terms_are_found(
        stores: Stores, monkeypatch: pytest.MonkeyPatch) -> None:
    """The embedding, the slow part, is started first: the query's terms are found (and
    their statistics read) while it runs, not before it starts."""
    from dream_memory_actor.storage import vector as vector_module

    v = stores.vector
    await v.store("alice", "deploys happen on Thursday", embedding=vec(1))
    order: list[str] = []
    found = vector_module.query_terms

    def terms(text: str) -> list[str]:
        order.append("terms")
        return found(text)

    monkeypatch.setattr(vector_module, "query_terms", terms)

    async def embed(text: str) -> list[float]:
        order.append("embedding")
        return vec(1)

    await v.search("alice", "when do deploys happen", embed=embed)
    assert order[:2] == ["embedding", "terms"]


async def test_vector_candidates_follow_the_writes_after_a_search(stores: Stores) -> None:
    """A search by vector, then writes that add, replace and remove vectors, each
    followed by a search: the nearest memories are those the owner has now, each with
    its cosine (a backend that keeps its vectors between searches keeps them in step)."""
    v = stores.vector

    async def nearest(query: list[float], n: int = 1, **kw: Any) -> list[tuple[str, float]]:
        hits = await v.search("alice", "zzz", embedding=query, limit=n, vector_k=n, **kw)
        return [(h.memory.content, round(h.cosine or 0.0, 6)) for h in hits]

    a = (await v.store("alice", "alpha note", embedding=vec(1.0))).memory
    assert await nearest(vec(1.0)) == [("alpha note", 1.0)]
    b = (await v.store("alice", "beta note", embedding=vec(0.0, 1.0),
                       metadata={"k": "b"})).memory
    assert await nearest(vec(0.0, 1.0)) == [("beta note", 1.0)]
    await v.update("alice", a.id, "alpha moved", embedding=vec(0.0, 0.0, 1.0))
    assert await nearest(vec(0.0, 0.0, 1.0)) == [("alpha moved", 1.0)]
    assert await nearest(vec(1.0, 0.5)) == [("beta note", 0.447214)]  # not its old vector
    await v.store_many("alice", ["gamma note"], embeddings=[vec(0.6, 0.8)])
    assert await nearest(vec(0.6, 0.8)) == [("gamma note", 1.0)]
    assert await nearest(vec(0.6, 0.8), filter={"k": "b"}) == [("beta note", 0.8)]
    assert await v.delete("alice", b.id)
    assert await nearest(vec(0.0, 1.0), 3) == [("gamma note", 0.8), ("alpha moved", 0.0)]
