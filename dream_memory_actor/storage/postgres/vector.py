"""L2 on PostgreSQL + pgvector: dedup-merge on store, candidates for hybrid search.

A search reads the owners' memory count, the table's rows and the query terms'
document frequencies, all kept by the database in the transaction of every write
(``counts.py``), chooses a plan from them (``plan.py``) and gathers the candidates
in one statement (``statements.py``): the nearest memories (exact scan or HNSW
index, owner-filtered) and the memories with the highest sum of the weights of
the terms they contain (owner rows or trigram index), each with its exact cosine
to the query. The base class ranks them, so the scores equal every other backend's.

Reading the counts first costs a round trip. So a search is planned from the
counts the previous one read, and one statement reads the counts and, only where
they choose that same plan, the candidates (``counted_statement``); where they do
not, the search is planned again from the counts it just read. Either way the
plan is the one the current counts choose, and the results are the same.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from ...errors import MemoryNotFound
from ...models import MemoryVersion, StoreResult, VectorMemory
from ...scoring import MAX_QUERY_TERMS, Candidate, TermStats, strongest_terms, term_weights
from ...text import content_hash, fold, query_terms
from ..base import VectorStore
from ..dedup import merged
from ..vector_l2 import BatchItem
from . import versions
from .counts import CODEPOINT_ORDER_SQL, add_memories, add_terms, found_df, term_delta, term_stats
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
    same_plan_rows,
    search_plan,
)
from .pool import PostgresBackend, PostgresStore
from .statements import (
    MEMORY_COLUMNS,
    Params,
    candidate_statement,
    counted_statement,
    metadata_condition,
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


def _plan(stats: TermStats, owners: Sequence[str], terms: Sequence[str], *,
          embedding: bool, keyword_k: int) -> SearchPlan:
    return search_plan(stats.docs, float(stats.table_docs or 0), owners=len(owners),
                       embedding=embedding, terms=terms, keyword_k=keyword_k, df=stats.df)


def _paths(plan: SearchPlan) -> tuple[Any, ...]:
    """What a plan does, without the counts it was chosen from."""
    return plan.vector, plan.keyword, plan.recent_window, plan.split


def _candidates_of(rows: Iterable[Any]) -> list[Candidate]:
    return [Candidate(str(r["id"]), r["content"], r["updated_at"],
                      None if r["sim"] is None else float(r["sim"]), r, r["search_text"])
            for r in rows]


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
        self._codepoint_order: bool | None = None  # the database's collation, probed once
        #: (owner rows, table rows) the last search read: the next one is planned from
        #: them, and checks in its statement that its own counts choose the same.
        self._last_counts: tuple[int, int] | None = None

    # -- counts the plan is chosen from ---------------------------------------------

    async def _term_stats(self, owners: Sequence[str], terms: Sequence[str]) -> TermStats:
        """The owners' memory count, the table's rows and the terms' document
        frequencies, kept by the database with every write: one round trip."""
        async with self.backend.connection() as conn:
            if self._codepoint_order is None:
                self._codepoint_order = bool(await conn.fetchval(CODEPOINT_ORDER_SQL))
            stats = await term_stats(conn, self._s, owners, terms,
                                     codepoint_order=self._codepoint_order)
        self._last_counts = (stats.docs, stats.table_docs or 0)
        return stats

    async def search_plan(self, owners: Sequence[str], terms: Sequence[str] = (), *,
                          embedding: bool = True, keyword_k: int = 40) -> SearchPlan:
        """The plan a search of ``owners`` for ``terms`` (``text.terms`` of the query)
        would use now: the counts of :meth:`_term_stats` through :func:`~.plan.search_plan`,
        exactly as the search chooses. For benchmarks and diagnostics."""
        return _plan(await self._term_stats(owners, terms), owners, terms,
                     embedding=embedding, keyword_k=keyword_k)

    def statement(self, owners: Sequence[str], terms: Sequence[str],
                  embedding: list[float] | None, plan: SearchPlan, *, vector_k: int,
                  keyword_k: int, weights: Sequence[float] | None = None,
                  where: Mapping[str, Any] | None = None) -> tuple[str, list[Any]]:
        """The candidate statement of a search following ``plan``, with its arguments
        (for EXPLAIN in benchmarks and tests; ``weights`` default to 1 per term)."""
        w = [1.0] * len(terms) if weights is None else list(weights)
        return candidate_statement(self._s, self.dim, owners, terms, embedding, plan,
                                   vector_k=vector_k, keyword_k=keyword_k, weights=w,
                                   where=where)

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
            stats = await term_stats(conn, s, [owner], [])
            order = "sim DESC" if prefer_exact(stats.docs, stats.table_docs or 0) else (
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
            new = merged(_memory(target), content, metadata, now, self.limits)
            await conn.execute(
                f"""UPDATE {s}.memories SET content = $2, content_hash = $3,
                        metadata = $4::jsonb, updated_at = $5 WHERE id = $1""",
                uuid.UUID(new.id), new.content, content_hash(new.content),
                json.dumps(new.metadata), new.updated_at)
            await conn.execute(
                f"UPDATE {s}.memory_text SET search_text = $2, updated_at = $3 WHERE id = $1",
                uuid.UUID(new.id), fold(new.content), new.updated_at)
            if new.content != target["content"]:
                await add_terms(conn, s, owner, term_delta([target["content"]], [new.content]))
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
        await add_memories(conn, s, owner, 1)
        await add_terms(conn, s, owner, term_delta(added=[content]))
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
            await add_memories(conn, self._s, owner, len(mems))
            await add_terms(conn, self._s, owner, term_delta(added=[m[2] for m in mems]))
        return len(mems)

    async def _store_many(self, owner: str, items: Sequence[BatchItem], *, threshold: float,
                          now: datetime, op_id: str | None) -> list[StoreResult]:
        return await versions.store_many(self, owner, items, threshold=threshold, now=now,
                                         op_id=op_id)

    async def _update(self, owner: str, memory_id: str, content: str,
                      embedding: list[float] | None, metadata: dict[str, Any] | None, *,
                      now: datetime, op_id: str | None) -> VectorMemory:
        return await versions.update(self, owner, memory_id, content, embedding, metadata,
                                     now=now, op_id=op_id)

    async def _supersede(self, owner: str, memory_id: str, content: str,
                         embedding: list[float] | None, metadata: dict[str, Any] | None, *,
                         by: str | None, reason: str | None, now: datetime,
                         op_id: str | None) -> VectorMemory:
        return await versions.supersede(self, owner, memory_id, content, embedding, metadata,
                                        by=by, reason=reason, now=now, op_id=op_id)

    async def _history(self, owner: str, memory_id: str) -> list[MemoryVersion]:
        return await versions.history(self, owner, memory_id)

    # -- search -----------------------------------------------------------------------

    async def _weighted_candidates(self, owners: Sequence[str], query: str,
                                   embedding: list[float] | None, *, vector_k: int,
                                   keyword_k: int, where: Mapping[str, Any] | None = None
                                   ) -> tuple[list[str], list[float], list[Candidate]]:
        """Counts and candidates in one round trip where the counts of the last search
        choose a plan of one statement and the query keeps all its terms; otherwise,
        or where this search's counts choose otherwise, counts first, then candidates
        (always with a metadata filter)."""
        found = query_terms(query)
        last = self._last_counts
        if (not found or len(found) > MAX_QUERY_TERMS or last is None or where is not None
                or self._codepoint_order is None):
            return await super()._weighted_candidates(owners, query, embedding,
                                                      vector_k=vector_k, keyword_k=keyword_k,
                                                      where=where)
        guess = search_plan(last[0], float(last[1]), owners=len(owners),
                            embedding=embedding is not None, terms=found, keyword_k=keyword_k)
        if guess.split or guess.recent_window:  # two statements, or a plan the df decide
            return await super()._weighted_candidates(owners, query, embedding,
                                                      vector_k=vector_k, keyword_k=keyword_k,
                                                      where=where)
        rows = await self._fetch(counted_statement(
            self._s, self.dim, owners, found, embedding, guess, vector_k=vector_k,
            keyword_k=keyword_k, owner_rows=same_plan_rows(*last), table_rows=last[1],
            codepoint_order=self._codepoint_order))
        head = next(r for r in rows if r["st_docs"] is not None)
        stats = TermStats(int(head["st_docs"]), found_df(head["st_terms"], head["st_df"]),
                          int(head["st_table"]))
        self._last_counts = (stats.docs, stats.table_docs or 0)
        weights = term_weights(found, stats)
        plan = _plan(stats, owners, found, embedding=embedding is not None,
                     keyword_k=keyword_k)
        kept, kept_weights = strongest_terms(found, weights, stats)
        if head["st_same"] and _paths(plan) == _paths(guess) and list(head["st_w"]) == weights:
            # A term no memory has matches none of them, so the candidates ranked with
            # every term are those of the terms kept; the share counts the kept ones.
            return kept, kept_weights, _candidates_of(r for r in rows if r["st_docs"] is None)
        return kept, kept_weights, await self._candidates(
            owners, kept, embedding, vector_k=vector_k, keyword_k=keyword_k,
            weights=kept_weights, stats=stats)

    async def _candidates(self, owners: Sequence[str], terms: Sequence[str],
                          embedding: list[float] | None, *, vector_k: int, keyword_k: int,
                          weights: Sequence[float] | None = None,
                          stats: TermStats | None = None,
                          where: Mapping[str, Any] | None = None) -> list[Candidate]:
        """Candidates of the plan the counts in ``stats`` choose (read first when not
        given); keyword candidates ordered by the sum of ``weights`` (default 1 each)
        of the terms they contain, then newest, then smallest id."""
        if stats is None:
            stats = await self._term_stats(owners, terms)
        w = [1.0] * len(terms) if weights is None else [float(x) for x in weights]
        if len(terms) > MAX_STATEMENT_TERMS:  # the highest weights; ties: the earlier term
            keep = sorted(sorted(range(len(terms)), key=lambda i: (-w[i], i))
                          [:MAX_STATEMENT_TERMS])
            terms, w = [terms[i] for i in keep], [w[i] for i in keep]
        plan = _plan(stats, owners, terms, embedding=embedding is not None,
                     keyword_k=keyword_k)
        if plan.split:  # two connections: the search costs the slower branch
            parts = await asyncio.gather(*(
                self._fetch(self.statement(owners, terms, embedding, p, vector_k=vector_k,
                                           keyword_k=keyword_k, weights=w, where=where))
                for p in (replace(plan, keyword=None), replace(plan, vector=None))))
            rows = [r for part in parts for r in part]
        else:
            rows = await self._fetch(self.statement(owners, terms, embedding, plan,
                                                    vector_k=vector_k, keyword_k=keyword_k,
                                                    weights=w, where=where))
        return _candidates_of(rows)

    async def _fetch(self, statement: tuple[str, list[Any]]) -> list[Any]:
        async with self.backend.connection() as conn:
            return list(await conn.fetch(statement[0], *statement[1]))

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

    async def _all_versions(self, owner: str) -> list[MemoryVersion]:
        return await versions.all_versions(self, owner)

    async def _restore_versions(self, owner: str, found: Sequence[MemoryVersion]) -> None:
        await versions.restore_versions(self, owner, list(found))

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
