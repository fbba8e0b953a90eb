"""The rows of L2 history and idempotency on PostgreSQL: ``memory_versions`` and the
``applied_ops`` results of L2 writes.

Earlier versions live in ``memory_versions`` (migration 7), beside the live
``memories`` table: the live table, its indexes and the search statements are
those of plain stores. Every write under an ``op_id`` (an L1 ``apply``, an L2
``_write``) records it here with its result (``record_op``, read back by
``prior_result``) in the transaction that writes.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from ...models import MemoryVersion

VERSION_COLUMNS = (
    "id, owner_id, memory_id, content, metadata, has_embedding, valid_from, "
    "valid_to, change, superseded_by, by_name, reason, context"
)


def as_uuid(value: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(value)
    except ValueError:
        return None


# A write under an operation id records it (with its result, as JSON, where the write
# returns one) in the transaction that writes; a retry finds it and writes nothing.


async def applied(conn: Any, s: str, owner: str, op_id: str | None) -> bool:
    """Whether ``op_id`` was applied to ``owner`` already."""
    return op_id is not None and bool(await conn.fetchval(
        f"SELECT 1 FROM {s}.applied_ops WHERE owner_id = $1 AND op_id = $2", owner, op_id))


async def prior_result(conn: Any, s: str, owner: str, op_id: str | None) -> Any:
    """The result recorded for ``op_id`` (``None``: not applied, or no id)."""
    if op_id is None:
        return None
    return await conn.fetchval(
        f"SELECT result FROM {s}.applied_ops WHERE owner_id = $1 AND op_id = $2", owner, op_id
    )


async def record_op(conn: Any, s: str, owner: str, op_id: str | None, kind: str,
                    result: str | None = None) -> None:
    if op_id is not None:
        await conn.execute(
            f"""INSERT INTO {s}.applied_ops (owner_id, op_id, kind, result)
                VALUES ($1, $2, $3, $4::jsonb)""",
            owner,
            op_id,
            kind,
            result,
        )


def version_rows(rows: Any) -> list[MemoryVersion]:
    return [
        MemoryVersion(
            id=str(r["id"]),
            owner=r["owner_id"],
            memory_id=str(r["memory_id"]),
            content=r["content"],
            metadata=json.loads(r["metadata"]),
            context=r["context"],
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
