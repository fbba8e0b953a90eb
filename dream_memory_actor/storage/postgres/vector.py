"""L2 on PostgreSQL + pgvector: dedup-merge on store, candidates for hybrid search.

Search gathers candidates in one statement: the nearest memories from the HNSW
index (owner-filtered, iterative scan) and the memories containing the most
query terms (trigram GIN index), each with its exact cosine to the query. The
base class ranks them, so the scores equal every other backend's.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from collections import OrderedDict
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from ...errors import MemoryNotFound
from ...models import StoreResult, VectorMemory
from ...scoring import Candidate
from ...text import content_hash, escape_like, fold
from ..base import VectorStore
from ..dedup import merged
from .migrations import dim_sql
from .pool import PostgresBackend, PostgresStore

#: A search slower than this (seconds) tries its two branches concurrently next time.
SPLIT_AFTER_S = 0.005

#: Where an exact scan of an owner's vectors costs what the filtered HNSW search does.
#: Measured on PostgreSQL 18 + pgvector 0.8 (384 dims, ef_search 100): an exact scan
#: costs ~1.7 us per owner row (reading the row dominates); an HNSW search whose
#: filter keeps a share ``s`` of the table costs ~1.65 ms / s (iterative scan: it walks
#: past other owners' vectors; 20 owners x 5k: 33 ms, 100 owners x 10k: 170 ms, one
#: owner: ~1.7 ms). Exact is cheaper while ``rows ** 2 <= BREAK_EVEN * table_rows``.
EXACT_BREAK_EVEN = 1000

#: Up to this many rows, an owner's keyword candidates come from reading its rows
#: (owner index, ``strpos``) instead of the trigram index, which gains nothing from
#: the owner filter: it intersects bitmaps over the whole table. Measured at 5,000
#: rows an owner (20 owners): 1.7-2.3 ms against 3.3-4.5 ms; at 10,000 (100 owners,
#: 1M rows): 3-4 ms against 33 ms.
KEYWORD_SCAN_MAX = 5000
#: ... and so do owners holding at most this share of the table, up to
#: ``KEYWORD_SCAN_CAP`` rows (reading 50,000 rows costs ~20 ms).
KEYWORD_SCAN_SHARE = 0.05
KEYWORD_SCAN_CAP = 50_000

#: A large owner's keyword candidates first look among its newest rows this many:
#: when at least k of them contain every term, those are the answer (every older
#: row is older than them), found by walking the owner's recency index instead of
#: intersecting trigram bitmaps. Measured at 100k memories of one owner, two common
#: terms: 0.9 ms against 5.7 ms median. When it falls short, the usual statement
#: runs as well (~2 ms more), so an owner set whose window keeps falling short stops
#: trying it for a while (``_window``).
RECENT_WINDOW = 5000

#: Seconds an owner set's row count is trusted before it is counted again.
SIZE_TTL_S = 60.0


#: Owner sets (or owners) each per-store cache remembers, least recently used dropped.
CACHE_ENTRIES = 4096


def _put(cache: OrderedDict[Any, Any], key: Any, value: Any) -> None:
    """Store ``value`` as the most recent entry of a cache bounded to CACHE_ENTRIES."""
    cache.pop(key, None)
    cache[key] = value
    while len(cache) > CACHE_ENTRIES:
        cache.popitem(last=False)


def prefer_keyword_scan(owner_rows: float, table_rows: float) -> bool:
    """Whether reading the owners' rows beats the trigram index for keyword candidates
    (see :data:`KEYWORD_SCAN_MAX`).

    >>> prefer_keyword_scan(10_000, 1_000_000), prefer_keyword_scan(100_000, 100_000)
    (True, False)
    """
    return owner_rows <= KEYWORD_SCAN_MAX or (
        owner_rows <= KEYWORD_SCAN_CAP and owner_rows <= KEYWORD_SCAN_SHARE * table_rows)


def prefer_exact(owner_rows: float, table_rows: float, break_even: float = EXACT_BREAK_EVEN
                 ) -> bool:
    """Whether an exact scan of ``owner_rows`` vectors beats the filtered HNSW search
    over a table of ``table_rows`` (see :data:`EXACT_BREAK_EVEN`).

    >>> prefer_exact(10_000, 1_000_000), prefer_exact(100_000, 100_000)
    (True, False)
    """
    return owner_rows * owner_rows <= break_even * max(table_rows, owner_rows)

_COLUMNS = ("id, owner_id, content, metadata, created_at, updated_at, "
            "embedding_dim IS NOT NULL AS has_embedding")


def _memory(row: Any) -> VectorMemory:
    return VectorMemory(
        id=str(row["id"]), owner=row["owner_id"], content=row["content"],
        metadata=json.loads(row["metadata"]), created_at=row["created_at"],
        updated_at=row["updated_at"], has_embedding=row["has_embedding"])


def _union(queries: Sequence[tuple[str, list[Any]]]) -> tuple[str, list[Any]]:
    """The statements as one ``UNION ALL``, their parameters renumbered after each other."""
    if len(queries) == 1:
        return queries[0]
    parts: list[str] = []
    args: list[Any] = []
    for sql, params in queries:
        def shift(m: re.Match[str], offset: int = len(args)) -> str:
            return f"${int(m.group(1)) + offset}"

        parts.append("(" + re.sub(r"\$(\d+)", shift, sql) + ")")
        args.extend(params)
    return " UNION ALL ".join(parts), args


def _owners_sql(owners: Sequence[str]) -> str:
    """The filter on ``$1`` (the owners as a ``text[]``). One owner is compared with an
    equality, not ``= ANY``: the same rows and the same plan, planned faster (LoCoMo's
    ~600-row owners, whole search: p50 2.56 -> 2.35 ms, identical results)."""
    if len(owners) == 1:
        return "owner_id = ($1::text[])[1]"
    return "owner_id = ANY($1::text[])"


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
        #: Owner set -> moving averages (seconds) of its search one way and split.
        self._timings: OrderedDict[tuple[str, ...], tuple[float | None, float | None]] = (
            OrderedDict())
        #: Owner -> how often the recent window answered lately (moving average).
        self._window_hits: OrderedDict[str, float] = OrderedDict()
        #: Owner set -> (its vector rows (counted up to where the answer is "index"),
        #: the table's rows, when counted): how to search them, see ``_size``.
        self._sizes: OrderedDict[tuple[str, ...], tuple[float, float, float]] = OrderedDict()

    def _dim_filter(self) -> str:
        # The partial HNSW index matches only a literal predicate; dim is an int from settings.
        return f"embedding_dim = {int(self.dim or 0)}"

    async def _store(self, owner: str, content: str, embedding: list[float] | None,
                     metadata: dict[str, Any], *, threshold: float, now: datetime,
                     op_id: str | None) -> StoreResult:
        s = self._s
        async with self.backend.transaction() as conn:
            await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
                               f"{s}:l2:{owner}")
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
            order = "sim DESC" if prefer_exact(*await self._size(conn, [owner])) else (
                f"{dim_sql(d)} <=> $2::vector({d})")
            row = await conn.fetchrow(
                f"""SELECT {_COLUMNS}, 1 - ({dim_sql(d)} <=> $2::vector({d})) AS sim
                    FROM {s}.memories WHERE owner_id = $1 AND {self._dim_filter()}
                    ORDER BY {order} LIMIT 1""",
                owner, embedding)
            if row is not None and row["sim"] > threshold:
                target, similarity = row, float(row["sim"])
        if target is None:
            target = await conn.fetchrow(
                f"""SELECT {_COLUMNS} FROM {s}.memories WHERE owner_id = $1 AND content_hash = $2
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
            return StoreResult(memory=new, merged=True, similarity=similarity)
        mem = VectorMemory(owner=owner, content=content, metadata=metadata, created_at=now,
                           updated_at=now, has_embedding=embedding is not None)
        self._grew((owner,), 1)
        await conn.execute(
            f"""INSERT INTO {s}.memories (id, owner_id, content, content_hash,
                    metadata, embedding, embedding_dim, created_at, updated_at)
                VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7, $8, $8)""",
            uuid.UUID(mem.id), owner, content, content_hash(content),
            json.dumps(metadata), embedding, None if embedding is None else self.dim, now)
        await conn.execute(
            f"""INSERT INTO {s}.memory_text (id, owner_id, search_text, updated_at)
                VALUES ($1, $2, $3, $4)""", uuid.UUID(mem.id), owner, fold(content), now)
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
            await conn.copy_records_to_table(
                "memories", schema_name=self._s, records=mems,
                columns=["id", "owner_id", "content", "content_hash", "metadata", "embedding",
                         "embedding_dim", "created_at", "updated_at"])
            await conn.copy_records_to_table(
                "memory_text", schema_name=self._s, records=texts,
                columns=["id", "owner_id", "search_text", "updated_at"])
        self._grew((owner,), len(mems))
        return len(mems)

    def candidate_queries(self, owners: Sequence[str], terms: Sequence[str],
                          embedding: list[float] | None, vector_k: int, keyword_k: int,
                          *, exact: bool = False, keyword_scan: bool = False,
                          recent_window: bool = False) -> list[tuple[str, list[Any]]]:
        """One statement per signal (vector, keyword) with its bound parameters.

        Each returns full rows with their cosine; a memory found by both comes
        back twice and ranking keeps it once. For owners whose search is slow
        they may run concurrently on two pooled connections (``_choose_split``).
        ``exact``: the nearest vectors by an exact scan of the owners' rows instead
        of the HNSW index (ordered by similarity, an expression the index cannot
        serve), for owners that are a small share of the table (``prefer_exact``).
        ``keyword_scan``: the keyword candidates by reading the owners' rows instead of
        the trigram index, for owners with few rows or a small share of the table
        (``prefer_keyword_scan``). ``recent_window`` (one owner, trigram path): look
        among its newest ``RECENT_WINDOW`` rows first. Either way, the same candidates;
        keyword rows say in ``src`` whether the window answered.
        """
        s = self._s
        d = int(self.dim or 0)
        cols = ", ".join(f"m.{c.strip()}" for c in _COLUMNS.split(","))
        mine = _owners_sql(owners)
        out: list[tuple[str, list[Any]]] = []
        if embedding is not None:
            q = f"$2::vector({d})"
            if exact:  # the top ids first, then their rows: the sort carries narrow rows
                sql = f"""SELECT {cols}, NULL::text AS search_text, t.sim, NULL::text AS src FROM (
                              SELECT id, 1 - ({dim_sql(d)} <=> {q}) AS sim FROM {s}.memories
                              WHERE {mine} AND {self._dim_filter()}
                              ORDER BY sim DESC LIMIT $3) t
                          JOIN {s}.memories m USING (id)"""
            else:
                sql = f"""SELECT {cols}, NULL::text AS search_text,
                              1 - (m.{dim_sql(d)} <=> {q}) AS sim, NULL::text AS src
                          FROM {s}.memories m
                          WHERE m.{mine} AND m.{self._dim_filter()}
                          ORDER BY m.{dim_sql(d)} <=> {q} LIMIT $3"""
            out.append((sql, [list(owners), embedding, vector_k]))
        if terms:
            args: list[Any] = [list(owners), keyword_k]
            sim = "NULL::float8"
            if embedding is not None:
                args.append(embedding)
                q = f"$3::vector({d})"
                sim = f"CASE WHEN m.{self._dim_filter()} THEN 1 - (m.{dim_sql(d)} <=> {q}) END"
            likes = []
            for t in terms:
                if keyword_scan:  # a plain substring test; the index could not use it
                    args.append(t)
                    likes.append(f"strpos(search_text, ${len(args)}) > 0")
                else:
                    args.append(f"%{escape_like(t)}%")
                    likes.append(f"search_text LIKE ${len(args)} ESCAPE '\\'")
            window = None
            if recent_window and not keyword_scan and len(owners) == 1:
                window = []
                for t in terms:
                    args.append(t)
                    window.append(f"strpos(search_text, ${len(args)}) > 0")
            out.append((
                f"""SELECT {cols}, t.search_text, {sim} AS sim, t.src
                    FROM ({self._keyword_ids(mine, likes, scan=keyword_scan, window=window)}) t
                    JOIN {s}.memories m USING (id)""",
                args))
        return out

    def _keyword_ids(self, mine: str, likes: Sequence[str], *, scan: bool = False,
                     window: Sequence[str] | None = None) -> str:
        """The ``$2`` memories of the owners (filter ``mine``) containing the most terms
        (newest first among equals).

        Ranking by terms matched means reading every memory that contains any
        term: 7,450 of 100,000 for two common words. But when at least ``$2``
        memories contain all the terms, the answer is exactly the newest ``$2`` of
        those, found from a much smaller set (the trigram indexes intersect); the
        full ranking then never runs (a one-time filter; EXPLAIN says "never
        executed"). Same result either way. ``scan``: the owners' rows are read
        anyway (few of them), so the ranking runs in one pass, without the early stop.
        ``window`` (one owner; the terms as ``strpos`` tests): before all that, the
        newest ``RECENT_WINDOW`` rows, walked in recency order (see RECENT_WINDOW).
        """
        s = self._s
        matched = " + ".join(f"({x})::int" for x in likes)

        def ranked(only: str = "") -> str:
            return f"""SELECT id, search_text, 'index' AS src FROM {s}.memory_text
                       WHERE {mine} AND ({' OR '.join(likes)}){only}
                       ORDER BY {matched} DESC, updated_at DESC, id LIMIT $2"""

        if len(likes) == 1 or scan:  # containing all terms = containing any; or one pass
            usual = ranked()
        else:
            usual = f"""WITH all_terms AS MATERIALIZED (
                           SELECT id, search_text FROM {s}.memory_text
                           WHERE {mine} AND {' AND '.join(likes)}
                           ORDER BY updated_at DESC LIMIT $2)
                       SELECT id, search_text, 'index' AS src FROM all_terms
                       WHERE (SELECT count(*) FROM all_terms) >= $2
                       UNION ALL
                       ({ranked(" AND (SELECT count(*) FROM all_terms) < $2")})"""
        if not window:
            return usual
        # One owner, so ``mine`` is an equality: only an equality walks the index in order.
        return f"""WITH recent AS MATERIALIZED (
                       SELECT id, search_text FROM (
                           SELECT id, search_text, updated_at FROM {s}.memory_text
                           WHERE {mine}
                           ORDER BY updated_at DESC LIMIT {int(RECENT_WINDOW)}) newest
                       WHERE {' AND '.join(window)}
                       ORDER BY updated_at DESC LIMIT $2)
                   SELECT id, search_text, 'recent' AS src FROM recent
                   WHERE (SELECT count(*) FROM recent) >= $2
                   UNION ALL
                   SELECT * FROM ({usual}) usual WHERE (SELECT count(*) FROM recent) < $2"""

    async def _fetch(self, queries: Sequence[tuple[str, list[Any]]]) -> list[Any]:
        sql, args = _union(queries)
        async with self.backend.connection() as conn:
            return list(await conn.fetch(sql, *args))

    async def _candidates(self, owners: Sequence[str], terms: Sequence[str],
                          embedding: list[float] | None, *, vector_k: int,
                          keyword_k: int) -> list[Candidate]:
        scans = await self.scans(owners)
        window = (not scans["keyword_scan"] and len(owners) == 1 and len(terms) > 0
                  and self._window(owners[0]))
        queries = self.candidate_queries(
            owners, terms, embedding, vector_k, keyword_k,
            exact=embedding is not None and scans["exact"],
            keyword_scan=scans["keyword_scan"], recent_window=window)
        key = tuple(owners)
        split = len(queries) > 1 and self._choose_split(key)
        t0 = time.perf_counter()
        if split:  # two connections: the search costs the slower branch, not the sum
            parts = await asyncio.gather(*(self._fetch([q]) for q in queries))
            rows = [r for part in parts for r in part]
        else:  # one statement, one round trip: cheapest for small owners
            rows = await self._fetch(queries)
        if len(queries) > 1:
            self._learn(key, split, time.perf_counter() - t0)
        if window:
            self._window_learn(owners[0], any(r["src"] == "recent" for r in rows))
        return [Candidate(str(r["id"]), r["content"], r["updated_at"],
                          None if r["sim"] is None else float(r["sim"]), r, r["search_text"])
                for r in rows]

    def _window(self, owner: str) -> bool:
        """Whether to try the recent window for ``owner``: while it has been answering
        at least half the time (it starts trusted). Not tried, it regains trust slowly,
        so an owner whose recent rows start to suffice is found again (~1 try in 10)."""
        hits = self._window_hits.get(owner, 1.0)
        if hits >= 0.5:
            return True
        self._window_hits[owner] = min(1.0, hits + 0.01)
        return False

    def _window_learn(self, owner: str, answered: bool) -> None:
        hits = self._window_hits.get(owner, 1.0)
        _put(self._window_hits, owner, 0.8 * hits + (0.2 if answered else 0.0))

    async def scans(self, owners: Sequence[str]) -> dict[str, bool]:
        """How a search of these owners gathers candidates: ``exact`` (vector scan of
        their rows, else the HNSW index) and ``keyword_scan`` (their rows, else the
        trigram index); keyword arguments of :meth:`candidate_queries`."""
        mine, table = await self._size(None, owners)
        return {"exact": prefer_exact(mine, table),
                "keyword_scan": prefer_keyword_scan(mine, table)}

    async def _size(self, conn: Any, owners: Sequence[str]) -> tuple[float, float]:
        """(rows of these owners, rows of the table), for choosing how to search them;
        cached for ``SIZE_TTL_S`` (one small query when stale, on ``conn`` or a pooled
        connection if it is ``None``). The owners' rows are counted only as far as
        the choices need: past that, any larger number chooses the same."""
        key = tuple(owners)
        now = time.monotonic()
        hit = self._sizes.get(key)
        if hit is None or now - hit[2] > SIZE_TTL_S:
            if conn is None:
                async with self.backend.connection() as own:
                    return await self._size(own, owners)
            # The table's rows from the planner's statistics (0 before the first
            # ANALYZE); the owners' rows counted up to where both choices are settled:
            # the HNSW index past sqrt(BREAK_EVEN * table) (and past BREAK_EVEN on a
            # table of their own), the trigram index past the keyword scan's limits.
            row = await conn.fetchrow(
                f"""WITH t AS (SELECT greatest(reltuples, 0) AS n FROM pg_class
                               WHERE oid = '{self._s}.memories'::regclass)
                    SELECT (SELECT n FROM t) AS total,
                           (SELECT count(*) FROM (
                               SELECT 1 FROM {self._s}.memories
                               WHERE owner_id = ANY($1::text[])
                               LIMIT (SELECT greatest(sqrt($2 * n), least($3 * n, $4), $5)
                                             ::bigint + 1 FROM t)
                           ) c) AS mine""",
                list(owners), float(EXACT_BREAK_EVEN), KEYWORD_SCAN_SHARE,
                float(KEYWORD_SCAN_CAP), float(max(EXACT_BREAK_EVEN, KEYWORD_SCAN_MAX)))
            hit = (float(row["mine"]), float(row["total"] or 0.0), now)
            _put(self._sizes, key, hit)
        return hit[0], hit[1]

    def _grew(self, key: tuple[str, ...], rows: int) -> None:
        hit = self._sizes.get(key)
        if hit is not None:
            self._sizes[key] = (hit[0] + rows, hit[1] + rows, hit[2])

    # Running the two branches on two connections pays off for large owners
    # (measured at 100k memories: p95 31 -> 22 ms) and costs for small ones (1k:
    # p95 4.4 -> 6.5 ms). Each owner set keeps a moving average of both ways;
    # the split way is tried once a search is slower than SPLIT_AFTER_S, then the
    # faster way wins.

    def _choose_split(self, key: tuple[str, ...]) -> bool:
        seq, par = self._timings.get(key, (None, None))
        if seq is None:
            return False
        if par is None:
            return seq > SPLIT_AFTER_S
        return par < seq

    def _learn(self, key: tuple[str, ...], split: bool, elapsed: float) -> None:
        seq, par = self._timings.get(key, (None, None))
        if split:
            par = elapsed if par is None else 0.8 * par + 0.2 * elapsed
        else:
            seq = elapsed if seq is None else 0.8 * seq + 0.2 * elapsed
        _put(self._timings, key, (seq, par))

    def _materialize(self, payload: Any) -> VectorMemory:
        return _memory(payload)

    async def _get(self, owner: str, memory_id: str) -> VectorMemory:
        row = None
        if _is_uuid(memory_id):
            async with self.backend.connection() as conn:
                row = await conn.fetchrow(
                    f"SELECT {_COLUMNS} FROM {self._s}.memories WHERE owner_id = $1 AND id = $2",
                    owner, uuid.UUID(memory_id))
        if row is None:
            raise MemoryNotFound(f"owner {owner!r} has no memory {memory_id!r}")
        return _memory(row)

    async def _delete(self, owner: str, memory_id: str) -> bool:
        if not _is_uuid(memory_id):
            return False
        async with self.backend.connection() as conn:
            done = await conn.execute(
                f"DELETE FROM {self._s}.memories WHERE owner_id = $1 AND id = $2",
                owner, uuid.UUID(memory_id))
        return bool(done != "DELETE 0")

    async def _list(self, owner: str, limit: int, offset: int) -> list[VectorMemory]:
        async with self.backend.connection() as conn:
            rows = await conn.fetch(
                f"""SELECT {_COLUMNS} FROM {self._s}.memories WHERE owner_id = $1
                    ORDER BY updated_at DESC, id LIMIT $2 OFFSET $3""", owner, limit, offset)
        return [_memory(r) for r in rows]

    async def count(self, owner: str) -> int:
        async with self.backend.connection() as conn:
            n = await conn.fetchval(
                f"SELECT count(*) FROM {self._s}.memories WHERE owner_id = $1", owner)
        return int(n)
