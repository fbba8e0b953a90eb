"""A search planned from the counts the previous one read: one statement when its own
counts choose the same plan, and the same hits as a search that reads them first."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from dream_memory_actor.config import MemorySettings
from dream_memory_actor.models import SearchHit, utcnow
from dream_memory_actor.storage.postgres import PostgresVectorStore
from dream_memory_actor.storage.postgres import vector as search_module
from dream_memory_actor.storage.postgres.plan import SearchPlan, same_plan_rows, search_plan
from tests.conftest import DIM
from tests.postgres.conftest import bulk as _bulk


def _seen(hits: list[SearchHit]) -> list[tuple[str, float, float]]:
    return [(h.memory.id, h.score, h.keyword_score) for h in hits]


@pytest.fixture(autouse=True)
def statements_only(pg: tuple[MemorySettings, PostgresVectorStore]) -> None:
    """The store keeps no rows: every search here runs its statements."""
    pg[1].backend.cache_rows = 0


@pytest.fixture
def fetches(pg: tuple[MemorySettings, PostgresVectorStore],
            monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The statements the store sends through ``_fetch``, and its counts reads."""
    _, vector = pg
    sent: list[str] = []
    real_fetch, real_stats = vector._fetch, vector._term_stats

    async def fetch(statement: Any) -> Any:
        sent.append("counts+candidates" if "st_docs" in statement[0] else "candidates")
        return await real_fetch(statement)

    async def stats(*a: Any) -> Any:
        sent.append("counts")
        return await real_stats(*a)

    monkeypatch.setattr(vector, "_fetch", fetch)
    monkeypatch.setattr(vector, "_term_stats", stats)
    return sent


@pytest.mark.parametrize("embedded", [True, False])
async def test_a_search_planned_from_the_last_counts_reads_once_and_finds_the_same(
        pg: tuple[MemorySettings, PostgresVectorStore], fetches: list[str],
        embedded: bool) -> None:
    _, vector = pg
    await _bulk(vector, "o", 300, 3)
    await vector.store("o", "alpha beta gamma", embedding=[1.0] * DIM)
    query = [float(x) for x in np.random.default_rng(4).normal(size=DIM)] if embedded else None
    now = utcnow()
    kw: dict[str, Any] = {"embedding": query, "limit": 30, "now": now}
    first = await vector.search("o", "memory 12 alpha", **kw)
    assert fetches == ["counts", "candidates"]
    fetches.clear()
    again = await vector.search("o", "memory 12 alpha", **kw)
    assert fetches == ["counts+candidates"]
    assert _seen(again) == _seen(first) and len(first) == 30
    # a write changes the counts within the same plan: still one statement, fresh counts
    await vector.store("o", "alpha delta", embedding=[0.5] * DIM)
    fetches.clear()
    after = await vector.search("o", "alpha memory", **kw)
    assert fetches == ["counts+candidates"]
    vector._last_counts = None
    fetches.clear()
    assert _seen(await vector.search("o", "alpha memory", **kw)) == _seen(after)
    assert fetches == ["counts", "candidates"]


async def test_counts_that_choose_another_plan_are_searched_with_that_plan(
        pg: tuple[MemorySettings, PostgresVectorStore], fetches: list[str]) -> None:
    """Planned from counts of another size (HNSW index and owner rows), the statement
    brings only the counts, and the search runs the plan they choose."""
    _, vector = pg
    await _bulk(vector, "o", 200, 5)
    query = [float(x) for x in np.random.default_rng(6).normal(size=DIM)]
    now = utcnow()
    vector._last_counts = None
    want = _seen(await vector.search("o", "memory 7", embedding=query, limit=20, now=now))
    guess = search_plan(3_000, 3_000, owners=1, embedding=True, terms=["memory"],
                        keyword_k=40)
    assert (guess.vector, guess.keyword, guess.split, guess.recent_window) == (
        "hnsw", "scan", False, False)
    assert not same_plan_rows(3_000, 3_000)[0] <= 200 <= same_plan_rows(3_000, 3_000)[1]
    vector._last_counts = (3_000, 3_000)
    fetches.clear()
    got = _seen(await vector.search("o", "memory 7", embedding=query, limit=20, now=now))
    assert fetches == ["counts+candidates", "candidates"] and got == want
    fetches.clear()
    await vector.search("o", "memory 7", embedding=query, limit=20, now=now)
    assert fetches == ["counts+candidates"]


