"""Searches in the rows a process keeps of an owner (``owner_rows``): used only while
the owner's version token says they are current, kept in step with the process's own
writes, and giving the hits the statements give."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest

from dream_memory_actor.config import MemorySettings
from dream_memory_actor.models import SearchHit, utcnow
from dream_memory_actor.storage import open_stores
from dream_memory_actor.storage.postgres import PostgresVectorStore
from tests.conftest import DIM

WORDS = ["alpha", "beta", "deploy", "staging", "replica", "kubernetes", "lake", "denver",
         "部署", "测试环境"]


def _vec(rng: np.random.Generator) -> list[float]:
    return [float(x) for x in rng.normal(size=DIM)]


def _text(rng: np.random.Generator, i: int) -> str:
    return " ".join(rng.choice(WORDS, size=3)) + f" note {i}"


def _seen(hits: list[SearchHit]) -> list[tuple[str, float, float]]:
    return [(h.memory.id, h.score, h.keyword_score) for h in hits]


def _alike(a: list[tuple[str, float, float]], b: list[tuple[str, float, float]]) -> bool:
    """The same hits in the same order, with the same scores but for the last digits of
    a cosine (pgvector's is summed in single precision, the kept rows' in double)."""
    return [x[0] for x in a] == [x[0] for x in b] and all(
        abs(x[1] - y[1]) < 1e-6 and x[2] == y[2] for x, y in zip(a, b, strict=True))


@pytest.fixture
async def other(pg: tuple[MemorySettings, PostgresVectorStore]
                ) -> AsyncIterator[PostgresVectorStore]:
    """A second store on the same schema, as another process has it: keeping no rows,
    so each of its searches runs the statements."""
    structured, vector = await open_stores(pg[0], DIM)
    assert isinstance(vector, PostgresVectorStore)
    vector.backend.cache_rows = 0
    yield vector
    await structured.close()
    await vector.close()


@pytest.fixture
def statements(pg: tuple[MemorySettings, PostgresVectorStore],
               monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What the store reads: its counts, candidate statements and fetches of rows."""
    vector = pg[1]
    sent: list[str] = []
    real_fetch, real_rows = vector._fetch, vector._fetch_rows

    async def fetch(statement: Any) -> Any:
        sent.append("statement")
        return await real_fetch(statement)

    async def rows(owners: Any) -> Any:
        sent.append("rows")
        return await real_rows(owners)

    monkeypatch.setattr(vector, "_fetch", fetch)
    monkeypatch.setattr(vector, "_fetch_rows", rows)
    return sent


