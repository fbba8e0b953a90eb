"""L1 on PostgreSQL: rules, facts, status, pending; one transaction per ``apply``.

Writes of one owner serialize on a transaction-scoped advisory lock, so the
check-then-write steps (dedup of rules, unknown-key errors, op ids) are atomic
without locking other owners.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from typing import Any

from ...errors import FactNotFound, PendingItemNotFound, RuleNotFound, UnknownStatusKey
from ...history import ItemVersion, StatusChange
from ...models import (
    AuditEntry,
    ChatMessage,
    FrozenMap,
    MemoryFact,
    MemoryPendingItem,
    MemoryRule,
    MemorySnapshot,
    Tombstone,
    utcnow,
)
from ...text import content_hash
from ..base import StructuredStore
from ..changes import Change, ChangeCallback, Unwatch
from ..ops import (
    AddAudit,
    AddFact,
    AddPending,
    AddRule,
    DeleteStatus,
    L1Op,
    RemoveFact,
    RemovePending,
    RemoveRule,
    SetStatus,
    Supersede,
    duplicate_id,
    pending_fingerprint,
    reviewed,
    too_many_status_keys,
)
from . import history
from .pool import PostgresStore
from .versions import applied, record_op

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
          'created_at', created_at, 'expires_at', expires_at, 'evidence', evidence,
          'supersedes', supersedes, 'supersedes_content', supersedes_content)
          ORDER BY seq), '[]')
     FROM {s}.pending WHERE owner_id = $1 AND (expires_at IS NULL OR expires_at > $2)) AS pending
"""


async def _delete_one(conn: Any, table: str, column: str, owner: str, value: str,
                      missing: Exception) -> None:
    """Delete the owner's row where ``column = value``; raise ``missing`` if there was none.

    ``table`` and ``column`` come from this module (schema whitelisted), never from input.
    """
    done = await conn.execute(f"DELETE FROM {table} WHERE owner_id = $1 AND {column} = $2",
                              owner, value)
    if done == "DELETE 0":
        raise missing


def _lock_key(schema: str, layer: str, owner: str) -> str:
    return f"{schema}:{layer}:{owner}"


