"""L2 on PostgreSQL + pgvector: dedup-merge on store, candidates for hybrid search.

A search reads the owners' memory count (kept by the database in the transaction
of every write) and the table's rows, chooses a plan from them (``plan.py``), and
gathers its candidates in one statement (``statements.py``): the nearest memories
(exact scan or HNSW index, owner-filtered) and the memories containing the most
query terms (owner rows or trigram index), each with its exact cosine to the
query. The base class ranks them, so the scores equal every other backend's.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from ...errors import MemoryNotFound
from ...models import StoreResult, VectorMemory
from ...scoring import Candidate
from ...text import content_hash, fold
from ..base import VectorStore
from ..dedup import merged
from .migrations import dim_sql
from .plan import (
    EXACT_BREAK_EVEN,
    KEYWORD_SCAN_CAP,
    KEYWORD_SCAN_MAX,
    KEYWORD_SCAN_SHARE,
    MAX_STATEMENT_TERMS,
    RECENT_WINDOW,
    SearchPlan,
    prefer_exact,
    prefer_keyword_scan,
    search_plan,
)
from .pool import PostgresBackend, PostgresStore
from .statements import MEMORY_COLUMNS, candidate_statement

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


class PostgresVectorStore(PostgresStore, VectorStore):
    """L2 in the ``memories`` table."""

    def __init__(self, backend: PostgresBackend) -> None:
        super().__init__(backend)
        self.dim = backend.dim

    # -- counts the plan is chosen from ---------------------------------------------

    def _counts_sql(self, owners: Sequence[str]) -> str:
        """(owners' memories, table rows) on ``$1``, the owners as a ``text[]``. The
        table's rows from the planner's statistics (0 before the first ANALYZE)."""
        mine = "owner_id = ($1::text[])[1]" if len(owners) == 1 else "owner_id = ANY($1::text[])"
        return f"""SELECT (SELECT coalesce(sum(memories), 0)::bigint
                           FROM {self._s}.owner_memory_counts WHERE {mine}) AS owner_rows,
                          (SELECT greatest(reltuples, 0)::float8 FROM pg_class
                           WHERE oid = '{self._s}.memories'::regclass) AS table_rows"""

    async def _counts(self, conn: Any, owners: Sequence[str]) -> tuple[int, float]:
        row = await conn.fetchrow(self._counts_sql(owners), list(owners))
        return int(row["owner_rows"]), float(row["table_rows"])

    async def _add_memories(self, conn: Any, owner: str, n: int) -> None:
        if n < 0:  # the owner has a row: its memories were counted when written
            await conn.execute(f"""UPDATE {self._s}.owner_memory_counts
                                   SET memories = memories + $2 WHERE owner_id = $1""", owner, n)
            return
        await conn.execute(
            f"""INSERT INTO {self._s}.owner_memory_counts (owner_id, memories) VALUES ($1, $2)
                ON CONFLICT (owner_id) DO UPDATE
                SET memories = {self._s}.owner_memory_counts.memories + excluded.memories""",
            owner, n)

    async def search_plan(self, owners: Sequence[str], terms: Sequence[str] = (), *,
                          embedding: bool = True, keyword_k: int = 40) -> SearchPlan:
        """The plan a search of ``owners`` for ``terms`` would use now (one small query).

        For benchmarks and diagnostics: the search itself chooses the same way from
        the same counts (:func:`~.plan.search_plan`)."""
        async with self.backend.connection() as conn:
            mine, table = await self._counts(conn, owners)
        return search_plan(mine, table, owners=len(owners), embedding=embedding,
                           terms=terms, keyword_k=keyword_k)

    def statement(self, owners: Sequence[str], terms: Sequence[str],
                  embedding: list[float] | None, plan: SearchPlan, *, vector_k: int,
                  keyword_k: int, weights: Sequence[float] | None = None
                  ) -> tuple[str, list[Any]]:
        """The candidate statement of a search following ``plan``, with its arguments
        (for EXPLAIN in benchmarks and tests; ``weights`` default to 1 per term)."""
        w = [1.0] * len(terms) if weights is None else list(weights)
        return candidate_statement(self._s, self.dim, owners, terms, embedding, plan,
                                   vector_k=vector_k, keyword_k=keyword_k, weights=w)

    # -- writes -----------------------------------------------------------------------

    async def _lock_owner(self, conn: Any, owner: str) -> None:
        """Writes of one owner's memories take turns (dedup, counts)."""
        await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
                           f"{self._s}:l2:{owner}")

    async def _store(self, owner: str, content: str, embedding: list[float] | None,
                     metadata: dict[str, Any], *, threshold: float, now: datetime,
                     op_id: str | None) -> StoreResult:
        s = self._s
        async with self.backend.transaction() as conn:
            await self._lock_owner(conn, owner)
            if op_id is not None:
                prior = await conn.fetchval(
                    f"SELECT result FROM {s}.applied_ops WHERE owner_id = $1 AND op_id = $2",
                    owner, op_id)
                if prior is not None:
                    return StoreResult.model_validate_json(prior)
            result = await self._store_locked(conn, owner, content, embedding, metadata,
                                              threshold, now)
            if op_id is not None:
                await conn.execute(
                    f"""INSERT INTO {s}.applied_ops (owner_id, op_id, kind, result)
                        VALUES ($1, $2, 'store', $3::jsonb)""",
                    owner, op_id, result.model_dump_json())
            return result

    async def _store_locked(self, conn: Any, owner: str, content: str,
                            embedding: list[float] | None, metadata: dict[str, Any],
                            threshold: float, now: datetime) -> StoreResult:
        s = self._s
        target = None
        similarity: float | None = None
        if embedding is not None:
            d = self.dim or 0
            order = "sim DESC" if prefer_exact(*await self._counts(conn, [owner])) else (
                f"{dim_sql(d)} <=> $2::vector({d})")
            row = await conn.fetchrow(
                f"""SELECT {MEMORY_COLUMNS}, 1 - ({dim_sql(d)} <=> $2::vector({d})) AS sim
                    FROM {s}.memories WHERE owner_id = $1 AND embedding_dim = {int(d)}
                    ORDER BY {order} LIMIT 1""",
                owner, embedding)
            if row is not None and row["sim"] > threshold:
                target, similarity = row, float(row["sim"])
        if target is None:
            target = await conn.fetchrow(
                f"""SELECT {MEMORY_COLUMNS} FROM {s}.memories
                    WHERE owner_id = $1 AND content_hash = $2
                    ORDER BY updated_at DESC LIMIT 1""", owner, content_hash(content))
        if target is not None:
            new = merged(_memory(target), content, metadata, now)
            await conn.execute(
                f"""UPDATE {s}.memories SET content = $2, content_hash = $3,
                        metadata = $4::jsonb, updated_at = $5 WHERE id = $1""",
                uuid.UUID(new.id), new.content, content_hash(new.content),
                json.dumps(new.metadata), new.updated_at)
            await conn.execute(
                f"UPDATE {s}.memory_text SET search_text = $2, updated_at = $3 WHERE id = $1",
                uuid.UUID(new.id), fold(new.content), new.updated_at)
            return StoreResult(memory=new, merged=True, similarity=similarity)
        mem = VectorMemory(owner=owner, content=content, metadata=metadata, created_at=now,
                           updated_at=now, has_embedding=embedding is not None)
        await conn.execute(
            f"""INSERT INTO {s}.memories (id, owner_id, content, content_hash,
                    metadata, embedding, embedding_dim, created_at, updated_at)
                VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7, $8, $8)""",
            uuid.UUID(mem.id), owner, content, content_hash(content),
            json.dumps(metadata), embedding, None if embedding is None else self.dim, now)
        await conn.execute(
            f"""INSERT INTO {s}.memory_text (id, owner_id, search_text, updated_at)
                VALUES ($1, $2, $3, $4)""", uuid.UUID(mem.id), owner, fold(content), now)
        await self._add_memories(conn, owner, 1)
        return StoreResult(memory=mem, merged=False)

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
            await self._add_memories(conn, owner, len(mems))
        return len(mems)

    # -- search -----------------------------------------------------------------------

    async def _candidates(self, owners: Sequence[str], terms: Sequence[str],
                          embedding: list[float] | None, *, vector_k: int,
                          keyword_k: int) -> list[Candidate]:
        # Bounded statement size; ranking still scores every term.
        terms = list(terms[:MAX_STATEMENT_TERMS])
        async with self.backend.connection() as conn:
            mine, table = await self._counts(conn, owners)
            plan = search_plan(mine, table, owners=len(owners),
                               embedding=embedding is not None, terms=terms,
                               keyword_k=keyword_k)
            sql, args = self.statement(owners, terms, embedding, plan, vector_k=vector_k,
                                       keyword_k=keyword_k)
            rows = await conn.fetch(sql, *args)
        return [Candidate(str(r["id"]), r["content"], r["updated_at"],
                          None if r["sim"] is None else float(r["sim"]), r, r["search_text"])
                for r in rows]

    def _materialize(self, payload: Any) -> VectorMemory:
        return _memory(payload)

    # -- reads and deletes ------------------------------------------------------------

    async def get(self, owner: str, memory_id: str) -> VectorMemory:
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
            await self._add_memories(conn, owner, -1)
        return True

    async def _list(self, owner: str, limit: int, offset: int) -> list[VectorMemory]:
        async with self.backend.connection() as conn:
            rows = await conn.fetch(
                f"""SELECT {MEMORY_COLUMNS} FROM {self._s}.memories WHERE owner_id = $1
                    ORDER BY updated_at DESC, id LIMIT $2 OFFSET $3""", owner, limit, offset)
        return [_memory(r) for r in rows]

    async def count(self, owner: str) -> int:
        async with self.backend.connection() as conn:
            n = await conn.fetchval(
                f"SELECT memories FROM {self._s}.owner_memory_counts WHERE owner_id = $1",
                owner)
        return int(n or 0)
