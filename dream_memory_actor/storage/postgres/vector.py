"""L2 on PostgreSQL + pgvector: the ``memories`` table, its text rows and counts, and
the closed versions in ``memory_versions``; the search candidates are gathered in
``search``.

A write is one transaction (``PostgresBackend.unit``: the plan's reads join it)
under the owner's advisory lock, which the owner's other L2 writes wait for; its
``op_id`` is recorded with its result in ``applied_ops`` in the same transaction.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from ...errors import SchemaError
from ...models import EmbeddingModel, MemoryVersion, VectorMemory
from ...text import content_hash, fold
from ..writes import Planner, Row, Writes
from .counts import add_memories, add_terms, term_delta, term_stats
from .migrations import dim_sql
from .plan import prefer_exact
from .search import PostgresSearch
from .statements import MEMORY_COLUMNS, Params, metadata_condition
from .versions import VERSION_COLUMNS, as_uuid, prior_result, record_op, version_rows

_INSERT = """INSERT INTO {s}.memories (id, owner_id, content, content_hash, metadata, embedding,
                 embedding_dim, created_at, updated_at)
             VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7, $8, $9)"""
_INSERT_TEXT = """INSERT INTO {s}.memory_text (id, owner_id, search_text, updated_at)
                  VALUES ($1, $2, $3, $4)"""
_UPDATE_TEXT = "UPDATE {s}.memory_text SET search_text = $2, updated_at = $3 WHERE id = $1"


def _memory(row: Any) -> VectorMemory:
    return VectorMemory(
        id=str(row["id"]), owner=row["owner_id"], content=row["content"],
        metadata=json.loads(row["metadata"]), created_at=row["created_at"],
        updated_at=row["updated_at"], has_embedding=row["has_embedding"])


class PostgresVectorStore(PostgresSearch):
    """L2 in the ``memories`` table."""

    def __init__(self, backend: Any) -> None:
        super().__init__(backend)
        self.dim = backend.dim
        self._codepoint_order = None  # see PostgresSearch
        self._last_counts = None

    # -- the embedding model ------------------------------------------------------------

    async def _model(self, record: EmbeddingModel | None) -> EmbeddingModel | None:
        if record is not None:
            async with self.backend.connection() as conn:
                await conn.execute(
                    f"""INSERT INTO {self._s}.embedding_model (model, dim, calibration,
                            recorded_at)
                        VALUES ($1, $2, $3::jsonb, $4) ON CONFLICT (only_row) DO NOTHING""",
                    record.model, record.dim,
                    None if record.calibration is None else json.dumps(record.calibration),
                    record.recorded_at)
        try:
            async with self.backend.plain_connection() as conn:
                row = await conn.fetchrow(
                    f"SELECT model, dim, calibration, recorded_at FROM {self._s}.embedding_model")
        except SchemaError:  # not set up yet: nothing is recorded
            return None
        if row is None:
            return None
        cal = row["calibration"]
        return EmbeddingModel(model=row["model"], dim=row["dim"],
                              calibration=None if cal is None else json.loads(cal),
                              recorded_at=row["recorded_at"])

    # -- writes -----------------------------------------------------------------------

    async def _lock_owner(self, conn: Any, owner: str) -> None:
        """Writes of one owner's memories take turns (judgement, counts)."""
        await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
                           f"{self._s}:l2:{owner}")

    async def _write(self, owner: str, what: str, op_id: str | None, plan: Planner) -> str:
        s = self._s
        async with self.backend.unit() as conn:
            await self._lock_owner(conn, owner)
            prior = await prior_result(conn, s, owner, op_id)
            if prior is not None:
                return str(prior)
            result, writes = await plan()
            await self._apply(conn, owner, writes)
            await record_op(conn, s, owner, op_id, what, result)
            return result

    async def _apply(self, conn: Any, owner: str, w: Writes) -> None:
        s = self._s
        if w.versions:
            await conn.executemany(
                f"""INSERT INTO {s}.memory_versions ({VERSION_COLUMNS})
                    VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7, $8, $9, $10, $11, $12)""",
                [(uuid.UUID(v.id), v.owner, uuid.UUID(v.memory_id), v.content,
                  json.dumps(v.metadata, ensure_ascii=False), v.has_embedding, v.valid_from,
                  v.valid_to, v.change,
                  None if v.superseded_by is None else uuid.UUID(v.superseded_by), v.by,
                  v.reason) for v in w.versions])
        if w.drops:  # their text rows go with them (ON DELETE CASCADE)
            await conn.execute(f"DELETE FROM {s}.memories WHERE id = ANY($1::uuid[])",
                               [uuid.UUID(m.id) for m in w.drops])
        new = [p for p in w.puts if p.before is None]
        if new:
            await conn.executemany(_INSERT.format(s=s), [
                (uuid.UUID(m.id), owner, m.content, content_hash(m.content),
                 json.dumps(m.metadata, ensure_ascii=False), p.given,
                 None if p.given is None else self.dim, m.created_at, m.updated_at)
                for p in new for m in [p.memory]])
            await conn.executemany(_INSERT_TEXT.format(s=s), [
                (uuid.UUID(p.memory.id), owner, fold(p.memory.content), p.memory.updated_at)
                for p in new])
        for p in w.puts:
            if p.before is None:
                continue
            m = p.memory
            args = [uuid.UUID(m.id), m.content, content_hash(m.content),
                    json.dumps(m.metadata, ensure_ascii=False), m.updated_at]
            vector = ""
            if not p.keeps:
                vector = ", embedding = $6, embedding_dim = $7"
                args += [p.given, None if p.given is None else self.dim]
            await conn.execute(
                f"""UPDATE {s}.memories SET content = $2, content_hash = $3,
                        metadata = $4::jsonb, updated_at = $5{vector} WHERE id = $1""", *args)
            await conn.execute(_UPDATE_TEXT.format(s=s), uuid.UUID(m.id), fold(m.content),
                               m.updated_at)
        await add_memories(conn, s, owner, w.count_delta())
        await add_terms(conn, s, owner, w.term_delta())

    async def bulk_insert(self, owner: str,
                          rows: Sequence[tuple[str, Sequence[float] | None, datetime]]) -> int:
        """Import ``(content, embedding, created_at)`` rows with ``COPY``: no dedup, no merge.

        For loading an existing corpus (and for benchmarks); ``store`` is the
        path for live writes. Content and embeddings are validated first.
        """
        from ... import validation as check

        check.owner_id(owner)
        mems, texts = [], []
        for content, emb, at in rows:
            text = check.content(content, self.max_content_bytes)
            vec = self._check_embedding(emb)
            mid = uuid.uuid4()
            mems.append((mid, owner, text, content_hash(text), "{}", vec,
                         None if vec is None else self.dim, at, at))
            texts.append((mid, owner, fold(text), at))
        async with self.backend.transaction() as conn:
            await self._lock_owner(conn, owner)
            await conn.copy_records_to_table(
                "memories", schema_name=self._s, records=mems,
                columns=["id", "owner_id", "content", "content_hash", "metadata", "embedding",
                         "embedding_dim", "created_at", "updated_at"])
            await conn.copy_records_to_table(
                "memory_text", schema_name=self._s, records=texts,
                columns=["id", "owner_id", "search_text", "updated_at"])
            await add_memories(conn, self._s, owner, len(mems))
            await add_terms(conn, self._s, owner, term_delta(added=[m[2] for m in mems]))
        return len(mems)

    # -- reads ------------------------------------------------------------------------

    async def _rows(self, owner: str, *, ids: Sequence[str] | None = None,
                    text_hash: str | None = None,
                    near: tuple[list[float], int] | None = None,
                    where: Mapping[str, Any] | None = None, limit: int | None = None,
                    offset: int = 0, vectors: bool = False) -> list[Row]:
        s = self._s
        p = Params()
        cols = MEMORY_COLUMNS + (", embedding" if vectors else "")
        mine = f"owner_id = {p(owner)}"
        async with self.backend.connection() as conn:
            if ids is not None:
                uuids = [u for u in map(as_uuid, ids) if u is not None]
                if not uuids:
                    return []
                rows = await conn.fetch(f"SELECT {cols} FROM {s}.memories WHERE {mine} "
                                        f"AND id = ANY({p(uuids)}::uuid[])", *p.values)
            elif text_hash is not None:
                rows = await conn.fetch(
                    f"""SELECT {cols} FROM {s}.memories WHERE {mine}
                        AND content_hash = {p(text_hash)} ORDER BY updated_at DESC""",
                    *p.values)
            elif near is not None:
                vector, k = near
                d = int(self.dim or 0)
                stats = await term_stats(conn, s, [owner], [])
                q = f"{p(vector)}::vector({d})"
                order = ("sim DESC" if prefer_exact(stats.docs, stats.table_docs or 0)
                         else f"{dim_sql(d)} <=> {q}")
                rows = await conn.fetch(
                    f"""SELECT {cols}, 1 - ({dim_sql(d)} <=> {q}) AS sim FROM {s}.memories
                        WHERE {mine} AND embedding_dim = {d} ORDER BY {order}
                        LIMIT {p(k)}""", *p.values)
            else:
                cond = mine + metadata_condition(p, where, "metadata")
                window = "" if limit is None else f" LIMIT {p(limit)}"
                rows = await conn.fetch(
                    f"""SELECT {cols} FROM {s}.memories WHERE {cond}
                        ORDER BY updated_at DESC, id{window} OFFSET {p(offset)}""", *p.values)
        return [Row(_memory(r),
                    None if not vectors or r["embedding"] is None
                    else [float(x) for x in r["embedding"].to_list()],
                    float(r["sim"]) if near is not None else None) for r in rows]

    async def _versions(self, owner: str, memory_id: str | None = None) -> list[MemoryVersion]:
        p = Params()
        cond = f"owner_id = {p(owner)}"
        if memory_id is not None:
            mid = as_uuid(memory_id)
            if mid is None:
                return []
            cond += f" AND (memory_id = {p(mid)} OR superseded_by = $2)"
        async with self.backend.connection() as conn:
            rows = await conn.fetch(f"""SELECT {VERSION_COLUMNS} FROM {self._s}.memory_versions
                                        WHERE {cond} ORDER BY valid_to, valid_from""", *p.values)
        return version_rows(rows)

    def _materialize(self, payload: Any) -> VectorMemory:
        return _memory(payload)

    async def _forget(self, owner: str) -> int:
        from .erase import L2_TABLES, erase

        async with self.backend.transaction() as conn:
            await self._lock_owner(conn, owner)
            gone = await self._count_in(conn, owner)
            await erase(conn, self._s, owner, L2_TABLES)
            await conn.execute(f"""DELETE FROM {self._s}.applied_ops
                                   WHERE owner_id = $1 AND kind NOT IN ('l1', 'l3')""", owner)
        return gone

    async def _count_in(self, conn: Any, owner: str) -> int:
        n = await conn.fetchval(
            f"SELECT memories FROM {self._s}.owner_memory_counts WHERE owner_id = $1", owner)
        return int(n or 0)
