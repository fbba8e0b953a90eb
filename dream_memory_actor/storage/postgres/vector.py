"""L2 on PostgreSQL + pgvector: the ``memories`` table, its text rows and counts, and
the closed versions in ``memory_versions``; the candidates of a search.

A write is one transaction (``PostgresBackend.unit``: the plan's reads join it)
under the owner's advisory lock, which the owner's other L2 writes wait for; its
``op_id`` is recorded with its result in ``applied_ops`` in the same transaction.

A search reads the owners' memory count, the table's rows and the query terms'
document frequencies, all kept by the database in the transaction of every write
(``counts.py``), chooses a plan from them (``plan.py``) and gathers the candidates
in one statement (``statements.py``): the nearest memories (exact scan or HNSW
index, owner-filtered) and the memories with the highest sum of the weights of
the terms they contain (owner rows or trigram index), each with its exact cosine
to the query. ``VectorStore`` ranks them, so the scores equal every other backend's.

An owner of at most ``KEPT_MAX_ROWS`` memories is searched in this process's copy of
its rows (``owner_rows``) while its version token, read with the counts, says the copy
is current: no statement runs after the query's vector. Every write gives the owner a
new token (``counts.add_memories``), and this process's own writes keep its copy in
step (:meth:`PostgresVectorStore._write`). ``python -m benchmarks search-latency
--owners 1 --per-owner 1000``, alternating with the statements: p50 1.54-1.76 -> 0.86-
0.88 ms, p95 1.63-1.86 -> 0.92-0.95 ms.

Reading the counts first costs a round trip. So a search is planned from the
counts the previous one read, and one statement reads the counts and, only where
they choose that same plan, the candidates (``counted_statement``); where they do
not, the search is planned again from the counts it just read. Either way the
plan is the one the current counts choose, and the results are the same. This is
kept for what it saves against reading the counts first, each query timed both
ways in alternating order (``python -m benchmarks search-latency --owners 1
--per-owner N --counts-first-pairs``). Where the plan runs the two branches on two
connections (``SearchPlan.split``: owners large enough that each branch costs a
millisecond or more), the counts come with the
keyword branch, which weights its terms by them, and the nearest memories meanwhile.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import replace
from datetime import datetime
from typing import Any

import numpy as np
from pgvector import Vector

from ...errors import SchemaError
from ...models import EmbeddingModel, MemoryVersion, VectorMemory
from ...scoring import MAX_QUERY_TERMS, Candidate, TermStats, strongest_terms, term_weights
from ...text import content_hash, fold, query_terms, with_context
from ..owner_rows import OwnerRows, RowCache, candidates, make_row
from ..vector import VectorStore
from ..writes import Planner, Row, Writes
from .counts import (
    CODEPOINT_ORDER_SQL,
    add_memories,
    add_terms,
    found_df,
    found_versions,
    term_delta,
    term_stats,
)
from .migrations import dim_sql
from .plan import MAX_STATEMENT_TERMS, SearchPlan, prefer_exact, same_plan_rows, search_plan
from .pool import PostgresStore
from .search_text import search_text
from .statements import (
    MEMORY_COLUMNS,
    Params,
    candidate_statement,
    counted_statement,
    keyword_statement,
    metadata_condition,
)
from .versions import VERSION_COLUMNS, as_uuid, prior_result, record_op, version_rows

#: Owners searched together holding at most this many memories are searched in this
#: process's copy of their rows (``owner_rows``) while their version tokens say it is
#: current: the statistics a search reads during its query's embedding check them,
#: and no statement runs after the vector. Larger owners are searched by the
#: statements of ``plan.py``.
KEPT_MAX_ROWS = 5000
#: Owners whose last read tokens are remembered (see ``PostgresVectorStore._kept``).
SEEN_OWNERS = 4096

_INSERT = """INSERT INTO {s}.memories (id, owner_id, content, content_hash, metadata, embedding,
                 embedding_dim, created_at, updated_at, context)
             VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7, $8, $9, $10)"""
_INSERT_TEXT = """INSERT INTO {s}.memory_text (id, owner_id, search_text, updated_at)
                  VALUES ($1, $2, $3, $4)"""
_UPDATE_TEXT = "UPDATE {s}.memory_text SET search_text = $2, updated_at = $3 WHERE id = $1"


def _memory(row: Any) -> VectorMemory:
    return VectorMemory(
        id=str(row["id"]), owner=row["owner_id"], content=row["content"],
        metadata=json.loads(row["metadata"]), context=row["context"],
        created_at=row["created_at"],
        updated_at=row["updated_at"], has_embedding=row["has_embedding"])



def _paths(plan: SearchPlan) -> tuple[Any, ...]:
    """What a plan does, without the counts it was chosen from."""
    return plan.vector, plan.keyword, plan.recent_window, plan.split


def _candidates_of(rows: Iterable[Any]) -> list[Candidate]:
    """Candidates of the statement's rows, each with its folded content and context,
    which the keyword signal reads. The statement does not send ``search_text``: a list
    of runs is no text to show, and folding the rows here took as long as sending it
    (alternating runs, LoCoMo's searches with their vectors given)."""
    return [Candidate(str(r["id"]), r["content"], r["updated_at"],
                      None if r["sim"] is None else float(r["sim"]), r,
                      fold(with_context(r["content"], r["context"])))
            for r in rows]


def _statement_terms(terms: Sequence[str], weights: Sequence[float]
                     ) -> tuple[list[str], list[float]]:
    """The terms one candidate statement tests and their weights: at most
    ``MAX_STATEMENT_TERMS``, those of the highest weights (ties: the earlier term)."""
    w = [float(x) for x in weights]
    if len(terms) <= MAX_STATEMENT_TERMS:
        return list(terms), w
    keep = sorted(sorted(range(len(terms)), key=lambda i: (-w[i], i))[:MAX_STATEMENT_TERMS])
    return [terms[i] for i in keep], [w[i] for i in keep]


class PostgresVectorStore(PostgresStore, VectorStore):
    """L2 in the ``memories`` table."""

    dim: int | None
    _codepoint_order: bool | None  #: the database's collation, probed once
    #: (owner rows, table rows) the last search read: the next one is planned from
    #: them, and checks in its statement that its own counts choose the same.
    _last_counts: tuple[int, int] | None

    def __init__(self, backend: Any) -> None:
        super().__init__(backend)
        self.dim = backend.dim
        self._codepoint_order = None
        self._last_counts = None
        #: Rows of searched owners (``owner_rows``), and per owner the token the last
        #: search read: rows are fetched when two searches in a row read the same.
        self._cache = RowCache(max_rows=backend.cache_rows)
        self._seen: OrderedDict[str, str] = OrderedDict()
        #: Inside a write: per owner, whether its near reads scan exactly (see
        #: :meth:`_exact_near`).
        self._near_paths: ContextVar[dict[str, bool] | None] = ContextVar(
            f"dream_memory_near_paths_{id(self)}", default=None)

    # -- the embedding model ------------------------------------------------------------

    async def _model(self, record: EmbeddingModel | None, *, replace: bool = False
                     ) -> EmbeddingModel | None:
        if record is not None:
            conflict = ("DO UPDATE SET model = $1, dim = $2, calibration = $3::jsonb, "
                        "recorded_at = $4" if replace else "DO NOTHING")
            async with self.backend.connection() as conn:
                await conn.execute(
                    f"""INSERT INTO {self._s}.embedding_model (model, dim, calibration,
                            recorded_at)
                        VALUES ($1, $2, $3::jsonb, $4) ON CONFLICT (only_row) {conflict}""",
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

    async def _reads(self, owner: str, noted: Mapping[str, datetime]) -> dict[str, datetime]:
        async with self.backend.connection() as conn:
            if noted:
                # Only the owner's live memories, locked against a delete until the insert
                # commits (a memory deleted meanwhile is skipped, never a foreign key error).
                rows = await conn.fetch(
                    f"""INSERT INTO {self._s}.memory_reads AS x (id, owner_id, read_at)
                        SELECT m.id, m.owner_id, r.at
                          FROM unnest($2::uuid[], $3::timestamptz[]) AS r(id, at)
                          JOIN {self._s}.memories m ON m.id = r.id AND m.owner_id = $1
                           FOR KEY SHARE OF m
                        ON CONFLICT (id)
                        DO UPDATE SET read_at = greatest(x.read_at, excluded.read_at)
                        RETURNING id, read_at""",
                    owner, [uuid.UUID(i) for i in noted], list(noted.values()))
            else:
                rows = await conn.fetch(
                    f"SELECT id, read_at FROM {self._s}.memory_reads WHERE owner_id = $1",
                    owner)
        return {str(r["id"]): r["read_at"] for r in rows}

    async def _owners(self) -> list[str]:
        async with self.backend.connection() as conn:
            rows = await conn.fetch(f"""SELECT owner_id FROM {self._s}.owner_memory_counts
                                        WHERE memories > 0""")
        return [r["owner_id"] for r in rows]

    # -- writes -----------------------------------------------------------------------

    async def _write(self, owner: str, what: str, op_id: str | None, plan: Planner) -> str:
        s = self._s
        async with self.backend.unit() as conn:
            await self._lock(conn, "l2", owner)
            prior = await prior_result(conn, s, owner, op_id)
            if prior is not None:
                return str(prior)
            paths = self._near_paths.set({})
            try:
                result, writes = await plan()
            finally:
                self._near_paths.reset(paths)
            before, after = await self._apply(conn, owner, writes)
            await record_op(conn, s, owner, op_id, what, result)
        # The rows kept of the owner follow the write where they were those it changed.
        # Inside a larger unit not committed yet, the token is one no search reads until
        # it is; rolled back, one no search ever reads.
        kept = self._cache.get(owner)
        if kept is not None and after is not None and kept.token == before:
            kept.written(writes, np.float32)  # as the column keeps them
            kept.token = after
            if self._seen.get(owner) == before:
                self._seen[owner] = after
        elif kept is not None:
            self._cache.drop(owner)
        return result

    async def _apply(self, conn: Any, owner: str, w: Writes
                     ) -> tuple[str | None, str | None]:
        """Write ``w``; the owner's version tokens before and after (``counts.add_memories``)."""
        s = self._s
        if w.reopened:
            await conn.execute(
                f"DELETE FROM {s}.memory_versions WHERE owner_id = $1 AND id = ANY($2::uuid[])",
                owner, [uuid.UUID(v.id) for v in w.reopened])
        if w.versions:
            await _many(
                conn,
                f"""INSERT INTO {s}.memory_versions ({VERSION_COLUMNS})
                    VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7, $8, $9, $10, $11, $12, $13)""",
                [(uuid.UUID(v.id), v.owner, uuid.UUID(v.memory_id), v.content,
                  json.dumps(v.metadata, ensure_ascii=False), v.has_embedding, v.valid_from,
                  v.valid_to, v.change,
                  None if v.superseded_by is None else uuid.UUID(v.superseded_by), v.by,
                  v.reason, v.context) for v in w.versions])
        if w.drops:  # their text rows go with them (ON DELETE CASCADE)
            await conn.execute(f"DELETE FROM {s}.memories WHERE id = ANY($1::uuid[])",
                               [uuid.UUID(m.id) for m in w.drops])
        new = [p for p in w.puts if p.before is None]
        if new:
            await _many(conn, _INSERT.format(s=s), [
                (uuid.UUID(m.id), owner, m.content, content_hash(m.content),
                 json.dumps(m.metadata, ensure_ascii=False), p.given,
                 None if p.given is None else self.dim, m.created_at, m.updated_at, m.context)
                for p in new for m in [p.memory]])
            await _many(conn, _INSERT_TEXT.format(s=s), [
                (uuid.UUID(p.memory.id), owner, search_text(p.memory.content, p.memory.context),
                 p.memory.updated_at)
                for p in new])
        for p in w.puts:
            if p.before is None:
                continue
            m = p.memory
            args = [uuid.UUID(m.id), m.content, content_hash(m.content),
                    json.dumps(m.metadata, ensure_ascii=False), m.updated_at, m.context]
            vector = ""
            if not p.keeps:
                vector = ", embedding = $7, embedding_dim = $8"
                args += [p.given, None if p.given is None else self.dim]
            await conn.execute(
                f"""UPDATE {s}.memories SET content = $2, content_hash = $3,
                        metadata = $4::jsonb, updated_at = $5, context = $6{vector}
                    WHERE id = $1""", *args)
            await conn.execute(_UPDATE_TEXT.format(s=s), uuid.UUID(m.id),
                               search_text(m.content, m.context), m.updated_at)
        tokens = await add_memories(conn, s, owner, w.count_delta())
        await add_terms(conn, s, owner, w.term_delta())
        return tokens

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
            texts.append((mid, owner, search_text(text, None), at))
        async with self.backend.transaction() as conn:
            await self._lock(conn, "l2", owner)
            await conn.copy_records_to_table(
                "memories", schema_name=self._s, records=mems,
                columns=["id", "owner_id", "content", "content_hash", "metadata", "embedding",
                         "embedding_dim", "created_at", "updated_at"])
            await conn.copy_records_to_table(
                "memory_text", schema_name=self._s, records=texts,
                columns=["id", "owner_id", "search_text", "updated_at"])
            await add_memories(conn, self._s, owner, len(mems))
            await add_terms(conn, self._s, owner, term_delta(added=[m[2] for m in mems]))
        self._cache.drop(owner)
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
                q = f"{p(vector)}::vector({int(self.dim or 0)})"
                rows = await conn.fetch(
                    self._near_select(cols, mine, q, await self._exact_near(conn, owner),
                                      p(k)), *p.values)
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

    async def _nearest_many(self, owner: str, vectors: Sequence[list[float]], k: int
                            ) -> list[list[Row]]:
        """Each vector's ``k`` nearest rows of ``owner`` in one statement, as ``_rows``
        reads them one by one (the same path, order and similarity). The vectors go as
        one ``vector[]``, each element through the vector type's binary codec. (As one
        ``real[]`` of every float end to end, the array codec tested each float for
        being a nested sequence: 3.4 ms to send 25 vectors, against 0.5 ms.)"""
        if len(vectors) < 2:
            return await super()._nearest_many(owner, vectors, k)
        d = int(self.dim or 0)
        async with self.backend.connection() as conn:
            nearest = self._near_select(MEMORY_COLUMNS, "owner_id = $1", "v.q",
                                        await self._exact_near(conn, owner), "$3")
            rows = await conn.fetch(
                f"""WITH v AS MATERIALIZED (  -- each vector read once, not once a row
                        SELECT n::int, q::vector({d}) AS q
                          FROM unnest($2::vector[]) WITH ORDINALITY AS u(q, n))
                    SELECT v.n, x.* FROM v CROSS JOIN LATERAL ({nearest}) AS x""",
                owner, [Vector(v) for v in vectors], k)
        found: list[list[Row]] = [[] for _ in vectors]
        for r in rows:
            found[r["n"] - 1].append(Row(_memory(r), None, float(r["sim"])))
        for each in found:  # best first (stable: the statement's order among equals)
            each.sort(key=lambda row: -(row.similarity or 0.0))
        return found

    def _near_select(self, cols: str, mine: str, q: str, exact: bool, k: str) -> str:
        """The statement of a near read: the ``k`` rows of ``mine`` nearest to the vector
        ``q`` (SQL expressions), best first, with their cosine ``sim``; an exact scan or
        the HNSW index's order (:meth:`_exact_near`)."""
        d = int(self.dim or 0)
        order = "sim DESC" if exact else f"{dim_sql(d)} <=> {q}"
        return (f"SELECT {cols}, 1 - ({dim_sql(d)} <=> {q}) AS sim FROM {self._s}.memories "
                f"WHERE {mine} AND embedding_dim = {d} ORDER BY {order} LIMIT {k}")

    async def _same_text_many(self, owner: str, hashes: Sequence[str]
                              ) -> dict[str, list[Row]]:
        """The rows of each content hash in one statement, newest first, as ``_rows``."""
        wanted = list(dict.fromkeys(hashes))
        if len(wanted) < 2:
            return await super()._same_text_many(owner, wanted)
        async with self.backend.connection() as conn:
            rows = await conn.fetch(
                f"""SELECT {MEMORY_COLUMNS}, content_hash FROM {self._s}.memories
                     WHERE owner_id = $1 AND content_hash = ANY($2::text[])
                     ORDER BY updated_at DESC""", owner, wanted)
        found: dict[str, list[Row]] = {h: [] for h in wanted}
        for r in rows:
            found[r["content_hash"]].append(Row(_memory(r)))
        return found

    async def _exact_near(self, conn: Any, owner: str) -> bool:
        """Whether a near read of ``owner`` scans its rows exactly (``plan.prefer_exact``,
        or the index not built yet) rather than through the HNSW index. Decided once per
        write: its plan reads near each text it stores while the owner's rows stay as they
        are (its writer holds them), which saves a batch a round trip per text."""
        chosen = self._near_paths.get()
        if chosen is not None and owner in chosen:
            return chosen[owner]
        stats = await term_stats(conn, self._s, [owner], [])
        exact = (prefer_exact(stats.docs, stats.table_docs or 0)
                 or not self.backend.hnsw.wanted())
        if chosen is not None:
            chosen[owner] = exact
        return exact

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

    # -- search candidates ----------------------------------------------------------

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

    def _plan(self, stats: TermStats, owners: Sequence[str], terms: Sequence[str], *,
              embedding: bool, keyword_k: int) -> SearchPlan:
        """The plan ``plan.search_plan`` chooses from ``stats``, as :meth:`_built` allows."""
        return self._built(search_plan(stats.docs, float(stats.table_docs or 0),
                                       owners=len(owners), embedding=embedding, terms=terms,
                                       keyword_k=keyword_k, df=stats.df))

    def _built(self, plan: SearchPlan) -> SearchPlan:
        """``plan``, scanning the vectors exactly where it prefers the HNSW index while the
        index is not built yet (which starts its build: ``hnsw.HnswIndex.wanted``)."""
        if plan.vector == "hnsw" and not self.backend.hnsw.wanted():
            return replace(plan, vector="exact")
        return plan

    async def search_plan(self, owners: Sequence[str], terms: Sequence[str] = (), *,
                          embedding: bool = True, keyword_k: int = 40) -> SearchPlan:
        """The plan a search of ``owners`` for ``terms`` (``text.terms`` of the query)
        would use now: the counts of :meth:`_term_stats` through :func:`~.plan.search_plan`,
        exactly as the search chooses. For benchmarks and diagnostics."""
        return self._plan(await self._term_stats(owners, terms), owners, terms,
                     embedding=embedding, keyword_k=keyword_k)

    def statement(self, owners: Sequence[str], terms: Sequence[str],
                  embedding: list[float] | None, plan: SearchPlan, *, vector_k: int,
                  keyword_k: int, weights: Sequence[float] | None = None,
                  where: Mapping[str, Any] | None = None, matched: Sequence[Any] | None = None
                  ) -> tuple[str, list[Any]]:
        """The candidate statement of a search following ``plan``, with its arguments
        (for EXPLAIN in benchmarks and tests; ``weights`` default to 1 per term)."""
        w = [1.0] * len(terms) if weights is None else list(weights)
        return candidate_statement(self._s, self.dim, owners, terms, embedding, plan,
                                   vector_k=vector_k, keyword_k=keyword_k, weights=w,
                                   where=where, matched=matched)

    async def _kept(self, owners: Sequence[str], stats: TermStats
                    ) -> dict[str, OwnerRows] | None:
        """The owners' rows as ``stats`` found them, from this process's copy; ``None``
        where it holds none of those tokens (the statements search them). Rows are
        fetched where this search and the one before it read the same tokens: an owner
        another process writes between every two searches is not fetched each time."""
        versions = stats.versions
        wanted = list(dict.fromkeys(owners))
        if stats.docs > min(KEPT_MAX_ROWS, self.backend.cache_rows):
            for o in wanted:  # grown past the limit by writes: its rows are not kept
                self._cache.drop(o)
            return None
        if versions is None or any(o not in versions for o in wanted):
            return None
        stable = all(self._seen.get(o) == versions[o] for o in wanted)
        for o in wanted:
            self._seen[o] = versions[o]
            self._seen.move_to_end(o)
        while len(self._seen) > SEEN_OWNERS:
            self._seen.popitem(last=False)
        kept = {o: self._cache.current(o, versions[o]) for o in wanted}
        missing = [o for o, rows in kept.items() if rows is None]
        if missing and not stable:
            return None
        if missing:
            for o, rows in (await self._fetch_rows(missing)).items():
                self._cache.put(o, rows)
                kept[o] = rows if rows.token == versions[o] else None
        found = {o: rows for o, rows in kept.items() if rows is not None}
        return found if len(found) == len(wanted) else None

    async def _fetch_rows(self, owners: Sequence[str]) -> dict[str, OwnerRows]:
        """The owners' rows and tokens, in one statement (one snapshot), oldest first."""
        d = int(self.dim or 0)
        async with self.backend.connection() as conn:
            found = await conn.fetch(
                f"""SELECT c.owner_id AS counted, c.version, m.id, m.content, m.metadata,
                           m.context, m.created_at, m.updated_at, m.content_hash,
                           m.embedding_dim IS NOT NULL AS has_embedding, t.search_text,
                           CASE WHEN m.embedding_dim = {d} THEN m.embedding END AS vec
                      FROM {self._s}.owner_memory_counts c
                      LEFT JOIN {self._s}.memories m ON m.owner_id = c.owner_id
                      LEFT JOIN {self._s}.memory_text t ON t.id = m.id
                     WHERE c.owner_id = ANY($1::text[]) AND c.version IS NOT NULL
                     ORDER BY m.created_at, m.id""", list(owners))
        tokens: dict[str, str] = {}
        rows: dict[str, list[Any]] = {o: [] for o in owners}
        for r in found:
            owner = r["counted"]
            tokens[owner] = str(r["version"])
            if r["id"] is None:
                continue
            memory = VectorMemory.model_construct(
                id=str(r["id"]), owner=owner, content=r["content"],
                metadata=json.loads(r["metadata"]), context=r["context"],
                created_at=r["created_at"], updated_at=r["updated_at"],
                has_embedding=r["has_embedding"])
            vec = None if r["vec"] is None else r["vec"].to_numpy().astype(np.float64)
            rows[owner].append(make_row(memory, vec, r["search_text"], r["content_hash"]))
        return {o: OwnerRows(tokens[o], rows[o]) for o in owners if o in tokens}

    async def _weighted_candidates(self, owners: Sequence[str], query: str,
                                   embedding: list[float] | None, *, vector_k: int,
                                   keyword_k: int, where: Mapping[str, Any] | None = None
                                   ) -> tuple[list[str], list[float], list[Candidate]]:
        """Counts and candidates in one round trip where the counts of the last search
        choose a plan without the recent window and the query keeps all its terms (a
        split plan: the nearest memories on a second connection meanwhile); otherwise,
        or where this search's counts choose otherwise, counts first, then candidates
        (always with a metadata filter). It pays: ``python -m benchmarks search-latency
        --counts-first-pairs`` times each query both ways, in alternating pairs."""
        found = query_terms(query)
        last = self._last_counts
        if (not found or len(found) > MAX_QUERY_TERMS or last is None or where is not None
                or self._codepoint_order is None or self._was_kept(owners)):
            return await super()._weighted_candidates(owners, query, embedding,
                                                      vector_k=vector_k, keyword_k=keyword_k,
                                                      where=where)
        guess = self._built(search_plan(last[0], float(last[1]), owners=len(owners),
                                        embedding=embedding is not None, terms=found,
                                        keyword_k=keyword_k))
        if guess.recent_window:  # a plan the document frequencies decide: counts first
            return await super()._weighted_candidates(owners, query, embedding,
                                                      vector_k=vector_k, keyword_k=keyword_k,
                                                      where=where)

        codepoint_order = self._codepoint_order

        def counted(plan: SearchPlan) -> tuple[str, list[Any]]:
            return counted_statement(
                self._s, self.dim, owners, found, embedding, plan, vector_k=vector_k,
                keyword_k=keyword_k, owner_rows=same_plan_rows(*last), table_rows=last[1],
                codepoint_order=codepoint_order)

        nearest: list[Any] = []
        if guess.split:  # the nearest memories need no counts: both branches at once
            nearest, rows = await self._fetch_both(
                self.statement(owners, found, embedding, replace(guess, keyword=None),
                               vector_k=vector_k, keyword_k=keyword_k),
                counted(replace(guess, vector=None)))
        else:
            rows = await self._fetch(counted(guess))
        head = next(r for r in rows if r["st_docs"] is not None)
        stats = TermStats(int(head["st_docs"]), found_df(head["st_terms"], head["st_df"]),
                          int(head["st_table"]),
                          found_versions(head["st_seen"], head["st_versions"]))
        self._last_counts = (stats.docs, stats.table_docs or 0)
        weights = term_weights(found, stats)
        plan = self._plan(stats, owners, found, embedding=embedding is not None,
                     keyword_k=keyword_k)
        kept, kept_weights = strongest_terms(found, weights, stats)
        if head["st_same"] and _paths(plan) == _paths(guess) and list(head["st_w"]) == weights:
            # A term no memory has matches none of them, so the candidates ranked with
            # every term are those of the terms kept; the share counts the kept ones.
            await self._kept(owners, stats)  # the next search may find them kept
            return kept, kept_weights, _candidates_of(
                [*nearest, *(r for r in rows if r["st_docs"] is None)])
        return kept, kept_weights, await self._candidates(
            owners, kept, embedding, vector_k=vector_k, keyword_k=keyword_k,
            weights=kept_weights, stats=stats)

    async def _candidates(self, owners: Sequence[str], terms: Sequence[str],
                          embedding: list[float] | None, *, vector_k: int, keyword_k: int,
                          weights: Sequence[float], stats: TermStats,
                          where: Mapping[str, Any] | None = None) -> list[Candidate]:
        """Candidates of the plan the counts in ``stats`` choose; keyword candidates
        ordered by the sum of ``weights`` of the terms they contain, then newest, then
        smallest id."""
        terms, w = _statement_terms(terms, weights)
        kept = await self._kept(owners, stats)
        if kept is not None:
            return candidates(kept, terms, w, embedding, vector_k=vector_k,
                              keyword_k=keyword_k, where=where)
        plan = self._plan(stats, owners, terms, embedding=embedding is not None,
                     keyword_k=keyword_k)
        if plan.split:
            nearest, matching = await self._fetch_both(*(
                self.statement(owners, terms, embedding, p, vector_k=vector_k,
                               keyword_k=keyword_k, weights=w, where=where)
                for p in (replace(plan, keyword=None), replace(plan, vector=None))))
            rows = nearest + matching
        else:
            rows = await self._fetch(self.statement(owners, terms, embedding, plan,
                                                    vector_k=vector_k, keyword_k=keyword_k,
                                                    weights=w, where=where))
        return _candidates_of(rows)

    async def _embedded_candidates(self, owners: Sequence[str], terms: Sequence[str],
                                   embedded: Callable[[], Awaitable[list[float] | None]], *,
                                   vector_k: int, keyword_k: int, weights: Sequence[float],
                                   stats: TermStats, where: Mapping[str, Any] | None = None
                                   ) -> tuple[list[float] | None, list[Candidate]]:
        """The keyword candidates' rows (:func:`~.statements.keyword_ids`, the longer part
        of a search's statement) are read while the query is embedded; then one statement
        reads the nearest memories and joins the rows read to the memories, each with its
        cosine: the candidates of :meth:`_candidates`. It pays where the model runs on one
        thread, as in a Ray actor: ``python -m benchmarks search-overlap`` (both ways in
        alternating order, per question) had a search wait 5.0 ms beyond its embedding
        against 6.4 ms, and 5.6 against 5.1 ms where the model took both of two cores."""
        terms, w = _statement_terms(terms, weights)
        kept = await self._kept(owners, stats)
        if kept is not None:
            vec = await embedded()
            return vec, candidates(kept, terms, w, vec, vector_k=vector_k,
                                   keyword_k=keyword_k, where=where)
        plan = self._plan(stats, owners, terms, embedding=True, keyword_k=keyword_k)
        if plan.keyword is None:
            return await super()._embedded_candidates(
                owners, terms, embedded, vector_k=vector_k, keyword_k=keyword_k,
                weights=w, stats=stats, where=where)
        matched = await self._fetch(keyword_statement(
            self._s, owners, terms, plan, keyword_k=keyword_k, weights=w, where=where))
        vec = await embedded()
        rows = await self._fetch(self.statement(
            owners, terms, vec, plan, vector_k=vector_k, keyword_k=keyword_k, weights=w,
            where=where, matched=matched))
        return vec, _candidates_of(rows)

    def kept(self) -> dict[str, int]:
        """The owners whose rows this process keeps, and how many (for benchmarks)."""
        return self._cache.sizes()

    def _was_kept(self, owners: Sequence[str]) -> bool:
        """Whether the last search of each of ``owners`` found its rows kept (then the
        counts come first, and no statement follows them)."""
        for o in owners:
            rows = self._cache.get(o)
            if rows is None or rows.token != self._seen.get(o):
                return False
        return True

    async def _fetch_both(self, nearest: tuple[str, list[Any]],
                          keyword: tuple[str, list[Any]]) -> tuple[list[Any], list[Any]]:
        """The two branches of a split plan at once, on two pooled connections: the
        search costs the slower one, not the sum."""
        near, kw = await asyncio.gather(self._fetch(nearest), self._fetch(keyword))
        return near, kw

    async def _fetch(self, statement: tuple[str, list[Any]]) -> list[Any]:
        async with self.backend.connection() as conn:
            return list(await conn.fetch(statement[0], *statement[1]))

    def _materialize(self, payload: Any) -> VectorMemory:
        # a statement's row, or the memory of a kept row (``owner_rows.candidates``)
        return payload if isinstance(payload, VectorMemory) else _memory(payload)

    async def _forget(self, owner: str) -> int:
        from .erase import L2_TABLES, erase

        async with self.backend.transaction() as conn:
            await self._lock(conn, "l2", owner)
            gone = int(await conn.fetchval(
                f"SELECT memories FROM {self._s}.owner_memory_counts WHERE owner_id = $1",
                owner) or 0)
            await erase(conn, self._s, owner, L2_TABLES)
            await conn.execute(f"""DELETE FROM {self._s}.applied_ops
                                   WHERE owner_id = $1 AND kind NOT IN ('l1', 'l3')""", owner)
        self._cache.drop(owner)
        return gone


async def _many(conn: Any, statement: str, rows: Sequence[Sequence[Any]]) -> None:
    """``executemany``, or one ``execute`` for one row (a store's usual write)."""
    if len(rows) == 1:
        await conn.execute(statement, *rows[0])
    else:
        await conn.executemany(statement, rows)

