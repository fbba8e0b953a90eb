"""Hybrid search candidates of the PostgreSQL L2 store.

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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from ...scoring import MAX_QUERY_TERMS, Candidate, TermStats, strongest_terms, term_weights
from ...text import query_terms
from ..base import VectorStore
from .counts import CODEPOINT_ORDER_SQL, found_df, term_stats
from .plan import MAX_STATEMENT_TERMS, SearchPlan, same_plan_rows, search_plan
from .pool import PostgresStore
from .statements import candidate_statement, counted_statement


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


class PostgresSearch(PostgresStore, VectorStore):
    """The search side of ``PostgresVectorStore``: counts, plan, candidates."""

    dim: int | None
    _codepoint_order: bool | None  #: the database's collation, probed once
    #: (owner rows, table rows) the last search read: the next one is planned from
    #: them, and checks in its statement that its own counts choose the same.
    _last_counts: tuple[int, int] | None

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

    async def _weighted_candidates(self, owners: Sequence[str], query: str,
                                   embedding: list[float] | None, *, vector_k: int,
                                   keyword_k: int, where: Mapping[str, Any] | None = None
                                   ) -> tuple[list[str], list[float], list[Candidate]]:
        """Counts and candidates in one round trip where the counts of the last search
        choose a plan without the recent window and the query keeps all its terms (a
        split plan: the nearest memories on a second connection meanwhile); otherwise,
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
                          int(head["st_table"]))
        self._last_counts = (stats.docs, stats.table_docs or 0)
        weights = term_weights(found, stats)
        plan = _plan(stats, owners, found, embedding=embedding is not None,
                     keyword_k=keyword_k)
        kept, kept_weights = strongest_terms(found, weights, stats)
        if head["st_same"] and _paths(plan) == _paths(guess) and list(head["st_w"]) == weights:
            # A term no memory has matches none of them, so the candidates ranked with
            # every term are those of the terms kept; the share counts the kept ones.
            return kept, kept_weights, _candidates_of(
                [*nearest, *(r for r in rows if r["st_docs"] is None)])
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

    async def _fetch_both(self, nearest: tuple[str, list[Any]],
                          keyword: tuple[str, list[Any]]) -> tuple[list[Any], list[Any]]:
        """The two branches of a split plan at once, on two pooled connections: the
        search costs the slower one, not the sum."""
        near, kw = await asyncio.gather(self._fetch(nearest), self._fetch(keyword))
        return near, kw

    async def _fetch(self, statement: tuple[str, list[Any]]) -> list[Any]:
        async with self.backend.connection() as conn:
            return list(await conn.fetch(statement[0], *statement[1]))
