"""What is specific to PostgreSQL: migrations, index use, errors, the embedded default."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import numpy as np
import pytest

from dream_memory_actor.config import MemorySettings
from dream_memory_actor.errors import BackendUnavailable, ConfigurationError, SchemaError
from dream_memory_actor.models import utcnow
from dream_memory_actor.storage import open_stores
from dream_memory_actor.storage.postgres import PostgresVectorStore
from dream_memory_actor.storage.postgres.hnsw import index_sql
from dream_memory_actor.storage.postgres.migrations import MIGRATIONS
from dream_memory_actor.storage.postgres.plan import (
    KEYWORD_SCAN_MAX,
    RECENT_WINDOW,
    SearchPlan,
    prefer_exact,
    prefer_keyword_scan,
    search_plan,
    window_may_answer,
)
from tests.conftest import DIM, fresh_schema
from tests.postgres.conftest import bulk as _bulk


async def test_migrations_are_recorded_once(pg: tuple[MemorySettings, PostgresVectorStore]
                                            ) -> None:
    settings, vector = pg
    await vector.setup()  # again: nothing new
    structured2, vector2 = await open_stores(settings, DIM)
    await vector2.setup()
    async with vector.backend.connection() as conn:
        rows = await conn.fetch(
            f"SELECT version, name FROM {settings.postgres_schema}.schema_migrations "
            "ORDER BY version")
    assert [(r["version"], r["name"]) for r in rows] == [(v, n) for v, n, _ in MIGRATIONS]
    await structured2.close()
    await vector2.close()


async def _toasted(settings: MemorySettings, vector: PostgresVectorStore) -> dict[str, bool]:
    """Which of the memory's values are kept in the TOAST table."""
    async with vector.backend.connection() as conn:
        row = await conn.fetchrow(
            "SELECT pg_column_toast_chunk_id(embedding) IS NOT NULL AS embedding, "
            "pg_column_toast_chunk_id(content) IS NOT NULL AS content, "
            "pg_column_toast_chunk_id(context) IS NOT NULL AS context, "
            f"pg_column_size(m) AS size FROM {settings.postgres_schema}.memories m")
    return dict(row)


async def _store_with_context(pg_dsn: str, words: int
                              ) -> tuple[MemorySettings, Any, PostgresVectorStore]:
    """A fresh schema holding one memory of 20 words whose context has ``words`` words."""
    settings = MemorySettings(backend="postgres", postgres_dsn=pg_dsn,
                              postgres_schema=fresh_schema())
    structured, vector = await open_stores(settings, 384)
    await vector.setup()
    rng = np.random.default_rng(3)
    text = ["".join(rng.choice(list("abcdefghijklmnopqrstuvwxyz"), 6))
            for _ in range(20 + words)]
    await vector.store("alice", " ".join(text[:20]), embedding=list(rng.standard_normal(384)),
                       context="8 May 2023\n" + " ".join(text[20:]))
    return settings, structured, vector


async def test_a_memory_s_vector_stays_in_its_row_when_its_texts_are_long(
        pg_dsn: str) -> None:
    """A search reads the vector of every memory it scans: a row made longer than half a
    page by its content and context moves those texts to the TOAST table, not the vector
    (migrations 17 and 21)."""
    settings, structured, vector = await _store_with_context(pg_dsn, 700)
    moved = await _toasted(settings, vector)
    assert moved == {"embedding": False, "content": False, "context": True,
                     "size": moved["size"]}  # the context went out; the vector did not
    await structured.close()
    await vector.close()


async def test_a_turn_with_its_context_keeps_its_texts_in_its_row(pg_dsn: str) -> None:
    """A search sends the texts of each candidate: a memory with a context of a hundred
    words, longer than 2 kB with its vector, keeps them in its row (migration 21)."""
    settings, structured, vector = await _store_with_context(pg_dsn, 100)
    kept = await _toasted(settings, vector)
    assert kept["size"] > 2100  # more than the 2 kB past which texts went out before
    assert kept == {"embedding": False, "content": False, "context": False,
                    "size": kept["size"]}
    await structured.close()
    await vector.close()


