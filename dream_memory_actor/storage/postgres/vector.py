"""L2 on PostgreSQL + pgvector: dedup-merge on store, versions, lifecycle; the search
candidates are gathered in ``search``."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from ...errors import MemoryNotFound, SchemaError
from ...models import EmbeddingModel, MemoryVersion, StoreResult, VectorMemory
from ...text import content_hash, fold
from ..dedup import Cuts, Neighbour, decide, outcome_of
from ..vector_l2 import BatchItem
from ..versions import closed, successor, updated
from .counts import add_memories, add_terms, term_delta, term_stats
from .migrations import dim_sql
from .plan import (
    EXACT_BREAK_EVEN,
    KEYWORD_SCAN_CAP,
    KEYWORD_SCAN_MAX,
    KEYWORD_SCAN_SHARE,
    RECENT_WINDOW,
    SearchPlan,
    prefer_exact,
    prefer_keyword_scan,
    search_plan,
)
from .pool import PostgresBackend
from .search import PostgresSearch
from .statements import (
    MEMORY_COLUMNS,
    Params,
    metadata_condition,
)
from .versions import (
    VERSION_COLUMNS,
    add_version,
    as_uuid,
    prior_result,
    record_op,
    version_rows,
)

__all__ = [
    "EXACT_BREAK_EVEN",
    "KEYWORD_SCAN_CAP",
    "KEYWORD_SCAN_MAX",
    "KEYWORD_SCAN_SHARE",
    "RECENT_WINDOW",
    "PostgresVectorStore",
    "SearchPlan",
    "prefer_exact",
    "prefer_keyword_scan",
    "search_plan",
]


def _memory(row: Any) -> VectorMemory:
    return VectorMemory(
        id=str(row["id"]), owner=row["owner_id"], content=row["content"],
        metadata=json.loads(row["metadata"]), created_at=row["created_at"],
        updated_at=row["updated_at"], has_embedding=row["has_embedding"])


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


class PostgresVectorStore(PostgresSearch):
    """L2 in the ``memories`` table."""

    def __init__(self, backend: PostgresBackend) -> None:
        super().__init__(backend)
        self.dim = backend.dim
        self._codepoint_order = None  # see PostgresSearch
        self._last_counts = None

    # -- the embedding model ------------------------------------------------------------

    async def _recorded(self) -> EmbeddingModel | None:
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

    async def _record(self, model: EmbeddingModel) -> None:
        async with self.backend.connection() as conn:
            await conn.execute(
                f"""INSERT INTO {self._s}.embedding_model (model, dim, calibration, recorded_at)
                VALUES ($1, $2, $3::jsonb, $4) ON CONFLICT (only_row) DO NOTHING""",
                model.model, model.dim,
                None if model.calibration is None else json.dumps(model.calibration),
                model.recorded_at)

    # -- writes -----------------------------------------------------------------------

    async def _lock_owner(self, conn: Any, owner: str) -> None:
        """Writes of one owner's memories take turns (dedup, counts)."""
        await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
                           f"{self._s}:l2:{owner}")

    async def _store(self, owner: str, content: str, embedding: list[float] | None,
                     metadata: dict[str, Any], *, cuts: Cuts, now: datetime,
                     op_id: str | None) -> StoreResult:
        s = self._s
        async with self.backend.transaction() as conn:
            await self._lock_owner(conn, owner)
            prior = await prior_result(conn, s, owner, op_id)
            if prior is not None:
                return StoreResult.model_validate_json(prior)
            result = await self._store_locked(conn, owner, content, embedding, metadata,
                                              cuts, now)
            await record_op(conn, s, owner, op_id, "store", result.model_dump_json())
            return result

    async def _neighbours(self, conn: Any, owner: str, content: str,
                          embedding: list[float] | None, nearest: int
                          ) -> dict[str, tuple[Any, float | None]]:
        """The owner's ``nearest`` memories most similar to ``embedding`` and the memory
        of the same text: rows by id, with their cosine (``None``: found by the text)."""
        s = self._s
        found: dict[str, tuple[Any, float | None]] = {}
        if embedding is not None:
            d = self.dim or 0
            stats = await term_stats(conn, s, [owner], [])
            order = "sim DESC" if prefer_exact(stats.docs, stats.table_docs or 0) else (
                f"{dim_sql(d)} <=> $2::vector({d})")
            for row in await conn.fetch(
                    f"""SELECT {MEMORY_COLUMNS}, 1 - ({dim_sql(d)} <=> $2::vector({d})) AS sim
                        FROM {s}.memories WHERE owner_id = $1 AND embedding_dim = {int(d)}
                        ORDER BY {order} LIMIT $3""", owner, embedding, nearest):
                found[str(row["id"])] = (row, float(row["sim"]))
        same = await conn.fetchrow(
            f"""SELECT {MEMORY_COLUMNS} FROM {s}.memories
                WHERE owner_id = $1 AND content_hash = $2
                ORDER BY updated_at DESC LIMIT 1""", owner, content_hash(content))
        if same is not None and str(same["id"]) not in found:
            found[str(same["id"])] = (same, None)
        return found

    async def _store_locked(self, conn: Any, owner: str, content: str,
                            embedding: list[float] | None, metadata: dict[str, Any],
                            cuts: Cuts, now: datetime) -> StoreResult:
        s = self._s
        found = await self._neighbours(conn, owner, content, embedding, cuts.nearest)
        j = await decide(content, [Neighbour(mid, row["content"], sim)
                                   for mid, (row, sim) in found.items()], cuts)
        near = None if j is None or j.memory_id is None else _memory(found[j.memory_id][0])
        w = outcome_of(j, near, owner, content, metadata, embedding is not None, now,
                       self.limits)
        new = w.memory
        if w.version is not None:
            await add_version(conn, s, w.version)
        if not w.inserts:
            assert near is not None
            await conn.execute(
                f"""UPDATE {s}.memories SET content = $2, content_hash = $3,
                        metadata = $4::jsonb, updated_at = $5 WHERE id = $1""",
                uuid.UUID(new.id), new.content, content_hash(new.content),
                json.dumps(new.metadata), new.updated_at)
            await conn.execute(
                f"UPDATE {s}.memory_text SET search_text = $2, updated_at = $3 WHERE id = $1",
                uuid.UUID(new.id), fold(new.content), new.updated_at)
            if new.content != near.content:
                await add_terms(conn, s, owner, term_delta([near.content], [new.content]))
            return w.result
        if w.removes is not None:  # its text row goes with it (ON DELETE CASCADE)
            await conn.execute(f"DELETE FROM {s}.memories WHERE id = $1",
                               uuid.UUID(w.removes))
        await conn.execute(
            f"""INSERT INTO {s}.memories (id, owner_id, content, content_hash,
                    metadata, embedding, embedding_dim, created_at, updated_at)
                VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7, $8, $8)""",
            uuid.UUID(new.id), owner, content, content_hash(content),
            json.dumps(new.metadata), embedding, None if embedding is None else self.dim, now)
        await conn.execute(
            f"""INSERT INTO {s}.memory_text (id, owner_id, search_text, updated_at)
                VALUES ($1, $2, $3, $4)""", uuid.UUID(new.id), owner, fold(content), now)
        if w.removes is None:
            await add_memories(conn, s, owner, 1)
            await add_terms(conn, s, owner, term_delta(added=[content]))
        else:
            assert near is not None
            await add_terms(conn, s, owner, term_delta([near.content], [content]))
        return w.result

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

    # -- versioned writes: one transaction each, history in memory_versions ----------

    async def _live(self, conn: Any, owner: str, memory_id: str) -> VectorMemory:
        mid = as_uuid(memory_id)
        row = (
            None
            if mid is None
            else await conn.fetchrow(
                f"SELECT {MEMORY_COLUMNS} FROM {self._s}.memories WHERE owner_id = $1 AND id = $2",
                owner,
                mid,
            )
        )
        if row is None:
            raise MemoryNotFound(f"owner {owner!r} has no memory {memory_id!r}")
        return _memory(row)

    async def _store_many(
        self, owner: str,
        items: Sequence[BatchItem],
        *,
        cuts: Cuts,
        now: datetime,
        op_id: str | None,
    ) -> list[StoreResult]:
        """Every item as ``store`` decides it, in order, in one transaction."""
        s = self._s
        async with self.backend.transaction() as conn:
            await self._lock_owner(conn, owner)
            prior = await prior_result(conn, s, owner, op_id)
            if prior is not None:
                return [StoreResult.model_validate(r) for r in json.loads(prior)]
            results = [
                await self._store_locked(conn, owner, text, vec, meta, cuts, now)
                for text, vec, meta in items
            ]
            await record_op(
                conn,
                s,
                owner,
                op_id,
                "store_many",
                json.dumps([r.model_dump(mode="json") for r in results]),
            )
            return results

    async def _update(
        self, owner: str,
        memory_id: str,
        content: str,
        embedding: list[float] | None,
        metadata: dict[str, Any] | None,
        *,
        now: datetime,
        op_id: str | None,
    ) -> VectorMemory:
        s = self._s
        async with self.backend.transaction() as conn:
            await self._lock_owner(conn, owner)
            prior = await prior_result(conn, s, owner, op_id)
            if prior is not None:
                return VectorMemory.model_validate_json(prior)
            old = await self._live(conn, owner, memory_id)
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
                None if embedding is None else self.dim,
                new.updated_at,
            )
            await conn.execute(
                f"UPDATE {s}.memory_text SET search_text = $2, updated_at = $3 WHERE id = $1",
                uuid.UUID(new.id),
                fold(new.content),
                new.updated_at,
            )
            await add_terms(conn, s, owner, term_delta([old.content], [new.content]))
            await record_op(conn, s, owner, op_id, "update", new.model_dump_json())
            return new

    async def _supersede(
        self, owner: str,
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
        s = self._s
        async with self.backend.transaction() as conn:
            await self._lock_owner(conn, owner)
            prior = await prior_result(conn, s, owner, op_id)
            if prior is not None:
                return VectorMemory.model_validate_json(prior)
            old = await self._live(conn, owner, memory_id)
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
                None if embedding is None else self.dim,
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
            await record_op(conn, s, owner, op_id, "supersede", new.model_dump_json())
            return new

    async def _history(self, owner: str, memory_id: str) -> list[MemoryVersion]:
        mid = as_uuid(memory_id)
        if mid is None:
            return []
        async with self.backend.connection() as conn:
            rows = await conn.fetch(
                f"""SELECT {VERSION_COLUMNS} FROM {self._s}.memory_versions
                    WHERE owner_id = $1 AND (memory_id = $2 OR superseded_by = $2)""",
                owner,
                mid,
            )
        return version_rows(rows)

    async def _all_versions(self, owner: str) -> list[MemoryVersion]:
        """Every closed version of the owner's memories (for export)."""
        async with self.backend.connection() as conn:
            rows = await conn.fetch(
                f"""SELECT {VERSION_COLUMNS} FROM {self._s}.memory_versions WHERE owner_id = $1
                    ORDER BY valid_to, valid_from""", owner)
        return version_rows(rows)

    async def _restore_versions(self, owner: str, found: Sequence[MemoryVersion]) -> None:
        """Insert exported closed versions as they were (an import)."""
        async with self.backend.transaction() as conn:
            for v in found:
                await add_version(conn, self._s, v)

    # -- search -----------------------------------------------------------------------

    def _materialize(self, payload: Any) -> VectorMemory:
        return _memory(payload)

    # -- reads and deletes ------------------------------------------------------------

    async def _get(self, owner: str, memory_id: str) -> VectorMemory:
        row = None
        if _is_uuid(memory_id):
            async with self.backend.connection() as conn:
                row = await conn.fetchrow(
                    f"""SELECT {MEMORY_COLUMNS} FROM {self._s}.memories
                        WHERE owner_id = $1 AND id = $2""", owner, uuid.UUID(memory_id))
        if row is None:
            raise MemoryNotFound(f"owner {owner!r} has no memory {memory_id!r}")
        return _memory(row)

    async def _delete(self, owner: str, memory_id: str) -> bool:
        if not _is_uuid(memory_id):
            return False
        async with self.backend.transaction() as conn:
            await self._lock_owner(conn, owner)
            gone = await conn.fetchval(
                f"""DELETE FROM {self._s}.memories WHERE owner_id = $1 AND id = $2
                    RETURNING content""", owner, uuid.UUID(memory_id))
            if gone is None:
                return False
            await add_memories(conn, self._s, owner, -1)
            await add_terms(conn, self._s, owner, term_delta(removed=[gone]))
        return True

    async def _list(self, owner: str, limit: int, offset: int,
                    where: Mapping[str, Any] | None = None) -> list[VectorMemory]:
        p = Params()
        mine = f"owner_id = {p(owner)}" + metadata_condition(p, where, "metadata")
        async with self.backend.connection() as conn:
            rows = await conn.fetch(
                f"""SELECT {MEMORY_COLUMNS} FROM {self._s}.memories WHERE {mine}
                    ORDER BY updated_at DESC, id LIMIT {p(limit)} OFFSET {p(offset)}""",
                *p.values)
        return [_memory(r) for r in rows]

    async def _dump(self, owner: str) -> list[tuple[VectorMemory, list[float] | None]]:
        async with self.backend.connection() as conn:
            rows = await conn.fetch(
                f"""SELECT {MEMORY_COLUMNS}, embedding FROM {self._s}.memories
                    WHERE owner_id = $1""", owner)
        return [(_memory(r), None if r["embedding"] is None
                 else [float(x) for x in r["embedding"].to_list()]) for r in rows]

    async def _restore(self, owner: str,
                       items: Sequence[tuple[VectorMemory, list[float] | None]]) -> None:
        s = self._s
        async with self.backend.transaction() as conn:
            await self._lock_owner(conn, owner)
            await conn.executemany(
                f"""INSERT INTO {s}.memories (id, owner_id, content, content_hash,
                        metadata, embedding, embedding_dim, created_at, updated_at)
                    VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7, $8, $9)""",
                [(uuid.UUID(m.id), owner, m.content, content_hash(m.content),
                  json.dumps(m.metadata), vec, None if vec is None else self.dim,
                  m.created_at, m.updated_at) for m, vec in items])
            await conn.executemany(
                f"""INSERT INTO {s}.memory_text (id, owner_id, search_text, updated_at)
                    VALUES ($1, $2, $3, $4)""",
                [(uuid.UUID(m.id), owner, fold(m.content), m.updated_at) for m, _ in items])
            await add_memories(conn, s, owner, len(items))
            await add_terms(conn, s, owner, term_delta(added=[m.content for m, _ in items]))


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

    async def count(self, owner: str) -> int:
        async with self.backend.connection() as conn:
            return await self._count_in(conn, owner)
