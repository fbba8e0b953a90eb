"""A search planned from the counts the previous one read: one statement when its own
counts choose the same plan, and the same hits as a search that reads them first."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from dream_memory_actor.config import MemorySettings
from dream_memory_actor.models import SearchHit, utcnow
from dream_memory_actor.storage.postgres import PostgresVectorStore
from dream_memory_actor.storage.postgres.plan import same_plan_rows, search_plan
from tests.conftest import DIM
from tests.postgres.conftest import bulk as _bulk


def _seen(hits: list[SearchHit]) -> list[tuple[str, float, float]]:
    return [(h.memory.id, h.score, h.keyword_score) for h in hits]


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
    """Planned from counts of another size (HNSW and trigram index), the statement
    brings only the counts, and the search runs the plan they choose."""
    _, vector = pg
    await _bulk(vector, "o", 200, 5)
    query = [float(x) for x in np.random.default_rng(6).normal(size=DIM)]
    now = utcnow()
    vector._last_counts = None
    want = _seen(await vector.search("o", "memory 7", embedding=query, limit=20, now=now))
    guess = search_plan(20_000, 20_000, owners=1, embedding=True, terms=["memory"],
                        keyword_k=40)
    assert (guess.vector, guess.keyword, guess.split, guess.recent_window) == (
        "hnsw", "trigram", False, False)
    assert not same_plan_rows(20_000, 20_000)[0] <= 200 <= same_plan_rows(20_000, 20_000)[1]
    vector._last_counts = (20_000, 20_000)
    fetches.clear()
    got = _seen(await vector.search("o", "memory 7", embedding=query, limit=20, now=now))
    assert fetches == ["counts+candidates", "candidates"] and got == want
    fetches.clear()
    await vector.search("o", "memory 7", embedding=query, limit=20, now=now)
    assert fetches == ["counts+candidates"]
