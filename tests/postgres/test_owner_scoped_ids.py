"""Migration 5 on a schema written before it: rule, fact and pending ids become unique
per owner, and the rows already there keep their ids."""

from __future__ import annotations

import asyncpg
import pytest

from dream_memory_actor.storage.postgres import migrations
from tests.conftest import fresh_schema


async def test_an_existing_schema_gets_owner_scoped_ids(pg_dsn: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    schema = fresh_schema()
    conn = await asyncpg.connect(pg_dsn)
    try:
        with monkeypatch.context() as mp:  # the schema as the version before migration 5 left it
            mp.setattr(migrations, "MIGRATIONS", [m for m in migrations.MIGRATIONS if m[0] < 5])
            await migrations.migrate(conn, schema)
        for table in ("rules", "facts"):
            await conn.execute(
                f"INSERT INTO {schema}.{table} (id, owner_id, content, content_hash, source, "
                f"created_at) VALUES ('x1', 'bob', 'bob''s', 'h', 'user', now())")
        await conn.execute(
            f"INSERT INTO {schema}.pending (id, owner_id, kind, content, confidence, source, "
            f"created_at, fingerprint) VALUES ('x1', 'bob', 'fact', 'c', 0.5, 's', now(), 'f')")
        assert 5 in await migrations.migrate(conn, schema)
        for table in ("rules", "facts"):
            await conn.execute(
                f"INSERT INTO {schema}.{table} (id, owner_id, content, content_hash, source, "
                f"created_at) VALUES ('x1', 'alice', 'alice''s', 'h', 'user', now())")
            with pytest.raises(asyncpg.UniqueViolationError):
                await conn.execute(
                    f"INSERT INTO {schema}.{table} (id, owner_id, content, content_hash, source, "
                    f"created_at) VALUES ('x1', 'bob', 'other', 'h2', 'user', now())")
            owners = await conn.fetch(
                f"SELECT owner_id FROM {schema}.{table} WHERE id = 'x1' ORDER BY owner_id")
            assert [r["owner_id"] for r in owners] == ["alice", "bob"]
        await conn.execute(
            f"INSERT INTO {schema}.pending (id, owner_id, kind, content, confidence, source, "
            f"created_at, fingerprint) VALUES ('x1', 'alice', 'fact', 'c', 0.5, 's', now(), 'f')")
        assert await migrations.migrate(conn, schema) == []  # applied once
    finally:
        await conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        await conn.close()
