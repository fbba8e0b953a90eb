"""L1 on PostgreSQL: rules, facts, status, pending; one transaction per ``apply``.

Writes of one owner serialize on a transaction-scoped advisory lock, so the
check-then-write steps (dedup of rules, unknown-key errors, op ids) are atomic
without locking other owners.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from ...errors import FactNotFound, PendingItemNotFound, RuleNotFound, UnknownStatusKey
from ...models import FrozenMap, MemoryFact, MemoryPendingItem, MemoryRule, MemorySnapshot, utcnow
from ...text import content_hash
from ..base import StructuredStore
from ..ops import (
    AddFact,
    AddPending,
    AddRule,
    DeleteStatus,
    L1Op,
    RemoveFact,
    RemovePending,
    RemoveRule,
    SetStatus,
    pending_fingerprint,
)
from .pool import PostgresBackend

_SNAPSHOT_SQL = """
SELECT
  (SELECT version FROM {s}.owners WHERE owner_id = $1) AS version,
  (SELECT updated_at FROM {s}.owners WHERE owner_id = $1) AS updated_at,
  (SELECT coalesce(json_agg(json_build_object('id', id, 'content', content, 'source', source,
          'created_at', created_at) ORDER BY seq), '[]')
     FROM {s}.rules WHERE owner_id = $1) AS rules,
  (SELECT coalesce(json_agg(json_build_object('id', id, 'content', content, 'source', source,
          'created_at', created_at) ORDER BY seq), '[]')
     FROM {s}.facts WHERE owner_id = $1) AS facts,
  (SELECT coalesce(json_agg(json_build_object('key', key, 'value', value,
          'expires_at', expires_at) ORDER BY key), '[]')
     FROM {s}.status WHERE owner_id = $1 AND (expires_at IS NULL OR expires_at > $2)) AS status,
  (SELECT coalesce(json_agg(json_build_object('id', id, 'kind', kind, 'content', content,
          'key', key, 'value', value, 'confidence', confidence, 'source', source,
          'created_at', created_at, 'expires_at', expires_at) ORDER BY seq), '[]')
     FROM {s}.pending WHERE owner_id = $1 AND (expires_at IS NULL OR expires_at > $2)) AS pending
