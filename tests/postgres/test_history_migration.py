"""Migration 6 on a schema written before it: the status values already there start their
history, the pending items already queued load, and history is kept from then on."""

from __future__ import annotations

from datetime import timedelta

import asyncpg
import pytest

from dream_memory_actor.config import MemorySettings
from dream_memory_actor.models import utcnow
from dream_memory_actor.storage import open_stores
from dream_memory_actor.storage.postgres import migrations
from tests.conftest import fresh_schema


async def test_an_existing_schema_gets_history(pg_dsn: str,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    schema = fresh_schema()
    set_at = utcnow() - timedelta(hours=1)
    conn = await asyncpg.connect(pg_dsn)
    try:
        with monkeypatch.context() as mp:  # the schema as the version before migration 6 left it
            mp.setattr(migrations, "MIGRATIONS", [m for m in migrations.MIGRATIONS if m[0] < 6])
            await migrations.migrate(conn, schema)
        await conn.execute(
            f"INSERT INTO {schema}.status (owner_id, key, value, updated_at) "
            "VALUES ('bob', 'project', 'alpha', $1)", set_at)
        await conn.execute(
            f"INSERT INTO {schema}.pending (id, owner_id, kind, content, confidence, source, "
            f"created_at, fingerprint) VALUES ('p1', 'bob', 'fact', 'c', 0.5, 's', now(), 'f')")
        assert 6 in await migrations.migrate(conn, schema)
    finally:
        await conn.close()
    settings = MemorySettings(backend="postgres", postgres_dsn=pg_dsn, postgres_schema=schema)
    structured, vector = await open_stores(settings, None)
    try:
        await structured.setup()
        snap = await structured.load("bob")
        assert [p.id for p in snap.pending] == ["p1"] and snap.pending[0].supersedes is None
        [change] = await structured.status_history("bob", "project")
        assert (change.value, change.at) == ("alpha", set_at)
        await structured.set_status("bob", "project", "beta")
        past = await structured.load_as_of("bob", set_at + timedelta(minutes=1))
        assert dict(past.status) == {"project": "alpha"}
    finally:
        await structured.close()
        await vector.close()
        conn = await asyncpg.connect(pg_dsn)
        await conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        await conn.close()