async def test_newer_schema_than_library_is_refused(pg: tuple[MemorySettings,
                                                                PostgresVectorStore]) -> None:
    settings, vector = pg
    async with vector.backend.connection() as conn:
        await conn.execute(
            f"INSERT INTO {settings.postgres_schema}.schema_migrations (version, name) "
            "VALUES (9999, 'from the future')")
    _, fresh = await open_stores(settings, DIM)
    with pytest.raises(SchemaError):
        await fresh.setup()
    await fresh.close()


async def test_using_an_unmigrated_schema_is_a_schema_error(pg_dsn: str) -> None:
    settings = MemorySettings(backend="postgres", postgres_dsn=pg_dsn,
                              postgres_schema=fresh_schema())
    structured, vector = await open_stores(settings, DIM)
    with pytest.raises(SchemaError):
        await structured.load("alice")
    await structured.close()
    await vector.close()


@pytest.mark.parametrize("schema", ["a-b", "x; DROP TABLE y", "1abc", "ü"])
def test_schema_names_are_whitelisted(schema: str) -> None:
    with pytest.raises(ConfigurationError):
        MemorySettings(backend="postgres", postgres_schema=schema)


async def test_unreachable_server_is_backend_unavailable() -> None:
    settings = MemorySettings(backend="postgres",
                              postgres_dsn="postgresql://nobody@127.0.0.1:1/none")
    structured, vector = await open_stores(settings, DIM)
    with pytest.raises(BackendUnavailable):
        await structured.setup()
    with pytest.raises(BackendUnavailable):
        await structured.load("alice")
    await structured.close()
    await vector.close()


async def _index_of(vector: PostgresVectorStore) -> list[str]:
    async with vector.backend.connection() as conn:
        return [r["indexname"] for r in await conn.fetch(
            "SELECT indexname FROM pg_indexes WHERE schemaname = $1 AND indexname LIKE "
            "'memories_hnsw_%'", vector.backend.schema)]


async def test_the_hnsw_index_is_built_when_a_read_first_wants_it(
        pg: tuple[MemorySettings, PostgresVectorStore]) -> None:
    """A table of small owners is searched by exact scans: no index, so no insert keeps
    one up. The first read whose plan prefers the index starts its build and scans
    exactly; once it is built, reads take it."""
    _, vector = pg
    rng = np.random.default_rng(21)
    await _bulk(vector, "small", 60, 22)
    await vector.store("small", "one more memory", embedding=list(rng.normal(size=DIM)))
    await vector.search("small", "memory", embedding=list(rng.normal(size=DIM)))
    assert await _index_of(vector) == [] and not vector.backend.hnsw.ready
    await _bulk(vector, "big", 4000, 23)
    first = await vector.search_plan(["big"])  # prefers the index: exact, and builds it
    assert first.vector == "exact" and first.owner_rows == 4000
    hits = await vector.search("big", "memory", embedding=list(rng.normal(size=DIM)), limit=5)
    assert len(hits) == 5 and {h.memory.owner for h in hits} == {"big"}
    assert await vector.backend.hnsw.build()  # waits for the build the read started
    assert await _index_of(vector) == [f"memories_hnsw_{DIM}"]
    assert (await vector.search_plan(["big"])).vector == "hnsw"
    assert (await vector.search_plan(["small"])).vector == "exact"
    # Another process finds it built when it sets up.
    structured2, vector2 = await open_stores(pg[0], DIM)
    await vector2.setup()
    assert vector2.backend.hnsw.ready and (await vector2.search_plan(["big"])).vector == "hnsw"
    await structured2.close()
    await vector2.close()


async def test_an_interrupted_hnsw_build_is_made_again(
        pg: tuple[MemorySettings, PostgresVectorStore]) -> None:
    """A build stopped midway (its process closed the store) leaves an invalid index,
    which no read takes: the next build drops it and builds it again."""
    _, vector = pg
    await _bulk(vector, "big", 4000, 24)
    name = f"{vector.backend.schema}.memories_hnsw_{DIM}"
    async with vector.backend.connection() as conn:  # what a cancelled build leaves
        await conn.execute(index_sql(vector.backend.schema, DIM, concurrently=False))
        await conn.execute(
            "UPDATE pg_index SET indisvalid = false WHERE indexrelid = to_regclass($1)", name)
        assert not await vector.backend.hnsw.check(conn)
        old = await conn.fetchval("SELECT to_regclass($1)::oid", name)
    assert (await vector.search_plan(["big"])).vector == "exact"
    assert await vector.backend.hnsw.build()
    async with vector.backend.connection() as conn:
        assert await conn.fetchval("SELECT to_regclass($1)::oid", name) != old
    assert await _index_of(vector) == [f"memories_hnsw_{DIM}"]
    assert (await vector.search_plan(["big"])).vector == "hnsw"