async def test_a_split_plan_reads_the_counts_with_the_keyword_branch(
        pg: tuple[MemorySettings, PostgresVectorStore], fetches: list[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the plan runs the branches on two connections (here forced, on both index
    paths), the keyword branch brings the counts and the nearest memories come meanwhile: one
    round trip on each connection, the hits of the one statement."""
    _, vector = pg
    await _bulk(vector, "o", 300, 3)
    assert await vector.backend.hnsw.build()  # what the forced plans take
    query = [float(x) for x in np.random.default_rng(8).normal(size=DIM)]
    kw: dict[str, Any] = {"embedding": query, "limit": 30, "now": utcnow()}
    assert search_plan(10_000, 10_000, owners=1, embedding=True, terms=["memory"],
                       keyword_k=40).split
    results, sent = [], []
    for split in (False, True):
        def forced(*a: Any, split: bool = split, **k: Any) -> SearchPlan:
            return replace(search_plan(*a, **k), vector="hnsw", keyword="trigram",
                           split=split)

        monkeypatch.setattr(search_module, "search_plan", forced)
        await vector.search("o", "memory 12 alpha", **kw)  # the counts the next one reads
        fetches.clear()
        results.append(_seen(await vector.search("o", "memory 12 alpha", **kw)))
        sent.append(sorted(fetches))
    assert sent == [["counts+candidates"], ["candidates", "counts+candidates"]]
    assert results[0] == results[1] and len(results[0]) == 30


@pytest.mark.parametrize("where", [None, {"agent": "deploy"}])
@pytest.mark.parametrize("path", ["scan", "trigram"])
async def test_a_search_reads_its_keyword_candidates_while_its_query_is_embedded(
        pg: tuple[MemorySettings, PostgresVectorStore], monkeypatch: pytest.MonkeyPatch,
        where: dict[str, str] | None, path: str) -> None:
    """The embedding here finishes only once the keyword candidates are being read, so a
    search that read them after it would never finish; and it finds what a search given
    the query's vector finds: the same memories, scores and cosines (on both keyword
    paths, the owner's rows and the trigram index)."""
    _, vector = pg

    def forced(*a: Any, **k: Any) -> SearchPlan:
        plan = search_plan(*a, **k)
        return plan if plan.keyword is None else replace(plan, keyword=path)

    monkeypatch.setattr(search_module, "search_plan", forced)
    await _bulk(vector, "o", 300, 5)
    rng = np.random.default_rng(6)
    for i in range(20):
        await vector.store("o", f"deploy window {i} alpha" if i % 2 else f"note {i} beta",
                           embedding=[float(x) for x in rng.normal(size=DIM)],
                           metadata={"agent": "deploy" if i % 3 else "ops"})
    query = [float(x) for x in rng.normal(size=DIM)]
    reading = asyncio.Event()
    real_fetch = vector._fetch

    async def fetch(statement: Any) -> Any:
        reading.set()
        return await real_fetch(statement)

    async def embed(text: str) -> list[float]:
        await reading.wait()
        return query

    monkeypatch.setattr(vector, "_fetch", fetch)
    now = utcnow()
    kw: dict[str, Any] = {"limit": 30, "now": now, "filter": where}
    embedded = await asyncio.wait_for(
        vector.search("o", "alpha deploy memory 12", embed=embed, **kw), 10)
    given = await vector.search("o", "alpha deploy memory 12", embedding=query, **kw)
    assert [(h.memory.id, h.score, h.cosine) for h in embedded] == [
        (h.memory.id, h.score, h.cosine) for h in given]
    assert len(embedded) == (30 if where is None else 13)  # i % 3 != 0 of 20 are "deploy"
    assert all(h.cosine is not None for h in embedded)
