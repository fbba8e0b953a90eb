"""Migration 16 on a schema written before it: the decisions already in the audit trail
stay, and an undo is kept beside a confirmation (one decision and one undo per item)."""

from __future__ import annotations

import asyncpg
import pytest

from dream_memory_actor.storage.postgres import migrations
from tests.conftest import fresh_schema

ROW = """INSERT INTO {s}.audit (id, owner_id, pending_id, action, actor, at, item)
         VALUES ($1, 'bob', 'p1', $2, 'bob', now(), '{{}}'::jsonb)"""


async def test_an_existing_audit_trail_takes_undos(pg_dsn: str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    schema = fresh_schema()
    conn = await asyncpg.connect(pg_dsn)
    try:
        with monkeypatch.context() as mp:  # the schema as the version before migration 16 left it
            mp.setattr(migrations, "MIGRATIONS", [m for m in migrations.MIGRATIONS if m[0] < 16])
            await migrations.migrate(conn, schema)
        await conn.execute(ROW.format(s=schema), "a1", "confirmed")
        with pytest.raises(asyncpg.CheckViolationError):
            await conn.execute(ROW.format(s=schema), "a2", "undone")
        assert await migrations.migrate(conn, schema) == [
            v for v, _, _ in migrations.MIGRATIONS if v >= 16]
        await conn.execute(ROW.format(s=schema), "a2", "undone")
        for entry, action in (("a3", "rejected"), ("a4", "undone")):  # one of each per item
            with pytest.raises(asyncpg.UniqueViolationError):
                await conn.execute(ROW.format(s=schema), entry, action)
        with pytest.raises(asyncpg.CheckViolationError):
            await conn.execute(ROW.format(s=schema), "a5", "redone")
        rows = await conn.fetch(
            f"SELECT id, action, restored, requeued FROM {schema}.audit ORDER BY seq")
        assert [tuple(r) for r in rows] == [("a1", "confirmed", None, None),
                                            ("a2", "undone", None, None)]
    finally:
        await conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        await conn.close()