async def _fill(vector: PostgresVectorStore, owner: str, n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    ids = []
    for i in range(n):
        r = await vector.store(owner, _text(rng, i), embedding=_vec(rng), threshold=0.99,
                               metadata={"k": "ab"[i % 2]})
        ids.append(r.memory.id)
    return ids


async def _both(vector: PostgresVectorStore, other: PostgresVectorStore, owners: Any,
                query: str, **kw: Any) -> list[tuple[str, float, float]]:
    """The hits of ``vector`` (asserted equal to those of ``other``'s statements)."""
    mine = _seen(await vector.search(owners, query, limit=15, **kw))
    assert _alike(mine, _seen(await other.search(owners, query, limit=15, **kw)))
    return mine


async def test_two_searches_reading_the_same_token_keep_the_rows_and_the_third_runs_no_statement(
        pg: tuple[MemorySettings, PostgresVectorStore], other: PostgresVectorStore,
        statements: list[str]) -> None:
    vector = pg[1]
    await _fill(vector, "o", 40, 1)
    q = _vec(np.random.default_rng(2))
    now = utcnow()
    for _ in range(2):
        await _both(vector, other, "o", "deploy staging", embedding=q, now=now)
    assert "rows" in statements
    statements.clear()
    for where in (None, {"k": "a"}):
        await _both(vector, other, "o", "deploy staging", embedding=q, now=now, filter=where)
        await _both(vector, other, "o", "部署 lake", now=now, filter=where)

        async def embed(text: str, q: list[float] = q) -> list[float]:
            return q

        await _both(vector, other, "o", "alpha denver", embed=embed, now=now, filter=where)
    assert statements == []  # counts only: no statement after them


async def test_the_process_own_writes_keep_its_rows_current(
        pg: tuple[MemorySettings, PostgresVectorStore], other: PostgresVectorStore,
        statements: list[str]) -> None:
    vector = pg[1]
    ids = await _fill(vector, "o", 30, 3)
    rng = np.random.default_rng(4)
    q = _vec(rng)
    now = utcnow()
    for _ in range(2):
        await vector.search("o", "kubernetes replica", embedding=q, now=now)
    statements.clear()
    added = await vector.store("o", "kubernetes replica in denver", embedding=q)
    await vector.update("o", ids[0], "alpha lake staging moved", embedding=_vec(rng))
    await vector.update("o", ids[1], "beta lake kept vector", metadata={"k": "z"})
    await vector.supersede_memory("o", ids[2], "kubernetes 1.29 replica",
                                  embedding=_vec(rng))
    assert await vector.delete("o", ids[3])
    await vector.store_many("o", ["replica lake one", "部署 two"],
                            embeddings=[_vec(rng), _vec(rng)])
    statements.clear()
    hits = await _both(vector, other, "o", "kubernetes replica lake", embedding=q, now=now)
    assert hits[0][0] == added.memory.id
    await _both(vector, other, "o", "lake", embedding=q, now=now, filter={"k": "z"})
    await _both(vector, other, "o", "部署", now=now)
    assert statements == []  # the rows followed every write: none fetched again


async def test_another_process_write_is_seen_at_once(
        pg: tuple[MemorySettings, PostgresVectorStore], other: PostgresVectorStore,
        statements: list[str]) -> None:
    vector = pg[1]
    await _fill(vector, "o", 20, 5)
    q = _vec(np.random.default_rng(6))
    for _ in range(3):
        await vector.search("o", "denver", embedding=q)
    statements.clear()
    new = await other.store("o", "denver denver denver", embedding=q)
    hits = await _both(vector, other, "o", "denver", embedding=q)
    assert hits[0][0] == new.memory.id
    assert statements == ["statement"]  # the kept rows are stale: the statements ran
    await other.forget("o")
    assert await vector.search("o", "denver", embedding=q) == []


async def test_a_write_rolled_back_leaves_no_trace_in_the_kept_rows(
        pg: tuple[MemorySettings, PostgresVectorStore], other: PostgresVectorStore) -> None:
    vector = pg[1]
    await _fill(vector, "o", 20, 7)
    q = _vec(np.random.default_rng(8))
    for _ in range(2):
        await vector.search("o", "alpha", embedding=q)

    class Undone(Exception):
        pass

    with pytest.raises(Undone):
        async with vector.backend.unit():
            await vector.store("o", "alpha rolled back", embedding=q)
            assert (await vector.search("o", "alpha", embedding=q))[0].memory.content == \
                "alpha rolled back"  # the unit sees its own write
            raise Undone
    for _ in range(3):
        hits = await _both(vector, other, "o", "alpha", embedding=q)
        assert "alpha rolled back" not in {h.memory.content for h in
                                           await vector.search("o", "alpha", embedding=q)}
        assert hits


async def test_searches_of_several_owners_and_writes_in_turn_find_what_the_statements_find(
        pg: tuple[MemorySettings, PostgresVectorStore], other: PostgresVectorStore) -> None:
    vector = pg[1]
    rng = np.random.default_rng(9)
    ids = {o: await _fill(vector, o, 15, s) for s, o in enumerate(("me", "team"))}
    now = utcnow()
    for step in range(24):
        owner = ("me", "team")[step % 2]
        writer = other if step % 3 == 0 else vector
        if step % 4 == 1:
            await writer.update(owner, ids[owner][step % 5], _text(rng, step),
                                embedding=_vec(rng))
        elif step % 4 == 2:
            assert await writer.delete(owner, ids[owner].pop(step % 5))
        else:
            ids[owner].append((await writer.store(owner, _text(rng, step),
                                                  embedding=_vec(rng))).memory.id)
        q = _vec(rng)
        await _both(vector, other, ["me", "team"], _text(rng, step), embedding=q, now=now)
        await _both(vector, other, "me", _text(rng, step), embedding=q, now=now)


async def test_owners_larger_than_the_setting_allows_are_not_kept(
        pg: tuple[MemorySettings, PostgresVectorStore], statements: list[str]) -> None:
    vector = pg[1]
    await _fill(vector, "o", 12, 10)
    vector.backend.cache_rows = 10
    q = _vec(np.random.default_rng(11))
    for _ in range(3):
        await vector.search("o", "alpha", embedding=q)
    assert "rows" not in statements and vector.kept() == {}
    # kept, then grown past the limit by the process's own writes: no longer kept
    vector.backend.cache_rows = 13
    for _ in range(2):
        await vector.search("o", "alpha", embedding=q)
    assert vector.kept() == {"o": 12}
    await vector.store("o", "alpha one more", embedding=q)
    await vector.store("o", "beta two more", embedding=_vec(np.random.default_rng(12)))
    assert vector.kept() == {"o": 14}
    await vector.search("o", "alpha", embedding=q)
    assert vector.kept() == {}
