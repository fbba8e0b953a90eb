"""Batches, updates and supersessions of L2 memories on PostgreSQL, with their history.

Earlier versions live in ``memory_versions`` (migration 7), beside the live
``memories`` table: the live table, its indexes and the search statements are
those of plain stores. Each write is one transaction under the owner's advisory
lock (as ``store`` is), records its ``op_id`` in ``applied_ops`` with its result,
and keeps the owner's counts (``counts.py``) as every write does.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ...errors import MemoryNotFound
from ...models import MemoryVersion, StoreResult, VectorMemory
from ...text import content_hash, fold
from ..dedup import Cuts
from ..vector_l2 import BatchItem
from ..versions import closed, successor, updated
from .counts import add_terms, term_delta
from .statements import MEMORY_COLUMNS

if TYPE_CHECKING:
    from .vector import PostgresVectorStore

VERSION_COLUMNS = (
    "id, owner_id, memory_id, content, metadata, has_embedding, valid_from, "
    "valid_to, change, superseded_by, by_name, reason"
)


def _uuid(value: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(value)
    except ValueError:
        return None


async def _prior(conn: Any, s: str, owner: str, op_id: str | None) -> Any:
    if op_id is None:
        return None
    return await conn.fetchval(
        f"SELECT result FROM {s}.applied_ops WHERE owner_id = $1 AND op_id = $2", owner, op_id
    )


async def _record(conn: Any, s: str, owner: str, op_id: str | None, kind: str, result: str) -> None:
    if op_id is not None:
        await conn.execute(
            f"""INSERT INTO {s}.applied_ops (owner_id, op_id, kind, result)
                VALUES ($1, $2, $3, $4::jsonb)""",
            owner,
            op_id,
            kind,
            result,
        )


async def _live(store: PostgresVectorStore, conn: Any, owner: str, memory_id: str) -> VectorMemory:
    from .vector import _memory

    mid = _uuid(memory_id)
    row = (
        None
        if mid is None
        else await conn.fetchrow(
            f"SELECT {MEMORY_COLUMNS} FROM {store._s}.memories WHERE owner_id = $1 AND id = $2",
            owner,
            mid,
        )
    )
    if row is None:
        raise MemoryNotFound(f"owner {owner!r} has no memory {memory_id!r}")
    return _memory(row)


async def add_version(conn: Any, s: str, v: MemoryVersion) -> None:
    await conn.execute(
        f"""INSERT INTO {s}.memory_versions ({VERSION_COLUMNS})
            VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7, $8, $9, $10, $11, $12)""",
        uuid.UUID(v.id),
        v.owner,
        uuid.UUID(v.memory_id),
        v.content,
        json.dumps(v.metadata, ensure_ascii=False),
        v.has_embedding,
        v.valid_from,
        v.valid_to,
        v.change,
        None if v.superseded_by is None else uuid.UUID(v.superseded_by),
        v.by,
        v.reason,
    )


async def store_many(
    store: PostgresVectorStore,
    owner: str,
    items: Sequence[BatchItem],
    *,
    cuts: Cuts,
    now: datetime,
    op_id: str | None,
) -> list[StoreResult]:
    """Every item as ``store`` decides it, in order, in one transaction."""
    s = store._s
    async with store.backend.transaction() as conn:
        await store._lock_owner(conn, owner)
        prior = await _prior(conn, s, owner, op_id)
        if prior is not None:
            return [StoreResult.model_validate(r) for r in json.loads(prior)]
        results = [
            await store._store_locked(conn, owner, text, vec, meta, cuts, now)
            for text, vec, meta in items
        ]
        await _record(
            conn,
            s,
            owner,
            op_id,
            "store_many",
            json.dumps([r.model_dump(mode="json") for r in results]),
        )
        return results


async def update(
    store: PostgresVectorStore,
    owner: str,
    memory_id: str,
    content: str,
    embedding: list[float] | None,
    metadata: dict[str, Any] | None,
    *,
    now: datetime,
    op_id: str | None,
) -> VectorMemory:
    s = store._s
    async with store.backend.transaction() as conn:
        await store._lock_owner(conn, owner)
        prior = await _prior(conn, s, owner, op_id)
        if prior is not None:
            return VectorMemory.model_validate_json(prior)
        old = await _live(store, conn, owner, memory_id)
        new = updated(old, content, metadata, embedding is not None, now)
        await add_version(conn, s, closed(old, now, "update"))
        await conn.execute(
            f"""UPDATE {s}.memories SET content = $2, content_hash = $3, metadata = $4::jsonb,
                    embedding = $5, embedding_dim = $6, updated_at = $7 WHERE id = $1""",
            uuid.UUID(new.id),
            new.content,
            content_hash(new.content),
            json.dumps(new.metadata, ensure_ascii=False),
            embedding,
            None if embedding is None else store.dim,
            new.updated_at,
        )
        await conn.execute(
            f"UPDATE {s}.memory_text SET search_text = $2, updated_at = $3 WHERE id = $1",
            uuid.UUID(new.id),
            fold(new.content),
            new.updated_at,
        )
        await add_terms(conn, s, owner, term_delta([old.content], [new.content]))
        await _record(conn, s, owner, op_id, "update", new.model_dump_json())
        return new


async def supersede(
    store: PostgresVectorStore,
    owner: str,
    memory_id: str,
    content: str,
    embedding: list[float] | None,
    metadata: dict[str, Any] | None,
    *,
    by: str | None,
    reason: str | None,
    now: datetime,
    op_id: str | None,
) -> VectorMemory:
    s = store._s
    async with store.backend.transaction() as conn:
        await store._lock_owner(conn, owner)
        prior = await _prior(conn, s, owner, op_id)
        if prior is not None:
            return VectorMemory.model_validate_json(prior)
        old = await _live(store, conn, owner, memory_id)
        new = successor(old, content, metadata, embedding is not None, now)
        await add_version(
            conn, s, closed(old, now, "supersede", superseded_by=new.id, by=by, reason=reason)
        )
        # The old row goes (its text row with it, ON DELETE CASCADE), the new one comes:
        # the owner's memory count is unchanged.
        await conn.execute(f"DELETE FROM {s}.memories WHERE id = $1", uuid.UUID(old.id))
        await conn.execute(
            f"""INSERT INTO {s}.memories (id, owner_id, content, content_hash,
                    metadata, embedding, embedding_dim, created_at, updated_at)
                VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7, $8, $8)""",
            uuid.UUID(new.id),
            owner,
            new.content,
            content_hash(new.content),
            json.dumps(new.metadata, ensure_ascii=False),
            embedding,
            None if embedding is None else store.dim,
            now,
        )
        await conn.execute(
            f"""INSERT INTO {s}.memory_text (id, owner_id, search_text, updated_at)
                VALUES ($1, $2, $3, $4)""",
            uuid.UUID(new.id),
            owner,
            fold(new.content),
            now,
        )
        await add_terms(conn, s, owner, term_delta([old.content], [new.content]))
        await _record(conn, s, owner, op_id, "supersede", new.model_dump_json())
        return new


async def history(store: PostgresVectorStore, owner: str, memory_id: str) -> list[MemoryVersion]:
    mid = _uuid(memory_id)
    if mid is None:
        return []
    async with store.backend.connection() as conn:
        rows = await conn.fetch(
            f"""SELECT {VERSION_COLUMNS} FROM {store._s}.memory_versions
                WHERE owner_id = $1 AND (memory_id = $2 OR superseded_by = $2)""",
            owner,
            mid,
        )
    return _versions(rows)


async def all_versions(store: PostgresVectorStore, owner: str) -> list[MemoryVersion]:
    """Every closed version of the owner's memories (for export)."""
    async with store.backend.connection() as conn:
        rows = await conn.fetch(
            f"""SELECT {VERSION_COLUMNS} FROM {store._s}.memory_versions WHERE owner_id = $1
                ORDER BY valid_to, valid_from""", owner)
    return _versions(rows)


async def restore_versions(store: PostgresVectorStore, owner: str,
                           versions: list[MemoryVersion]) -> None:
    """Insert exported closed versions as they were (an import)."""
    async with store.backend.transaction() as conn:
        for v in versions:
            await add_version(conn, store._s, v)


def _versions(rows: Any) -> list[MemoryVersion]:
    return [
        MemoryVersion(
            id=str(r["id"]),
            owner=r["owner_id"],
            memory_id=str(r["memory_id"]),
            content=r["content"],
            metadata=json.loads(r["metadata"]),
            has_embedding=r["has_embedding"],
            valid_from=r["valid_from"],
            valid_to=r["valid_to"],
            change=r["change"],
            by=r["by_name"],
            reason=r["reason"],
            superseded_by=None if r["superseded_by"] is None else str(r["superseded_by"]),
        )
        for r in rows
    ]
