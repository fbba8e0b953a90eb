"""The search text PostgreSQL keeps for a memory (``text.word_starts``) finds a term
where ``text.occurs`` finds it, in the test of an owner's rows (a prefix query of its
runs as a tsvector, a CJK term's substring test) and in the ``LIKE`` the trigram index
serves; migration 19 rewrites the rows written before, and migration 20 gives them
their runs as a tsvector."""

from __future__ import annotations

import asyncpg
import pytest

from dream_memory_actor.config import MemorySettings
from dream_memory_actor.storage.postgres import PostgresVectorStore, migrations
from dream_memory_actor.storage.postgres.search_text import search_text
from dream_memory_actor.storage.postgres.statements import Params, found_in_row, needle
from dream_memory_actor.text import escape_like, fold, occurs
from tests.conftest import fresh_schema

TEXTS = ["ate at the harbour", "we ate", "create", "create, then ate", "x-ate", "(ate)",
         "line\nate", "\"ate\"", "ateliers", "crate ate", "caté ate", "écrate", "用ate",
         "ate", "a t e", "tab\tate", "dots...ate", "créate", "don't", "l'ate", "x²ate",
         "①ate", "系统部署ate", "it’s ate", "ate_x", "100%ate", "a\u0301te",
         # a CJK run too long for a lexeme, and a run longer than a term's 64 characters
         "系统" * 400 + "部署 ate", "x" * 100 + " t" + "e" * 70]
TERMS = ["ate", "at", "caté", "t", "s", "don't", "部署", "统", "x", "te", "'t", "x" * 64,
         "t" + "e" * 63]


async def test_the_search_text_finds_a_term_where_occurs_does(
        pg: tuple[MemorySettings, PostgresVectorStore]) -> None:
    settings, vector = pg
    s = settings.postgres_schema
    ids = {}
    for i, text in enumerate(TEXTS):  # an owner each: no text is judged another's duplicate
        r = await vector.store(f"o{i}", "memory", embedding=None, context=text)
        ids[r.memory.id] = fold(f"memory {text}")
    async with vector.backend.connection() as conn:
        for term in TERMS:
            p = Params()
            sql = f"""SELECT id::text, {found_in_row(p, term)} AS scan,
                             search_text LIKE {p('%' + escape_like(needle(term)) + '%')}
                             ESCAPE '\\' AS indexed
                      FROM {s}.memory_text"""
            rows = await conn.fetch(sql, *p.values)
            assert len(rows) == len(TEXTS)
            for r in rows:
                want = occurs(term, ids[r["id"]])
                assert (r["scan"], r["indexed"]) == (want, want), (term, ids[r["id"]])


async def test_the_migration_rewrites_the_search_text_of_earlier_rows(
        pg_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    schema = fresh_schema()
    conn = await asyncpg.connect(pg_dsn)
    written = [("11111111-1111-1111-1111-111111111111", "We don't deploy on Fridays", None),
               ("22222222-2222-2222-2222-222222222222", "Caroline: congrats!",
                "8 May 2023\nMelanie: I got the job")]
    try:
        with monkeypatch.context() as mp:  # the schema as migration 18 left it
            mp.setattr(migrations, "MIGRATIONS", [m for m in migrations.MIGRATIONS if m[0] < 19])
            await migrations.migrate(conn, schema)
        for mid, content, context in written:  # the folded text, as it was kept then
            await conn.execute(
                f"""INSERT INTO {schema}.memories (id, owner_id, content, content_hash,
                        metadata, created_at, updated_at, context)
                    VALUES ($1, 'alice', $2, 'h', '{{}}'::jsonb, now(), now(), $3)""",
                mid, content, context)
            await conn.execute(
                f"""INSERT INTO {schema}.memory_text (id, owner_id, search_text, updated_at)
                    VALUES ($1, 'alice', $2, now())""",
                mid, fold(content if context is None else content + " " + context))
        monkeypatch.setattr("dream_memory_actor.storage.postgres.search_text.BACKFILL_BATCH", 1)
        assert await migrations.migrate(conn, schema) == [
            v for v, _, _ in migrations.MIGRATIONS if v >= 19]
        got = dict(await conn.fetch(f"SELECT id::text, search_text FROM {schema}.memory_text"))
        assert got == {mid: search_text(content, context) for mid, content, context in written}
        assert got["11111111-1111-1111-1111-111111111111"] == " we don't deploy on fridays t"
        words = dict(await conn.fetch(
            f"SELECT id::text, search_words::text FROM {schema}.memory_text"))
        assert words["11111111-1111-1111-1111-111111111111"] == (
            "'deploy' 'don''t' 'fridays' 'on' 't' 'we'")
    finally:
        await conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        await conn.close()


async def test_a_search_text_too_long_for_a_tsvector_is_tested_as_text(
        pg: tuple[MemorySettings, PostgresVectorStore]) -> None:
    settings, vector = pg
    s = settings.postgres_schema
    # a memory as large as the settings may allow: more distinct word starts than a
    # tsvector holds (1 MiB of lexemes), which would refuse the row
    text = search_text(" ".join(f"w{i}" for i in range(200_000)), None)
    assert len(text.encode()) - text.count(" ") >= 1024 * 1024
    async with vector.backend.connection() as conn:
        await conn.execute(
            f"""INSERT INTO {s}.memories (id, owner_id, content, content_hash, metadata,
                    created_at, updated_at)
                VALUES ('33333333-3333-3333-3333-333333333333', 'big', 'a large memory', 'h',
                        '{{}}'::jsonb, now(), now())""")
        await conn.execute(
            f"""INSERT INTO {s}.memory_text (id, owner_id, search_text, updated_at)
                VALUES ('33333333-3333-3333-3333-333333333333', 'big', $1, now())""", text)
        for term, want in (("w199999", True), ("w7", True), ("w200000", False), ("x", False)):
            p = Params()
            got = await conn.fetchrow(
                f"""SELECT search_words IS NULL AS unlisted, {found_in_row(p, term)} AS found
                    FROM {s}.memory_text WHERE owner_id = 'big'""", *p.values)
            assert (got["unlisted"], got["found"]) == (True, want), term