async def test_a_build_left_running_by_a_closing_process_ends_valid(pg_dsn: str) -> None:
    """A process that closes (a CLI command ends) while its build runs leaves the build
    to the server, which finishes it: the next process finds the index built."""
    import asyncio

    import asyncpg

    settings = MemorySettings(backend="postgres", postgres_dsn=pg_dsn,
                              postgres_schema=fresh_schema())
    structured, vector = await open_stores(settings, DIM)
    await vector.setup()
    assert isinstance(vector, PostgresVectorStore)
    await _bulk(vector, "big", 4000, 25)
    s = settings.postgres_schema
    holder = await asyncpg.connect(pg_dsn)  # holds the build back while the store closes
    watcher = await asyncpg.connect(pg_dsn)
    blocker = holder.transaction()
    await blocker.start()
    try:
        await holder.execute(f"LOCK TABLE {s}.memories IN SHARE ROW EXCLUSIVE MODE")
        assert (await vector.search_plan(["big"])).vector == "exact"  # starts the build
        for _ in range(200):
            if await watcher.fetchval(
                    "SELECT count(*) FROM pg_stat_activity WHERE query LIKE "
                    "'CREATE INDEX CONCURRENTLY%' AND wait_event_type = 'Lock'"):
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the build did not start")
        await structured.close()
        await vector.close()  # the build is waiting in the server
    finally:
        await blocker.commit()
        await holder.close()
    name = f"{s}.memories_hnsw_{DIM}"
    for _ in range(200):
        if await watcher.fetchval("SELECT indisvalid FROM pg_index "
                                  "WHERE indexrelid = to_regclass($1)", name):
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError("the build was dropped with its process")
    await watcher.close()
    structured2, vector2 = await open_stores(settings, DIM)
    await vector2.setup()
    assert vector2.backend.hnsw.ready
    await structured2.close()
    await vector2.close()


async def test_vector_candidates_use_the_hnsw_index(pg: tuple[MemorySettings,
                                                               PostgresVectorStore]) -> None:
    _, vector = pg
    await _bulk(vector, "big", 4000, 1)
    await _bulk(vector, "small", 30, 2)
    query = [float(x) for x in np.random.default_rng(3).normal(size=DIM)]
    assert await vector.backend.hnsw.build()
    chosen = await vector.search_plan(["big"])
    assert chosen.vector == "hnsw"
    sql, args = vector.statement(["big"], [], query, chosen, vector_k=100, keyword_k=100)
    async with vector.backend.connection() as conn:
        plan = "\n".join(r[0] for r in await conn.fetch("EXPLAIN " + sql, *args))
    assert f"memories_hnsw_{DIM}" in plan, plan
    # and the search itself returns the owner's nearest memories
    hits = await vector.search("big", "memory", embedding=query, limit=10)
    assert len(hits) == 10 and {h.memory.owner for h in hits} == {"big"}


async def test_keyword_candidates_use_the_trigram_index(pg: tuple[MemorySettings,
                                                                   PostgresVectorStore]) -> None:
    _, vector = pg
    await _bulk(vector, "big", 4000, 4)
    sql, args = vector.statement(["big"], ["kubernetes"], None,
                                 SearchPlan(4000, 4000, None, "trigram"),
                                 vector_k=100, keyword_k=100)
    # On a table this small the planner rightly prefers the owner index; the question
    # here is whether the generated LIKE predicate (escaped, bound) *can* use the
    # trigram index, so hide the alternatives inside a rolled-back transaction.
    async with vector.backend.connection() as conn:
        tx = conn.transaction()
        await tx.start()
        try:
            await conn.execute("SET LOCAL enable_seqscan = off")
            await conn.execute(f"DROP INDEX {vector.backend.schema}.memory_text_owner_recent")
            plan = "\n".join(r[0] for r in await conn.fetch("EXPLAIN " + sql, *args))
        finally:
            await tx.rollback()
    assert "memory_text_trgm" in plan, plan