class PostgresStructuredStore(PostgresStore, StructuredStore):
    """L1 in PostgreSQL tables."""

    supports_change_feed = True

    async def watch(self, callback: ChangeCallback) -> Unwatch:
        return await self.backend.watch(callback)

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
            if await applied(conn, s, owner, op_id):
                return await self._load(conn, owner, now)
            # Expired entries are gone before the operations run, as in apply_ops.
            await conn.execute(f"DELETE FROM {s}.status WHERE owner_id = $1 AND expires_at <= $2",
                               owner, now)
            await conn.execute(
                f"DELETE FROM {s}.pending WHERE owner_id = $1 AND expires_at <= $2", owner, now)
            adds_status = any(isinstance(op, SetStatus) for op in ops)
            before = await self._status_count(conn, owner) if adds_status else 0
            for op in ops:
                await self._one(conn, owner, op, now)
            if adds_status:  # refused (the transaction rolled back) past the cap, as apply_ops
                after = await self._status_count(conn, owner)
                if after > max(self.limits.status_keys, before):
                    raise too_many_status_keys(owner, after, self.limits.status_keys)
            await conn.execute(
                f"""INSERT INTO {s}.owners (owner_id, version, updated_at) VALUES ($1, 1, $2)
                    ON CONFLICT (owner_id) DO UPDATE
                    SET version = {s}.owners.version + 1, updated_at = $2""", owner, now)
            await record_op(conn, s, owner, op_id, "l1")
            new = await self._load(conn, owner, now)
            # Delivered to the listeners (``feed``) when, and only if, this commits.
            await conn.execute("SELECT pg_notify($1, $2)", self.backend.channel,
                               Change(owner, new.version, new.epoch).encode())
            return new

    async def _status_count(self, conn: Any, owner: str) -> int:
        n = await conn.fetchval(f"SELECT count(*) FROM {self._s}.status WHERE owner_id = $1",
                                owner)
        return int(n)

    async def _id_free(self, conn: Any, table: str, owner: str, item_id: str, column: str,
                       same: str, kind: str) -> bool:
        """Whether the item may be inserted: ``False`` if the owner has it (the same
        ``column`` value: nothing to do), ``DuplicateId`` if the id holds other content.
        ``table``, ``column`` and ``kind`` come from this module, never from input."""
        rows = await conn.fetch(
            f"SELECT {column} = $3 AS same FROM {self._s}.{table} "
            f"WHERE owner_id = $1 AND (id = $2 OR {column} = $3)", owner, item_id, same)
        if any(r["same"] for r in rows):
            return False
        if rows:
            raise duplicate_id(owner, kind, item_id)
        return True

    async def _one(self, conn: Any, owner: str, op: L1Op, now: datetime) -> None:
        s = self._s
        if isinstance(op, (AddRule, AddFact)) and op.review_updates:
            snap = await self._load(conn, owner, now)
            op = reviewed(op, snap.rules, snap.facts, now)
        if isinstance(op, (AddRule, AddFact)):
            table = "rules" if isinstance(op, AddRule) else "facts"
            if not await self._id_free(conn, table, owner, op.id, "content_hash",
                                       content_hash(op.content), table[:-1]):
                return
            await conn.execute(
                f"""INSERT INTO {s}.{table}
                        (id, owner_id, content, content_hash, source, created_at)
                    VALUES ($1, $2, $3, $4, $5, $6)
                    ON CONFLICT (owner_id, content_hash) DO NOTHING""",
                op.id, owner, op.content, content_hash(op.content), op.source, now)
        elif isinstance(op, (RemoveRule, RemoveFact)):
            table, err = (("rules", RuleNotFound) if isinstance(op, RemoveRule)
                          else ("facts", FactNotFound))
            await _delete_one(conn, f"{s}.{table}", "id", owner, op.id,
                              err(f"owner {owner!r} has no {table[:-1]} {op.id!r}"))
        elif isinstance(op, SetStatus):
            expires = None if op.ttl_s is None else now + timedelta(seconds=op.ttl_s)
            await history.record_status(conn, s, owner, op.key, op.value, expires, now,
                                        self.limits.status_history)
            await conn.execute(
                f"""INSERT INTO {s}.status (owner_id, key, value, updated_at, expires_at)
                    VALUES ($1, $2, $3, $4, $5) ON CONFLICT (owner_id, key) DO UPDATE
                    SET value = $3, updated_at = $4, expires_at = $5""",
                owner, op.key, op.value, now, expires)
        elif isinstance(op, DeleteStatus):
            await _delete_one(conn, f"{s}.status", "key", owner, op.key,
                              UnknownStatusKey(f"owner {owner!r} has no status key {op.key!r}"))
            await history.record_status(conn, s, owner, op.key, None, None, now,
                                        self.limits.status_history)
        elif isinstance(op, Supersede):
            await history.supersede(conn, s, await self._load(conn, owner, now), op, now)
        elif isinstance(op, AddPending):
            p = op.item
            if not await self._id_free(conn, "pending", owner, p.id, "fingerprint",
                                       pending_fingerprint(p), "pending item"):
                return
            await conn.execute(
                f"""INSERT INTO {s}.pending (id, owner_id, kind, content, key, value, confidence,
                        source, created_at, expires_at, fingerprint, evidence, supersedes,
                        supersedes_content)
                    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
                    ON CONFLICT (owner_id, fingerprint) DO NOTHING""",
                p.id, owner, p.kind, p.content, p.key, p.value, p.confidence, p.source,
                p.created_at, p.expires_at, pending_fingerprint(p), p.evidence, p.supersedes,
                p.supersedes_content)
        elif isinstance(op, RemovePending):
            await _delete_one(conn, f"{s}.pending", "id", owner, op.id,
                              PendingItemNotFound(f"owner {owner!r} has no pending item {op.id!r}"))
        elif isinstance(op, AddAudit):
            e = op.entry  # a decision replaces an earlier entry of its pending id
            await conn.execute(f"DELETE FROM {s}.audit WHERE owner_id = $1 AND pending_id = $2",
                               owner, e.pending_id)
            await conn.execute(
                f"""INSERT INTO {s}.audit (id, owner_id, pending_id, action, actor, at, item,
                        written)
                    VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb, $8) ON CONFLICT DO NOTHING""",
                e.id, owner, e.pending_id, e.action, e.by, e.at, e.item.model_dump_json(),
                e.written)
        else:  # pragma: no cover - validate_ops admits only the union
            raise TypeError(f"unknown operation {op!r}")

    async def _item_history(self, owner: str) -> list[ItemVersion]:
        async with self.backend.connection() as conn:
            return await history.closed_items(conn, self._s, owner)

    async def _status_history(self, owner: str, key: str | None) -> list[StatusChange]:
        async with self.backend.connection() as conn:
            return await history.status_changes(conn, self._s, owner, key)

    # -- L3 chat window and audit trail ----------------------------------------------

    async def _append_messages(self, owner: str, conversation: str,
                               messages: Sequence[ChatMessage], window: int,
                               op_id: str | None
                               ) -> tuple[list[ChatMessage], list[ChatMessage]]:
        s = self._s
        async with self.backend.transaction() as conn:
            # Serializes appends to one conversation, so seq order is arrival order.
            await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
                               _lock_key(s, "l3", f"{owner}/{conversation}"))
            fresh = op_id is None or await conn.fetchval(
                f"""INSERT INTO {s}.applied_ops (owner_id, op_id, kind)
                    VALUES ($1, $2, 'l3') ON CONFLICT DO NOTHING RETURNING true""",
                owner, op_id)
            removed = []
            if fresh:  # else a retry of an applied append: nothing to do
                if messages:
                    await conn.executemany(
                        f"""INSERT INTO {s}.chat_messages
                                (owner_id, conversation_id, role, content, created_at)
                            VALUES ($1, $2, $3, $4, $5)""",
                        [(owner, conversation, m.role, m.content, m.created_at)
                         for m in messages])
                removed = await conn.fetch(
                    f"""DELETE FROM {s}.chat_messages WHERE seq IN (
                            SELECT seq FROM {s}.chat_messages
                            WHERE owner_id = $1 AND conversation_id = $2
                            ORDER BY seq DESC OFFSET $3)
                        RETURNING seq, role, content, created_at""",
                    owner, conversation, window)
            kept = await conn.fetch(
                f"""SELECT seq, role, content, created_at FROM {s}.chat_messages
                    WHERE owner_id = $1 AND conversation_id = $2 ORDER BY seq""",
                owner, conversation)
        return _messages(kept), _messages(removed)

    async def _load_window(self, owner: str, conversation: str) -> list[ChatMessage]:
        async with self.backend.connection() as conn:
            rows = await conn.fetch(
                f"""SELECT seq, role, content, created_at FROM {self._s}.chat_messages
                    WHERE owner_id = $1 AND conversation_id = $2 ORDER BY seq""",
                owner, conversation)
        return _messages(rows)

    async def _end_conversation(self, owner: str, conversation: str) -> list[ChatMessage]:
        s = self._s
        async with self.backend.transaction() as conn:
            await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
                               _lock_key(s, "l3", f"{owner}/{conversation}"))
            rows = await conn.fetch(
                f"""DELETE FROM {s}.chat_messages WHERE owner_id = $1 AND conversation_id = $2
                    RETURNING seq, role, content, created_at""", owner, conversation)
        return _messages(rows)

    async def _audit(self, owner: str, limit: int, pending_id: str | None
                     ) -> list[AuditEntry]:
        async with self.backend.connection() as conn:
            rows = await conn.fetch(
                f"""SELECT id, pending_id, action, actor, at, item, written FROM {self._s}.audit
                    WHERE owner_id = $1 AND ($3::text IS NULL OR pending_id = $3)
                    ORDER BY seq DESC LIMIT $2""", owner, limit, pending_id)
        return [AuditEntry(id=r["id"], pending_id=r["pending_id"], action=r["action"],
                           by=r["actor"], at=r["at"], written=r["written"],
                           item=MemoryPendingItem.model_validate_json(r["item"]))
                for r in rows]

    @asynccontextmanager
    async def owner_unit(self, owner: str) -> AsyncIterator[object]:
        """One transaction that the owner's writes of this task join, holding its L1 and
        L2 locks in the order ``_forget`` takes them (see ``PostgresBackend.unit``)."""
        async with self.backend.unit() as conn:
            for layer in ("l1", "l2"):
                await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
                                   _lock_key(self._s, layer, owner))
            yield conn

    async def _forget(self, owner: str, tombstone: Tombstone, op_key: str | None
                      ) -> Tombstone:
        from . import erase

        s = self._s
        async with self.backend.transaction() as conn:
            for layer in ("l1", "l2"):  # no write of the owner runs meanwhile
                await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
                                   _lock_key(s, layer, owner))
            await erase.erase(conn, s, owner, await erase.owner_tables(conn, s))
            await conn.execute("SELECT pg_notify($1, $2)", self.backend.channel,
                               erase.forgotten(owner).encode())
            return await erase.record(conn, s, tombstone, op_key)

    async def _tombstones(self, limit: int) -> list[Tombstone]:
        from .erase import from_row

        async with self.backend.connection() as conn:
            rows = await conn.fetch(f"""SELECT id, actor, at, counts FROM {self._s}.tombstones
                                       ORDER BY seq DESC LIMIT $1""", limit)
        return [from_row(r) for r in rows]


def _messages(rows: Sequence[Any]) -> list[ChatMessage]:
    """Chat messages from rows, in ``seq`` order (``RETURNING`` promises no order)."""
    return [ChatMessage(role=r["role"], content=r["content"], created_at=r["created_at"])
            for r in sorted(rows, key=lambda r: r["seq"])]
