"""Reads of memories kept apart from them (migration 18): noting a batch of reads writes
no new version of a memory row, and reads noted before the migration stay."""

from __future__ import annotations

from datetime import timedelta

import asyncpg
import pytest

from dream_memory_actor.config import MemorySettings
from dream_memory_actor.models import utcnow
from dream_memory_actor.storage.postgres import PostgresVectorStore, migrations
from tests.conftest import fresh_schema


async def test_noting_reads_leaves_the_memory_rows_as_they_are(
        pg: tuple[MemorySettings, PostgresVectorStore]) -> None:
    settings, vector = pg
    s = settings.postgres_schema
    a = await vector.store("alice", "The VPN gateway is vpn.example.org", embedding=None)
    b = await vector.store("alice", "The fax number is 555-0100", embedding=None)
    other = await vector.store("bob", "Bob's desk is on the third floor", embedding=None)
    async with vector.backend.connection() as conn:
        before = await conn.fetch(f"SELECT id, xmin::text AS v FROM {s}.memories ORDER BY id")
    at = utcnow()
    # another owner's memory and an id that is no memory are passed over
    await vector.note_reads("alice", {a.memory.id: at, b.memory.id: at,
                                      other.memory.id: at,
                                      "00000000-0000-0000-0000-000000000000": at})
    await vector.note_reads("alice", {a.memory.id: at - timedelta(days=1)})  # latest stays
    async with vector.backend.connection() as conn:
        after = await conn.fetch(f"SELECT id, xmin::text AS v FROM {s}.memories ORDER BY id")
    assert [tuple(r) for r in after] == [tuple(r) for r in before]
    assert await vector.last_reads("alice") == {a.memory.id: at, b.memory.id: at}
    assert await vector.last_reads("bob") == {}
    await vector.delete("alice", b.memory.id)
    assert await vector.last_reads("alice") == {a.memory.id: at}
    await vector.forget("alice")
    assert await vector.last_reads("alice") == {}


async def test_reads_noted_before_the_migration_stay(pg_dsn: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    schema = fresh_schema()
    conn = await asyncpg.connect(pg_dsn)
    read_at = utcnow().replace(microsecond=0)
    try:
        with monkeypatch.context() as mp:  # the schema as migration 17 left it
            mp.setattr(migrations, "MIGRATIONS", [m for m in migrations.MIGRATIONS if m[0] < 18])
            await migrations.migrate(conn, schema)
        for mid, at in (("11111111-1111-1111-1111-111111111111", read_at),
                        ("22222222-2222-2222-2222-222222222222", None)):
            await conn.execute(
                f"""INSERT INTO {schema}.memories (id, owner_id, content, content_hash,
                        metadata, created_at, updated_at, last_read_at)
                    VALUES ($1, 'alice', 'text', 'h', '{{}}'::jsonb, now(), now(), $2)""",
                mid, at)
        assert await migrations.migrate(conn, schema) == [
            v for v, _, _ in migrations.MIGRATIONS if v >= 18]
        rows = await conn.fetch(f"SELECT id::text, owner_id, read_at FROM {schema}.memory_reads")
        assert [tuple(r) for r in rows] == [
            ("11111111-1111-1111-1111-111111111111", "alice", read_at)]
        assert not await conn.fetchval(
            """SELECT count(*) FROM information_schema.columns
               WHERE table_schema = $1 AND table_name = 'memories'
                 AND column_name = 'last_read_at'""", schema)
    finally:
        await conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        await conn.close()