@pytest.mark.parametrize("mode", ["trigram", "owner-scan", "window", "small-window"])
@pytest.mark.parametrize("k", [40, 100])
async def test_keyword_candidates_rank_by_terms_matched_then_newest(
        pg: tuple[MemorySettings, PostgresVectorStore], k: int, mode: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Exactly the reference's choice (most terms matched, newest first), whether the
    memories containing every term fill the list (k=40: 60 do) or not (k=100), from
    the trigram index, from reading the owner's rows, or first from its newest rows
    (a window holding all 300, or only 50: too few, so the usual statement answers)."""
    from dream_memory_actor.storage.postgres import statements
    from dream_memory_actor.text import occurs

    if mode == "small-window":
        monkeypatch.setattr(statements, "RECENT_WINDOW", 50)
    plan = SearchPlan(330, 330, None, "scan" if mode == "owner-scan" else "trigram",
                      recent_window="window" in mode)
    _, vector = pg
    rng = np.random.default_rng(8)
    texts = ([f"alpha beta note {i}" for i in range(60)] + [f"alpha note {i}" for i in range(120)]
             + [f"beta only {i}" for i in range(60)] + [f"other note {i}" for i in range(60)]
             # found only inside words: no match, on every path (text.occurs)
             + [f"subalpha xbeta {i}" for i in range(30)])
    start = utcnow()
    ats = [start - timedelta(seconds=int(s)) for s in rng.permutation(len(texts))]
    await vector.bulk_insert("kw", [(t, None, at) for t, at in zip(texts, ats, strict=True)])
    terms = ["alpha", "beta"]
    sql, args = vector.statement(["kw"], terms, None, plan, vector_k=0, keyword_k=k)
    async with vector.backend.connection() as conn:
        rows = await conn.fetch(sql, *args)
    cands = [r["content"] for r in rows]
    # the window answers only when its rows hold k memories with every term
    assert {r["src"] for r in rows} == {"recent" if mode == "window" and k == 40 else "index"}
    reference = sorted(((sum(occurs(t, x) for t in terms), at, x)
                        for x, at in zip(texts, ats, strict=True)
                        if any(occurs(t, x) for t in terms)), reverse=True)[:k]
    assert not any(x.startswith("subalpha") for x in cands)
    assert len(cands) == k and set(cands) == {x for _, _, x in reference}
    if mode != "trigram":
        return
    sql, args = vector.statement(["kw"], terms, None, SearchPlan(300, 300, None, "trigram"),
                                 vector_k=0, keyword_k=k)
    async with vector.backend.connection() as conn:
        plan = json.loads(await conn.fetchval("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, *args))

    def nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
        yield node
        for child in node.get("Plans", []):
            yield from nodes(child)

    # The full ranking reads the memories containing any term: k=40 never needs it
    # (the 60 with both terms suffice), k=100 does.
    ranking = [n for n in nodes(plan[0]["Plan"]) if n.get("Relation Name") == "memory_text"
               and " OR " in n.get("Filter", "") + n.get("Recheck Cond", "")]
    assert ranking and all((n["Actual Loops"] == 0) == (k == 40) for n in ranking), plan


async def test_keyword_candidates_break_ties_by_id(
        pg: tuple[MemorySettings, PostgresVectorStore]) -> None:
    """Memories stored with one timestamp (a conversation session's turns) tie on terms
    matched and time; the cut at k keeps the smallest ids, as ranking orders them,
    not whatever order the plan reads rows in."""
    _, vector = pg
    at = utcnow()
    await vector.bulk_insert("ties", [(f"alpha tie {i}", None, at) for i in range(50)]
                             + [(f"alpha beta {i}", None, at) for i in range(5)])
    sql, args = vector.statement(["ties"], ["alpha", "beta"], None,
                                 SearchPlan(55, 55, None, "scan"), vector_k=0, keyword_k=20)
    async with vector.backend.connection() as conn:
        rows = await conn.fetch(sql, *args)
    both = [r for r in rows if "beta" in r["content"]]
    rest = sorted(str(r["id"]) for r in rows if "beta" not in r["content"])
    async with vector.backend.connection() as conn:
        ids = sorted(str(i) for i in await conn.fetchval(
            f"SELECT array_agg(id) FROM {vector.backend.schema}.memories "
            "WHERE owner_id = 'ties' AND content LIKE 'alpha tie %'"))
    assert len(both) == 5 and rest == ids[:15]


def test_exact_scan_is_chosen_for_owners_that_are_a_small_share_of_the_table() -> None:
    # exact costs ~ rows, the filtered HNSW search ~ table / rows: break-even rows**2 = 1000 * table
    assert prefer_exact(10_000, 1_000_000)  # 100 owners of 10k: exact
    assert not prefer_exact(100_000, 100_000)  # one big owner: the index
    assert prefer_exact(1_000, 1_000) and not prefer_exact(1_001, 1_001)
    assert prefer_exact(31_622, 1_000_000) and not prefer_exact(31_623, 1_000_000)
    assert prefer_exact(500, 0)  # statistics not gathered yet: the owner's own rows count


def test_keyword_scan_is_chosen_for_few_rows_or_a_small_share() -> None:
    assert prefer_keyword_scan(5_000, 5_000) and not prefer_keyword_scan(5_001, 5_001)
    assert prefer_keyword_scan(10_000, 1_000_000)  # 1% of the table
    assert not prefer_keyword_scan(10_000, 100_000)  # 10%: the trigram index
    assert not prefer_keyword_scan(60_000, 10_000_000)  # past the cap


async def test_search_chooses_exact_or_index_by_owner_share(
        pg: tuple[MemorySettings, PostgresVectorStore], monkeypatch: pytest.MonkeyPatch) -> None:
    _, vector = pg
    await _bulk(vector, "big", 4000, 11)
    await _bulk(vector, "small", 60, 12)
    assert await vector.backend.hnsw.build()
    query = [float(x) for x in np.random.default_rng(13).normal(size=DIM)]
    big, small = (await vector.search_plan(["big"], ["memory"]),
                  await vector.search_plan(["small"], ["memory"]))
    assert big.owner_rows == 4000 and small.owner_rows == 60
    assert abs(big.table_rows - 4060) <= 1 and big.table_rows == small.table_rows
    chosen: dict[str, SearchPlan] = {}
    real = vector.statement

    def spy(owners: Any, terms: Any, embedding: Any, plan: SearchPlan, **kw: Any) -> Any:
        chosen[owners[0]] = plan
        return real(owners, terms, embedding, plan, **kw)

    monkeypatch.setattr(vector, "statement", spy)
    for owner in ("big", "small"):
        hits = await vector.search(owner, "memory", embedding=query, limit=10)
        assert len(hits) == 10 and {h.memory.owner for h in hits} == {owner}
    # 60**2 <= 1000 * 4060 < 4000**2; both at most KEYWORD_SCAN_MAX rows
    assert {o: (p.vector, p.keyword) for o, p in chosen.items()} == {
        "big": ("hnsw", "scan"), "small": ("exact", "scan")}
    assert chosen["big"] == big and chosen["small"] == small
    assert KEYWORD_SCAN_MAX >= 4000
    # The exact statement: no HNSW in its plan, and exactly the nearest by cosine.
    sql, args = real(["small"], [], query, small, vector_k=10, keyword_k=10)
    async with vector.backend.connection() as conn:
        plan = "\n".join(r[0] for r in await conn.fetch("EXPLAIN " + sql, *args))
        rows = await conn.fetch(sql, *args)
        every = await conn.fetch(
            f"""SELECT id, 1 - (embedding::vector({DIM}) <=> $1::vector({DIM})) AS sim
                FROM {vector.backend.schema}.memories WHERE owner_id = 'small'""", query)
    assert "hnsw" not in plan, plan
    best = sorted(every, key=lambda r: -r["sim"])[:10]
    assert [r["id"] for r in sorted(rows, key=lambda r: -r["sim"])] == [r["id"] for r in best]
    # A store counts in the same transaction; the next search reads the new count
    await vector.store("small", "one more", embedding=[-x for x in query])
    assert (await vector.search_plan(["small"])).owner_rows == 61


def test_the_recent_window_is_tried_for_one_large_owner_whose_terms_can_fill_it() -> None:
    def window(rows: int, owners: int = 1, df: dict[str, int] | None = None) -> bool:
        return search_plan(rows, rows * owners, owners=owners, embedding=True,
                           terms=["alpha", "beta"], keyword_k=40, df=df).recent_window

    assert window(100_000) and not window(1_000)  # trigram path only: not on owner rows
    assert not window(10_000) and window(50_000)  # a cheap trigram path: not worth it
    assert not window(100_000, owners=2)  # one owner's recency index, walked in order
    common, rare = {"alpha": 4_600, "beta": 4_700}, {"alpha": 4_600, "beta": 300}
    assert window(100_000, df=common) and not window(100_000, df=rare)
    # the rarest term decides: 5000 newest rows hold ~ 5000 * df / rows of its rows
    assert window_may_answer(100_000, [800], 40) and not window_may_answer(100_000, [799], 40)
    assert RECENT_WINDOW * 800 / 100_000 == 40
    assert not window_may_answer(0, [5], 40) and not window_may_answer(10, [], 40)
    assert search_plan(10, 10, owners=1, embedding=False, terms=[], keyword_k=40) == SearchPlan(
        10, 10, None, None, False)


async def test_hnsw_search_agrees_with_exact_search(pg: tuple[MemorySettings,
                                                               PostgresVectorStore]) -> None:
    _, vector = pg
    await _bulk(vector, "big", 3000, 5)
    assert await vector.backend.hnsw.build()
    rng = np.random.default_rng(6)
    recalls = []
    for _ in range(10):
        q = rng.normal(size=DIM)
        hits = await vector.search("big", "zzzz", embedding=list(q), limit=10)
        async with vector.backend.connection() as conn:
            exact = await conn.fetch(
                f"""SELECT id FROM {vector.backend.schema}.memories WHERE owner_id = 'big'
                    ORDER BY embedding::vector({DIM}) <=> $1::vector({DIM}) LIMIT 10""",
                list(q))
        want = {str(r["id"]) for r in exact}
        recalls.append(len(want & {h.memory.id for h in hits}) / 10)
    assert np.mean(recalls) >= 0.9, recalls


async def test_embedded_default_starts_without_a_dsn(tmp_path: object) -> None:
    from pathlib import Path

    data = Path(str(tmp_path)) / "data"
    settings = MemorySettings(backend="postgres", data_dir=data, postgres_schema="dm_embedded")
    structured, vector = await open_stores(settings, None)
    await structured.setup()
    try:
        await structured.add_rule("alice", "look at security first")
        r = await vector.store("alice", "went live on Kubernetes")
        assert (await vector.get("alice", r.memory.id)).content == "went live on Kubernetes"
        assert (data / "pg" / "PG_VERSION").exists()
    finally:
        await structured.close()
        await vector.close()
        from dream_memory_actor.storage.postgres import start_embedded

        start_embedded(data / "pg", cleanup="delete").cleanup()


async def test_hnsw_settings_survive_the_pools_reset(pg: tuple[MemorySettings,
                                                                PostgresVectorStore]) -> None:
    # Regression: SET in the pool's init was undone by the RESET ALL asyncpg runs on
    # release, so filtered HNSW scans stopped at ef_search=40 rows and lost results.
    _, vector = pg
    for _ in range(3):
        async with vector.backend.connection() as conn:
            assert await conn.fetchval("SHOW hnsw.iterative_scan") == "relaxed_order"
            assert await conn.fetchval("SHOW hnsw.ef_search") == "100"


@pytest.mark.parametrize("mode", ["scan", "trigram", "window"])
async def test_memories_sharing_a_timestamp_are_cut_by_id_on_every_path(
        pg: tuple[MemorySettings, PostgresVectorStore], mode: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A bulk import gives thousands of memories one timestamp; the recent window is
    then the smallest ids among them, so what it answers is what ranking would keep."""
    from dream_memory_actor.storage.postgres import statements

    monkeypatch.setattr(statements, "RECENT_WINDOW", 20)
    _, vector = pg
    at = utcnow()
    await vector.bulk_insert("tied", [(f"alpha beta tie {i}", None, at) for i in range(50)]
                             + [(f"alpha {i}", None, at) for i in range(5)])
    plan = SearchPlan(55, 55, None, "scan" if mode == "scan" else "trigram",
                      recent_window=mode == "window")
    sql, args = vector.statement(["tied"], ["alpha", "beta"], None, plan, vector_k=0,
                                 keyword_k=10)
    async with vector.backend.connection() as conn:
        rows = await conn.fetch(sql, *args)
        both = sorted(str(i) for i in await conn.fetchval(
            f"SELECT array_agg(id) FROM {vector.backend.schema}.memories "
            "WHERE owner_id = 'tied' AND content LIKE 'alpha beta %'"))
    assert sorted(str(r["id"]) for r in rows) == both[:10]
    if mode == "window":  # 20 smallest ids of 55, ~18 of them with both terms: enough
        assert {r["src"] for r in rows} == {"recent"}


async def test_split_and_single_statement_searches_agree(
        pg: tuple[MemorySettings, PostgresVectorStore], monkeypatch: pytest.MonkeyPatch) -> None:
    """An owner's two index searches run on two connections (``split``); the
    candidates and hits are those of the one statement."""
    from dataclasses import replace

    from dream_memory_actor.storage.postgres import vector as search_module

    _, vector = pg
    await _bulk(vector, "big", 500, 8)
    assert await vector.backend.hnsw.build()  # what the forced plans take
    query = [float(x) for x in np.random.default_rng(9).normal(size=DIM)]
    now = utcnow()
    assert search_plan(100_000, 100_000, owners=1, embedding=True, terms=["a"],
                       keyword_k=40).split
    assert not search_plan(3_000, 3_000, owners=1, embedding=True, terms=["a"],
                           keyword_k=40).split  # fewer memories than SPLIT_MIN_ROWS
    results, fetches = [], []
    real = vector._fetch

    async def counted(statement: Any) -> Any:
        fetches.append(statement)
        return await real(statement)

    monkeypatch.setattr(vector, "_fetch", counted)
    for split in (False, True):
        def forced(*a: Any, split: bool = split, **kw: Any) -> SearchPlan:
            return replace(search_plan(*a, **kw), vector="hnsw", keyword="trigram",
                           split=split)

        monkeypatch.setattr(search_module, "search_plan", forced)
        hits = await vector.search("big", "memory 12", embedding=query, limit=20, now=now)
        results.append([(h.memory.id, h.score) for h in hits])
    assert results[0] == results[1] and len(results[0]) == 20
    assert len(fetches) == 3  # one statement, then two


async def test_an_hnsw_build_that_cannot_reach_the_server_fails_typed_and_waits_to_retry(
        ) -> None:
    """Asked for, a build that cannot connect raises the backend's error; started by a
    read, it is logged, the read scans exactly, and no read starts another for a while."""
    import asyncio

    from dream_memory_actor.storage.postgres.hnsw import HnswIndex
    from dream_memory_actor.storage.postgres.pool import translate

    index = HnswIndex("postgresql://dm@127.0.0.1:1/none", "dm_none", DIM, translate)
    with pytest.raises(BackendUnavailable):
        await index.build()
    assert not index.wanted()  # starts a build in the background
    first = index._task
    assert first is not None
    await asyncio.wait([first])
    assert first.result() is False and not index.ready
    assert not index.wanted() and index._task is first  # not again before RETRY_S
    await index.close()


async def test_pooled_connections_plan_statements_once(
        pg: tuple[MemorySettings, PostgresVectorStore]) -> None:
    """A search statement is prepared once per connection and runs on its generic plan
    from then on, not planned again at every execution (``pool._server_settings``)."""
    _, vector = pg
    async with vector.backend.connection() as conn:
        assert await conn.fetchval("SHOW plan_cache_mode") == "force_generic_plan"
