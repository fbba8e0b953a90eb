"""What PostgreSQL keeps beside the memories (owner counts, term document frequency),
the weighted keyword order, and very long queries."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest

from dream_memory_actor.config import MemorySettings
from dream_memory_actor.models import utcnow
from dream_memory_actor.storage.postgres import PostgresVectorStore
from dream_memory_actor.storage.postgres.plan import SearchPlan
from tests.conftest import DIM
from tests.postgres.conftest import bulk as _bulk


async def test_the_owner_count_follows_every_write(
        pg: tuple[MemorySettings, PostgresVectorStore]) -> None:
    """Insert, merge, delete and bulk insert keep the count the plan reads exact."""
    _, vector = pg

    async def counted(owner: str) -> tuple[int, int]:
        async with vector.backend.connection() as conn:
            real = await conn.fetchval(
                f"SELECT count(*) FROM {vector.backend.schema}.memories WHERE owner_id = $1",
                owner)
        return await vector.count(owner), int(real)

    a = await vector.store("o", "first memory", embedding=[1.0] + [0.0] * (DIM - 1))
    await vector.store("o", "second memory", embedding=[0.0, 1.0] + [0.0] * (DIM - 2))
    merged = await vector.store("o", "FIRST memory ", embedding=[1.0] + [0.0] * (DIM - 1))
    assert merged.merged and await counted("o") == (2, 2)
    await _bulk(vector, "o", 25, 21)
    assert await counted("o") == (27, 27)
    assert await vector.delete("o", a.memory.id) and not await vector.delete("o", a.memory.id)
    assert await counted("o") == (26, 26) and await counted("nobody") == (0, 0)
    plan = await vector.search_plan(["o", "nobody"])
    assert plan.owner_rows == 26


async def test_the_count_migration_counts_existing_memories(
        pg: tuple[MemorySettings, PostgresVectorStore], pg_dsn: str) -> None:
    """A schema from before the count table gets it filled from the rows it holds."""
    import asyncpg

    from dream_memory_actor.storage.postgres.migrations import migrate

    settings, vector = pg
    s = settings.postgres_schema
    await _bulk(vector, "a", 30, 31)
    await _bulk(vector, "b", 7, 32)
    conn = await asyncpg.connect(pg_dsn)
    try:
        await conn.execute(f"DROP TABLE {s}.owner_memory_counts, {s}.term_df")
        await conn.execute(f"DROP SEQUENCE {s}.owner_versions")
        await conn.execute(f"DELETE FROM {s}.schema_migrations WHERE version IN (3, 4, 22)")
        assert await migrate(conn, s) == [3, 4, 22]
    finally:
        await conn.close()
    assert (await vector.count("a"), await vector.count("b")) == (30, 7)


async def _df_table(vector: PostgresVectorStore) -> dict[tuple[str, str], int]:
    async with vector.backend.connection() as conn:
        rows = await conn.fetch(f"SELECT owner_id, term, df FROM {vector.backend.schema}.term_df")
    return {(r["owner_id"], r["term"]): r["df"] for r in rows}


async def _df_recounted(vector: PostgresVectorStore) -> dict[tuple[str, str], int]:
    from collections import Counter

    from dream_memory_actor.text import terms

    async with vector.backend.connection() as conn:
        rows = await conn.fetch(f"SELECT owner_id, content FROM {vector.backend.schema}.memories")
    return dict(Counter((r["owner_id"], t) for r in rows for t in terms(r["content"])))


async def test_term_document_frequency_follows_every_write(
        pg: tuple[MemorySettings, PostgresVectorStore]) -> None:
    _, vector = pg
    e1, e2 = [1.0] + [0.0] * (DIM - 1), [0.0, 1.0] + [0.0] * (DIM - 2)
    a = await vector.store("o", "Deploy the cluster with Helm", embedding=e1)
    await vector.store("o", "helm chart review", embedding=e2)
    await vector.store("p", "Helm in another owner")
    assert (await _df_table(vector))[("o", "helm")] == 2
    merged = await vector.store("o", "the cluster is deployed by Helm charts", embedding=e1)
    assert merged.merged  # the merged text keeps both sides' terms
    await vector.bulk_insert("o", [(f"bulk helm note {i % 3}", None, utcnow()) for i in range(9)])
    assert await _df_table(vector) == await _df_recounted(vector)
    assert await vector.delete("o", a.memory.id)
    df = await _df_table(vector)
    assert df == await _df_recounted(vector) and ("o", "deploy") not in df  # gone with its row
    stats = await vector._term_stats(["o", "p"], ["helm", "note", "absent", "helm"])
    assert stats.docs == 11 and stats.df == {"helm": 11, "note": 9}
    assert stats.table_docs is not None and stats.table_docs >= 0
    assert (await vector._term_stats(["p"], ["helm"])).df == {"helm": 1}


async def test_the_term_migration_counts_existing_memories(
        pg: tuple[MemorySettings, PostgresVectorStore], pg_dsn: str) -> None:
    import asyncpg

    from dream_memory_actor.storage.postgres.migrations import migrate

    settings, vector = pg
    s = settings.postgres_schema
    await _bulk(vector, "a", 30, 41)
    await vector.store("b", "部署系统 on Kubernetes, twice: Kubernetes")
    want = await _df_recounted(vector)
    conn = await asyncpg.connect(pg_dsn)
    try:
        await conn.execute(f"DROP TABLE {s}.term_df")
        await conn.execute(f"DELETE FROM {s}.schema_migrations WHERE version = 4")
        assert await migrate(conn, s) == [4]
    finally:
        await conn.close()
    assert await _df_table(vector) == want and want[("b", "kubernetes")] == 1


@pytest.mark.parametrize("mode", ["trigram", "owner-scan", "window"])
async def test_keyword_candidates_follow_the_weighted_sum_then_newest(
        pg: tuple[MemorySettings, PostgresVectorStore], mode: str) -> None:
    """A rare term outweighs two common ones: its memories come first, as the weighted
    reference orders them (sum of the weights of contained terms, newest, id)."""
    _, vector = pg
    rng = np.random.default_rng(51)
    texts = ([f"rare thing {i}" for i in range(30)] + [f"common usual {i}" for i in range(60)]
             + [f"common {i}" for i in range(60)] + [f"rare common usual {i}" for i in range(5)])
    start = utcnow()
    ats = [start - timedelta(seconds=int(s)) for s in rng.permutation(len(texts))]
    await vector.bulk_insert("w", [(t, None, at) for t, at in zip(texts, ats, strict=True)])
    terms, weights = ["common", "usual", "rare"], [0.5, 0.7, 3.0]
    stats = await vector._term_stats(["w"], terms)
    assert stats.df == {"common": 125, "usual": 65, "rare": 35} and stats.docs == 155
    plan = SearchPlan(155, 155, None, "scan" if mode == "owner-scan" else "trigram",
                      recent_window=mode == "window")
    ids = {}
    async with vector.backend.connection() as conn:
        for r in await conn.fetch(f"SELECT id, content FROM {vector.backend.schema}.memories"):
            ids[r["content"]] = str(r["id"])
        for k in (3, 20, 50):
            sql, args = vector.statement(["w"], terms, None, plan, vector_k=0, keyword_k=k,
                                         weights=weights)
            got = {r["content"] for r in await conn.fetch(sql, *args)}
            ref = sorted(((-sum(w for t, w in zip(terms, weights, strict=True) if t in x),
                           -at.timestamp(), ids[x], x) for x, at in zip(texts, ats, strict=True)
                          if any(t in x for t in terms)))[:k]
            assert got == {x for *_, x in ref}, k
    # the search path: the same candidates through _candidates with these weights
    cands = await vector._candidates(["w"], terms, None, vector_k=0, keyword_k=20,
                                     weights=weights, stats=stats)
    assert sum("rare" in c.content for c in cands) == 20


def _long_queries() -> dict[str, str]:
    rng = np.random.default_rng(61)
    words, size = [], 0
    while True:
        w = "w" + "".join(chr(97 + int(c)) for c in rng.integers(0, 26, size=7))
        if size + len(w) + 1 > 32 * 1024:
            break
        words.append(w)
        size += len(w) + 1
    han = "".join(chr(int(c)) for c in rng.integers(0x4E00, 0x9FA5, size=6000))
    return {"words": " ".join(words), "chinese": han}


@pytest.mark.parametrize("kind", ["words", "chinese"])
async def test_very_long_queries_search_large_and_small_owners(
        pg: tuple[MemorySettings, PostgresVectorStore], kind: str) -> None:
    """A 32 KiB query of distinct words (~3,600 terms) or 6,000 Chinese characters
    (~6,000 bigrams) searches an owner of 5,200 memories (trigram path) and one of 20
    (owner rows) without failing; a memory holding the query's first terms is found."""
    from dream_memory_actor.text import terms as text_terms

    _, vector = pg
    query = _long_queries()[kind]
    first = text_terms(query)[:3]
    assert len(query.encode()) <= 32 * 1024 and len(text_terms(query)) > 3000
    rng = np.random.default_rng(62)
    now = utcnow()
    for owner, n in (("large", 5200), ("small", 20)):
        rows = [(f"plain memory {i}", list(rng.normal(size=DIM)), now) for i in range(n - 1)]
        await vector.bulk_insert(owner, [*rows, (" ".join(first), None, now)])
    async with vector.backend.connection() as conn:
        await conn.execute(f"ANALYZE {vector.backend.schema}.memories")
    emb = [float(x) for x in rng.normal(size=DIM)]
    for owner in ("large", "small"):
        plan = await vector.search_plan([owner], text_terms(query))
        assert plan.keyword == ("trigram" if owner == "large" else "scan")
        hits = await vector.search(owner, query, embedding=emb, limit=5)
        assert len(hits) == 5 and {h.memory.owner for h in hits} == {owner}
        keyword = await vector.search(owner, query, limit=5)
        assert keyword[0].memory.content == " ".join(first)


async def test_a_batch_chooses_its_near_read_path_once(
        pg: tuple[MemorySettings, PostgresVectorStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store_many reads the owner's counts for its near reads once, not once a text;
    outside a write each near read decides for itself."""
    from dream_memory_actor.storage.postgres import vector as module

    _, vector = pg
    await _bulk(vector, "o", 30, 5)
    calls = []
    real = module.__dict__["term_stats"]

    async def counted(*args: object, **kwargs: object) -> object:
        calls.append(args[2])
        return await real(*args, **kwargs)

    monkeypatch.setattr(module, "term_stats", counted)
    rng = np.random.default_rng(8)
    got = await vector.store_many(
        "o", [f"batch text {i}" for i in range(12)],
        embeddings=[list(rng.normal(size=DIM)) for _ in range(12)])
    assert len(got) == 12
    assert calls == [["o"]]
    calls.clear()
    await vector._rows("o", near=(list(rng.normal(size=DIM)), 3))
    await vector._rows("o", near=(list(rng.normal(size=DIM)), 3))
    assert calls == [["o"], ["o"]]
