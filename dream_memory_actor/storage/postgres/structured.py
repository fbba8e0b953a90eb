"""L1 on PostgreSQL: rules, facts, status, pending; their history; chat windows; audit.

A write is one transaction under the owner's advisory lock (transaction-scoped, so
it ends with the transaction and other owners are not held): read the snapshot,
compute the new one with ``ops.apply_ops`` (the operations' one meaning; an error
raises before anything is written) and write the difference, with what its
``HistoryLog`` closed or changed (``item_history``, ``status_history``, migration 6),
its audit entries, the owner's version and the ``op_id``. The announcement of the
change (``pg_notify``, see ``feed``) is delivered when, and only if, it commits.

``schema`` is whitelisted by the settings; every value is a bound parameter.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any

from ...history import HistoryLog, ItemVersion, StatusChange
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
from ..base import StructuredStore, VectorStore
from ..changes import Change, ChangeCallback, Unwatch
from ..ops import AddAudit, L1Op, apply_ops, pending_fingerprint
from . import erase
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
          'supersedes', supersedes, 'supersedes_content', supersedes_content,
          'proposal', proposal)
          ORDER BY seq), '[]')
     FROM {s}.pending WHERE owner_id = $1 AND (expires_at IS NULL OR expires_at > $2)) AS pending
"""


