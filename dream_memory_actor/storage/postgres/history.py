"""The history of L1 on PostgreSQL: superseded items and status changes (migration 6).

``item_history`` holds the closed rules and facts, ``status_history`` the last
changes of each status key; both are written in the transaction of the write
that makes them (``structured._apply``), and read by the two primitives of
``storage.history``. The tables the snapshot reads keep current items only.

``schema`` is whitelisted by the settings; every value is a bound parameter.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ...history import HistoryLog, ItemKind, ItemVersion, StatusChange
from ...models import MemoryFact, MemoryRule, MemorySnapshot
from ...text import content_hash
from ..ops import Supersede, supersede_in


async def supersede(conn: Any, schema: str, snap: MemorySnapshot, op: Supersede,
                    now: datetime) -> None:
    """Apply ``op`` to ``snap`` (the owner's state in this transaction) as
    ``ops.supersede_in`` does: close the old row into ``item_history``, insert the new
    one unless the owner has that text already."""
    s = schema
    owner = snap.owner
    kind: ItemKind = "rule" if any(r.id == op.item_id for r in snap.rules) else "fact"
    items: list[MemoryRule | MemoryFact] = [*(snap.rules if kind == "rule" else snap.facts)]
    log = HistoryLog()
    after = supersede_in(owner, kind, items, op, now, log)  # raises before any write
    closed = log.closed[0]
    table = "rules" if kind == "rule" else "facts"
    await conn.execute(f"DELETE FROM {s}.{table} WHERE owner_id = $1 AND id = $2",
                       owner, closed.id)
    if all(i.id != closed.superseded_by for i in items):
        new = after[-1]
        await conn.execute(
            f"""INSERT INTO {s}.{table} (id, owner_id, content, content_hash, source, created_at)
                VALUES ($1, $2, $3, $4, $5, $6)""",
            new.id, owner, new.content, content_hash(new.content), new.source, now)
    await conn.execute(
        f"""INSERT INTO {s}.item_history (owner_id, kind, id, content, source, created_at,
                valid_to, superseded_by, actor, reason)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)""",
        owner, kind, closed.id, closed.content, closed.source, closed.created_at,
        closed.valid_to, closed.superseded_by, closed.by, closed.reason)


async def record_status(conn: Any, schema: str, owner: str, key: str, value: str | None,
                        expires_at: datetime | None, now: datetime, keep: int) -> None:
    """Record a status change (``value`` ``None``: deleted) unless it sets the key to
    what it holds already; keep the newest ``keep`` changes of the key. Runs before
    the status row is written."""
    s = schema
    await conn.execute(
        f"""INSERT INTO {s}.status_history (owner_id, key, value, at, expires_at)
            SELECT $1, $2, $3, $4, $5
            WHERE $3::text IS NULL OR NOT EXISTS (
                SELECT 1 FROM {s}.status WHERE owner_id = $1 AND key = $2 AND value = $3
                AND expires_at IS NOT DISTINCT FROM $5)""",
        owner, key, value, now, expires_at)
    await conn.execute(
        f"""DELETE FROM {s}.status_history WHERE owner_id = $1 AND key = $2 AND seq <= (
                SELECT seq FROM {s}.status_history WHERE owner_id = $1 AND key = $2
                ORDER BY seq DESC OFFSET $3 LIMIT 1)""", owner, key, keep)


async def closed_items(conn: Any, schema: str, owner: str) -> list[ItemVersion]:
    rows = await conn.fetch(
        f"""SELECT kind, id, content, source, created_at, valid_to, superseded_by, actor,
                   reason FROM {schema}.item_history WHERE owner_id = $1 ORDER BY seq""", owner)
    return [ItemVersion(kind=r["kind"], id=r["id"], content=r["content"], source=r["source"],
                        created_at=r["created_at"], valid_to=r["valid_to"],
                        superseded_by=r["superseded_by"], by=r["actor"], reason=r["reason"])
            for r in rows]


async def status_changes(conn: Any, schema: str, owner: str, key: str | None
                         ) -> list[StatusChange]:
    rows = await conn.fetch(
        f"""SELECT key, value, at, expires_at FROM {schema}.status_history
            WHERE owner_id = $1 AND ($2::text IS NULL OR key = $2) ORDER BY seq""", owner, key)
    return [StatusChange(key=r["key"], value=r["value"], at=r["at"], expires_at=r["expires_at"])
            for r in rows]