"""


def _lock_key(schema: str, layer: str, owner: str) -> str:
    return f"{schema}:{layer}:{owner}"


class PostgresStructuredStore(StructuredStore):
    """L1 in PostgreSQL tables."""

    def __init__(self, backend: PostgresBackend) -> None:
        self.backend = backend
        self.max_content_bytes = backend.max_content_bytes
        self._s = backend.schema
        backend.acquire_user()
        self._closed = False

    async def setup(self) -> None:
        await self.backend.setup()

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            await self.backend.release_user()

    async def load(self, owner: str, *, now: datetime | None = None) -> MemorySnapshot:
        async with self.backend.connection() as conn:
            return await self._load(conn, owner, now or utcnow())

    async def _load(self, conn: Any, owner: str, now: datetime) -> MemorySnapshot:
        row = await conn.fetchrow(_SNAPSHOT_SQL.format(s=self._s), owner, now)
        status = json.loads(row["status"])
        return MemorySnapshot(
            owner=owner,
            rules=tuple(MemoryRule(**r) for r in json.loads(row["rules"])),
            facts=tuple(MemoryFact(**f) for f in json.loads(row["facts"])),
            status=FrozenMap({e["key"]: e["value"] for e in status}),
            status_expires_at={e["key"]: e["expires_at"]
                               for e in status if e["expires_at"] is not None},
            pending=tuple(MemoryPendingItem(**p) for p in json.loads(row["pending"])),
            version=row["version"] or 0,
            updated_at=row["updated_at"],
        )

    async def _apply(self, owner: str, ops: Sequence[L1Op], now: datetime,
                     op_id: str | None) -> MemorySnapshot:
        s = self._s
        async with self.backend.transaction() as conn:
            await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
                               _lock_key(s, "l1", owner))
            if op_id is not None and await conn.fetchval(
                    f"SELECT 1 FROM {s}.applied_ops WHERE owner_id = $1 AND op_id = $2",
                    owner, op_id):
                return await self._load(conn, owner, now)
            # Expired entries are gone before the operations run, as in apply_ops.
            await conn.execute(f"DELETE FROM {s}.status WHERE owner_id = $1 AND expires_at <= $2",
                               owner, now)
            await conn.execute(
                f"DELETE FROM {s}.pending WHERE owner_id = $1 AND expires_at <= $2", owner, now)
            for op in ops:
                await self._one(conn, owner, op, now)
            await conn.execute(
                f"""INSERT INTO {s}.owners (owner_id, version, updated_at) VALUES ($1, 1, $2)
                    ON CONFLICT (owner_id) DO UPDATE
                    SET version = {s}.owners.version + 1, updated_at = $2""", owner, now)
            if op_id is not None:
                await conn.execute(
                    f"INSERT INTO {s}.applied_ops (owner_id, op_id, kind) VALUES ($1, $2, 'l1')",
                    owner, op_id)
            return await self._load(conn, owner, now)

    async def _one(self, conn: Any, owner: str, op: L1Op, now: datetime) -> None:
        s = self._s
        if isinstance(op, (AddRule, AddFact)):
            table = "rules" if isinstance(op, AddRule) else "facts"
            await conn.execute(
                f"""INSERT INTO {s}.{table}
                        (id, owner_id, content, content_hash, source, created_at)
                    VALUES ($1, $2, $3, $4, $5, $6)
                    ON CONFLICT (owner_id, content_hash) DO NOTHING""",
                op.id, owner, op.content, content_hash(op.content), op.source, now)
        elif isinstance(op, (RemoveRule, RemoveFact)):
            table, err = (("rules", RuleNotFound) if isinstance(op, RemoveRule)
                          else ("facts", FactNotFound))
            done = await conn.execute(
                f"DELETE FROM {s}.{table} WHERE owner_id = $1 AND id = $2", owner, op.id)
            if done == "DELETE 0":
                raise err(f"owner {owner!r} has no {table[:-1]} {op.id!r}")
        elif isinstance(op, SetStatus):
            expires = None if op.ttl_s is None else now + timedelta(seconds=op.ttl_s)
            await conn.execute(
                f"""INSERT INTO {s}.status (owner_id, key, value, updated_at, expires_at)
                    VALUES ($1, $2, $3, $4, $5) ON CONFLICT (owner_id, key) DO UPDATE
                    SET value = $3, updated_at = $4, expires_at = $5""",
                owner, op.key, op.value, now, expires)
        elif isinstance(op, DeleteStatus):
            done = await conn.execute(
                f"DELETE FROM {s}.status WHERE owner_id = $1 AND key = $2", owner, op.key)
            if done == "DELETE 0":
                raise UnknownStatusKey(f"owner {owner!r} has no status key {op.key!r}")
        elif isinstance(op, AddPending):
            p = op.item
            await conn.execute(
                f"""INSERT INTO {s}.pending (id, owner_id, kind, content, key, value, confidence,
                        source, created_at, expires_at, fingerprint)
                    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
                    ON CONFLICT (owner_id, fingerprint) DO NOTHING""",
                p.id, owner, p.kind, p.content, p.key, p.value, p.confidence, p.source,
                p.created_at, p.expires_at, pending_fingerprint(p))
        elif isinstance(op, RemovePending):
            done = await conn.execute(
                f"DELETE FROM {s}.pending WHERE owner_id = $1 AND id = $2", owner, op.id)
            if done == "DELETE 0":
                raise PendingItemNotFound(f"owner {owner!r} has no pending item {op.id!r}")
        else:  # pragma: no cover - validate_ops admits only the union
            raise TypeError(f"unknown operation {op!r}")