class PostgresStructuredStore(PostgresStore, StructuredStore):
    """L1 in PostgreSQL tables."""

    supports_change_feed = True
    atomic_units = True

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
            await self._lock(conn, "l1", owner)
            if await applied(conn, s, owner, op_id):
                return await self._load(conn, owner, now)
            # Expired entries go before the snapshot is read, as apply_ops drops them.
            await conn.execute(f"DELETE FROM {s}.status WHERE owner_id = $1 AND expires_at <= $2",
                               owner, now)
            await conn.execute(
                f"DELETE FROM {s}.pending WHERE owner_id = $1 AND expires_at <= $2", owner, now)
            old = await self._load(conn, owner, now)
            log = HistoryLog()
            new = apply_ops(old, ops, now, self.limits.status_keys, log)
            await self._write(conn, owner, old, new, log, now)
            await self._write_audit(conn, owner, [op.entry for op in ops
                                                  if isinstance(op, AddAudit)])
            await conn.execute(
                f"""INSERT INTO {s}.owners (owner_id, version, updated_at) VALUES ($1, 1, $2)
                    ON CONFLICT (owner_id) DO UPDATE
                    SET version = {s}.owners.version + 1, updated_at = $2""", owner, now)
            await record_op(conn, s, owner, op_id, "l1")
            await conn.execute("SELECT pg_notify($1, $2)", self.backend.channel,
                               Change(owner, new.version, old.epoch).encode())
            return new.model_copy(update={"epoch": old.epoch})

    async def _write(self, conn: Any, owner: str, old: MemorySnapshot, new: MemorySnapshot,
                     log: HistoryLog, now: datetime) -> None:
        """Write what turns ``old`` (as stored) into ``new``, and the history ``log``."""
        s = self._s
        for table, before, after in (("rules", old.rules, new.rules),
                                     ("facts", old.facts, new.facts)):
            # An item is its id and text: one removed and added again under its id with
            # another text in one write is deleted and inserted.
            was, kept = {(i.id, i.content) for i in before}, {(i.id, i.content) for i in after}
            if was - kept:
                await conn.execute(f"DELETE FROM {s}.{table} WHERE owner_id = $1 AND id = ANY($2)",
                                   owner, [i for i, _ in was - kept])
            added = [i for i in after if (i.id, i.content) not in was]
            if added:
                await conn.executemany(
                    f"""INSERT INTO {s}.{table}
                            (id, owner_id, content, content_hash, source, created_at)
                        VALUES ($1, $2, $3, $4, $5, $6)""",
                    [(i.id, owner, i.content, content_hash(i.content), i.source, i.created_at)
                     for i in added])
        gone = [k for k in old.status if k not in new.status]
        if gone:
            await conn.execute(f"DELETE FROM {s}.status WHERE owner_id = $1 AND key = ANY($2)",
                               owner, gone)
        changed = [(k, v, new.status_expires_at.get(k)) for k, v in new.status.items()
                   if old.status.get(k) != v
                   or old.status_expires_at.get(k) != new.status_expires_at.get(k)]
        if changed:
            await conn.executemany(
                f"""INSERT INTO {s}.status (owner_id, key, value, updated_at, expires_at)
                    VALUES ($1, $2, $3, $4, $5) ON CONFLICT (owner_id, key) DO UPDATE
                    SET value = $3, updated_at = $4, expires_at = $5""",
                [(owner, k, v, now, x) for k, v, x in changed])
        was_queued = {(p.id, pending_fingerprint(p)) for p in old.pending}
        is_queued = {(p.id, pending_fingerprint(p)) for p in new.pending}
        if was_queued - is_queued:
            await conn.execute(f"DELETE FROM {s}.pending WHERE owner_id = $1 AND id = ANY($2)",
                               owner, [i for i, _ in was_queued - is_queued])
        queued = [p for p in new.pending if (p.id, pending_fingerprint(p)) not in was_queued]
        if queued:
            await conn.executemany(
                f"""INSERT INTO {s}.pending (id, owner_id, kind, content, key, value, confidence,
                        source, created_at, expires_at, fingerprint, evidence, supersedes,
                        supersedes_content, proposal)
                    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14,
                            $15::jsonb)""",
                [(p.id, owner, p.kind, p.content, p.key, p.value, p.confidence, p.source,
                  p.created_at, p.expires_at, pending_fingerprint(p), p.evidence, p.supersedes,
                  p.supersedes_content,
                  None if p.proposal is None else p.proposal.model_dump_json())
                 for p in queued])
        if log.closed:
            await conn.executemany(
                f"""INSERT INTO {s}.item_history (owner_id, kind, id, content, source,
                        created_at, valid_to, superseded_by, actor, reason)
                    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)""",
                [(owner, v.kind, v.id, v.content, v.source, v.created_at, v.valid_to,
                  v.superseded_by, v.by, v.reason) for v in log.closed])
        if log.status:
            await conn.executemany(
                f"""INSERT INTO {s}.status_history (owner_id, key, value, at, expires_at)
                    VALUES ($1, $2, $3, $4, $5)""",
                [(owner, c.key, c.value, c.at, c.expires_at) for c in log.status])
            await conn.executemany(  # each key keeps its newest changes
                f"""DELETE FROM {s}.status_history WHERE owner_id = $1 AND key = $2 AND seq <= (
                        SELECT seq FROM {s}.status_history WHERE owner_id = $1 AND key = $2
                        ORDER BY seq DESC OFFSET $3 LIMIT 1)""",
                [(owner, k, self.limits.status_history)
                 for k in dict.fromkeys(c.key for c in log.status)])

    async def _write_audit(self, conn: Any, owner: str, entries: Sequence[AuditEntry]) -> None:
        """Record decisions and undos; what a new entry replaces (``decisions.replaces``):
        a decision every entry of its pending id, an undo the earlier undo."""
        s = self._s
        for e in entries:
            await conn.execute(
                f"""DELETE FROM {s}.audit WHERE owner_id = $1 AND pending_id = $2
                        AND (action = 'undone' OR NOT $3::boolean)""",
                owner, e.pending_id, e.action == "undone")
            await conn.execute(
                f"""INSERT INTO {s}.audit (id, owner_id, pending_id, action, actor, at, item,
                        written, restored, requeued)
                    VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb, $8, $9, $10)
                    ON CONFLICT DO NOTHING""",
                e.id, owner, e.pending_id, e.action, e.by, e.at, e.item.model_dump_json(),
                e.written, e.restored, e.requeued)

    async def _history(self, owner: str) -> tuple[list[ItemVersion], list[StatusChange]]:
        s = self._s
        async with self.backend.connection() as conn:
            items = await conn.fetch(
                f"""SELECT kind, id, content, source, created_at, valid_to, superseded_by,
                           actor, reason FROM {s}.item_history WHERE owner_id = $1
                    ORDER BY seq""", owner)
            changes = await conn.fetch(
                f"""SELECT key, value, at, expires_at FROM {s}.status_history
                    WHERE owner_id = $1 ORDER BY seq""", owner)
        return ([ItemVersion(kind=r["kind"], id=r["id"], content=r["content"],
                             source=r["source"], created_at=r["created_at"],
                             valid_to=r["valid_to"], superseded_by=r["superseded_by"],
                             by=r["actor"], reason=r["reason"]) for r in items],
                [StatusChange(key=r["key"], value=r["value"], at=r["at"],
                              expires_at=r["expires_at"]) for r in changes])

    # -- L3 chat windows and the audit trail ------------------------------------------

    async def _window(self, owner: str, conversation: str, messages: Sequence[ChatMessage],
                      keep: int | None, op_id: str | None
                      ) -> tuple[list[ChatMessage], list[ChatMessage]]:
        s = self._s
        read = f"""SELECT seq, role, content, created_at FROM {s}.chat_messages
                   WHERE owner_id = $1 AND conversation_id = $2 ORDER BY seq"""
        if not messages and keep is None and op_id is None:  # a read
            async with self.backend.connection() as conn:
                return _messages(await conn.fetch(read, owner, conversation)), []
        async with self.backend.transaction() as conn:
            # Serializes the writes of one conversation, so seq order is arrival order.
            await self._lock(conn, "l3", f"{owner}/{conversation}")
            fresh = op_id is None or await conn.fetchval(
                f"""INSERT INTO {s}.applied_ops (owner_id, op_id, kind)
                    VALUES ($1, $2, 'l3') ON CONFLICT DO NOTHING RETURNING true""",
                owner, op_id)
            removed = []
            if fresh:  # else a retry of an applied write: nothing to do
                if messages:
                    await conn.executemany(
                        f"""INSERT INTO {s}.chat_messages
                                (owner_id, conversation_id, role, content, created_at)
                            VALUES ($1, $2, $3, $4, $5)""",
                        [(owner, conversation, m.role, m.content, m.created_at)
                         for m in messages])
                if keep is not None:
                    removed = await conn.fetch(
                        f"""DELETE FROM {s}.chat_messages WHERE seq IN (
                                SELECT seq FROM {s}.chat_messages
                                WHERE owner_id = $1 AND conversation_id = $2
                                ORDER BY seq DESC OFFSET $3)
                            RETURNING seq, role, content, created_at""",
                        owner, conversation, keep)
            kept = [] if keep == 0 else await conn.fetch(read, owner, conversation)
        return _messages(kept), _messages(removed)

    async def _conversations(self, owner: str) -> list[str]:
        async with self.backend.connection() as conn:
            rows = await conn.fetch(f"""SELECT DISTINCT conversation_id
                                        FROM {self._s}.chat_messages WHERE owner_id = $1""",
                                    owner)
        return [r["conversation_id"] for r in rows]

    async def _audit(self, owner: str, limit: int, pending_id: str | None
                     ) -> list[AuditEntry]:
        async with self.backend.connection() as conn:
            rows = await conn.fetch(
                f"""SELECT id, pending_id, action, actor, at, item, written, restored, requeued
                    FROM {self._s}.audit
                    WHERE owner_id = $1 AND ($3::text IS NULL OR pending_id = $3)
                    ORDER BY seq DESC LIMIT $2""", owner, limit, pending_id)
        return [AuditEntry(id=r["id"], pending_id=r["pending_id"], action=r["action"],
                           by=r["actor"], at=r["at"], written=r["written"],
                           restored=r["restored"], requeued=r["requeued"],
                           item=MemoryPendingItem.model_validate_json(r["item"]))
                for r in rows]

    # -- the owner as a whole -----------------------------------------------------------

    @asynccontextmanager
    async def owner_unit(self, owner: str, vector: VectorStore
                         ) -> AsyncIterator[tuple[StructuredStore, VectorStore]]:
        """One transaction that the owner's writes of this task join, holding its L1 and
        L2 locks in the order ``_forget`` takes them (see ``PostgresBackend.unit``)."""
        async with self.backend.unit() as conn:
            for layer in ("l1", "l2"):
                await self._lock(conn, layer, owner)
            yield self, vector

    async def _forget(self, owner: str, tombstone: Tombstone | None, op_key: str | None
                      ) -> Tombstone | None:
        s = self._s
        async with self.backend.transaction() as conn:
            for layer in ("l1", "l2"):  # no write of the owner runs meanwhile
                await self._lock(conn, layer, owner)
            await erase.erase(conn, s, owner, await erase.owner_tables(conn, s))
            await conn.execute("SELECT pg_notify($1, $2)", self.backend.channel,
                               erase.forgotten(owner).encode())
            return None if tombstone is None else await erase.record(conn, s, tombstone,
                                                                     op_key)

    async def _tombstones(self, limit: int) -> list[Tombstone]:
        async with self.backend.connection() as conn:
            rows = await conn.fetch(f"""SELECT id, actor, at, counts FROM {self._s}.tombstones
                                       ORDER BY seq DESC LIMIT $1""", limit)
        return [erase.from_row(r) for r in rows]


def _messages(rows: Sequence[Any]) -> list[ChatMessage]:
    """Chat messages from rows, in ``seq`` order (``RETURNING`` promises no order)."""
    return [ChatMessage(role=r["role"], content=r["content"], created_at=r["created_at"])
            for r in sorted(rows, key=lambda r: r["seq"])]
