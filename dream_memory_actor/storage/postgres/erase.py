"""Erasing an owner from a schema, and the tombstones erasures leave.

Every table of the schema with an ``owner_id`` column holds rows of one owner each,
so erasing an owner is a DELETE on each of them, found in the catalog rather than
listed here: a table a later migration adds is covered without a change. Tables
that reference others go first, so a foreign key never stops the erasure. The
tombstones table has no ``owner_id``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from ...models import Tombstone
from ..tombstones import forgotten

__all__ = ["L2_TABLES", "erase", "forgotten", "owner_tables", "record"]

_OWNER_TABLES = """
SELECT c.relname FROM pg_attribute a
  JOIN pg_class c ON c.oid = a.attrelid
  JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = $1 AND a.attname = 'owner_id' AND NOT a.attisdropped
   AND c.relkind IN ('r', 'p')
"""

_REFERENCES = """
SELECT child.relname AS child, parent.relname AS parent FROM pg_constraint k
  JOIN pg_class child ON child.oid = k.conrelid
  JOIN pg_class parent ON parent.oid = k.confrelid
  JOIN pg_namespace n ON n.oid = child.relnamespace
 WHERE k.contype = 'f' AND n.nspname = $1
"""

#: The L2 tables, erased by the vector store's ``forget``.
L2_TABLES = ("memory_versions", "memory_text", "memory_reads", "memories", "term_df",
             "owner_memory_counts")


def deletion_order(tables: Iterable[str], references: Iterable[tuple[str, str]]
                   ) -> list[str]:
    """``tables`` with each referencing table before the tables it references
    (names sorted otherwise, so the order is the same every time)."""
    pending = sorted(set(tables))
    refs = [(c, p) for c, p in references if c != p]
    out: list[str] = []
    while pending:
        # a table no remaining table references can go now
        ready = [t for t in pending if not any(p == t and c in pending for c, p in refs)]
        nxt = ready[0] if ready else pending[0]  # a cycle: ON DELETE rules must cope
        out.append(nxt)
        pending.remove(nxt)
    return out


def quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


async def owner_tables(conn: Any, schema: str) -> list[str]:
    """The schema's tables with an ``owner_id`` column, in deletion order."""
    tables = [r["relname"] for r in await conn.fetch(_OWNER_TABLES, schema)]
    refs = [(r["child"], r["parent"]) for r in await conn.fetch(_REFERENCES, schema)]
    return deletion_order(tables, refs)


async def erase(conn: Any, schema: str, owner: str, tables: Iterable[str]) -> int:
    """Delete ``owner``'s rows from ``tables`` (names from this module or the catalog;
    ``schema`` whitelisted by the settings); return how many rows went."""
    gone = 0
    for table in tables:
        done = await conn.execute(f"DELETE FROM {schema}.{quoted(table)} WHERE owner_id = $1",
                                  owner)
        gone += int(done.split()[-1])
    return gone


async def record(conn: Any, schema: str, tombstone: Tombstone, op_key: str | None
                 ) -> Tombstone:
    """Insert ``tombstone`` unless one is recorded under ``op_key``; return the recorded one."""
    row = await conn.fetchrow(
        f"""INSERT INTO {schema}.tombstones (id, op_key, actor, at, counts)
            VALUES ($1, $2, $3, $4, $5::jsonb) ON CONFLICT (op_key) DO NOTHING
            RETURNING id, actor, at, counts""",
        tombstone.id, op_key, tombstone.by, tombstone.at, json.dumps(tombstone.counts))
    if row is None:
        row = await conn.fetchrow(
            f"SELECT id, actor, at, counts FROM {schema}.tombstones WHERE op_key = $1", op_key)
    return from_row(row)


def from_row(row: Any) -> Tombstone:
    return Tombstone(id=row["id"], by=row["actor"], at=row["at"],
                     counts=json.loads(row["counts"]))
