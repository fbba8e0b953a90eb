"""How a search gathers its candidates, as a pure function of counts.

The database keeps each owner's memory count (``owner_memory_counts``, written in
the same transaction as every insert and delete) and the document frequency of
each term (``term_df``); the table's rows come from the planner's statistics.
:func:`search_plan` turns those counts into a :class:`SearchPlan`; nothing about
the choice is learned or cached by the process, so two processes searching the
same data choose the same way.

Each rule below rests on ``python -m benchmarks search-latency`` (``--owners 1
--per-owner N`` for one owner of N memories, ``--owners 100 --per-owner 10000``
for the 1M-row table), PostgreSQL 18 + pgvector 0.8, 384 dimensions.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

#: Where an exact scan of an owner's vectors costs what the filtered HNSW search does.
#: An exact scan costs ~1.7 us per owner row (reading the row dominates); an HNSW
#: search whose filter keeps a share ``s`` of the table costs ~1.65 ms / s (iterative
#: scan: it walks past other owners' vectors; 100 owners x 10k: 170 ms against ~17 ms
#: exact, one owner: ~1.7 ms). Exact is cheaper while ``rows ** 2 <= BREAK_EVEN * table``.
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
#: intersecting trigram bitmaps. When it falls short, the usual statement runs as
#: well; the plan tries it only where the term counts leave it a chance (see
#: :func:`window_may_answer`).
RECENT_WINDOW = 5000

#: The most terms one candidate statement tests; a longer query's keyword candidates
#: come from its first (or, with weights, its highest-weighted) terms. Ranking still
#: scores every term. Past a few hundred, each extra term costs every matching row
#: one more substring test and gains nothing in which rows are candidates.
MAX_STATEMENT_TERMS = 256

#: From this many memories of one owner on, a search on the trigram path tries the
#: recent window first. Measured with ``search-latency --owners 1``: at 100k memories
#: the window pays (without it p95 84-122 ms against 66-80 ms, same load); at 10k it
#: costs (window 14-16 ms against 9.6 ms): the trigram path is cheap there.
LARGE_OWNER_ROWS = 50_000

#: From this many memories of the owners on, a search with both branches runs them
#: on two connections (``SearchPlan.split``): each branch then costs the server a
#: millisecond or more, and the search costs the slower one instead of the sum.
#: Measured on the data of ``python -m benchmarks search-latency`` (``--owners 1
#: --per-owner 10000``, and ``--owners 100`` for the 1M-row table), both ways
#: alternating per query in one process: at 10k memories (HNSW and trigram) and at
#: owners of 10k in 1M rows (exact scan and owner rows) p50 and p95 a quarter to a
#: third lower split. At 1k (exact scan and owner rows, each under a millisecond) one
#: search alone gains too, but four to eight at once on two cores wait 15-27% longer
#: (p50) for about the same throughput: with no idle core, the second statement's
#: fixed cost is no longer hidden.
SPLIT_MIN_ROWS = 5000

VectorPath = Literal["exact", "hnsw"]
KeywordPath = Literal["scan", "trigram"]


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


def window_may_answer(owner_rows: float, df: Sequence[float], keyword_k: int,
                      window: int = RECENT_WINDOW) -> bool:
    """Whether the newest ``window`` rows can be expected to hold ``keyword_k`` rows
    containing every term: each term's rows spread over time, the window holds about
    ``window * df / owner_rows`` of them, and rows with all terms are at most the
    rarest term's. ``df`` counts whole terms; a substring test finds at least those.

    >>> window_may_answer(100_000, [4_600, 4_700], 40), window_may_answer(100_000, [300], 40)
    (True, False)
    """
    if not df or owner_rows <= 0:
        return False
    return window * min(df) / owner_rows >= keyword_k


@dataclass(frozen=True)
class SearchPlan:
    """How one search gathers candidates, and the counts it was chosen from.

    ``vector``: ``"exact"`` (scan the owners' vectors) or ``"hnsw"`` (the index), ``None``
    without a query embedding. ``keyword``: ``"scan"`` (the owners' rows) or
    ``"trigram"`` (the index), ``None`` without terms. ``recent_window``: look among
    the owner's newest :data:`RECENT_WINDOW` rows first (one owner of at least
    :data:`LARGE_OWNER_ROWS` memories, trigram path).
    ``split``: run the two branches concurrently on two pooled connections, so the
    search costs the slower branch, not the sum: for owners of at least
    :data:`SPLIT_MIN_ROWS` memories. Smaller owners keep one statement, one round trip.
    """

    owner_rows: int
    table_rows: int
    vector: VectorPath | None
    keyword: KeywordPath | None
    recent_window: bool = False
    split: bool = False

    def describe(self) -> dict[str, Any]:
        """The plan in words, as benchmarks record it."""
        return {"owner_rows": self.owner_rows, "table_rows": self.table_rows,
                "vector": {"exact": "exact scan", "hnsw": "HNSW index", None: None}[self.vector],
                "keyword": {"scan": "owner rows", "trigram": "trigram index",
                            None: None}[self.keyword],
                "recent_window": self.recent_window, "split": self.split}


def search_plan(owner_rows: int, table_rows: float, *, owners: int, embedding: bool,
                terms: Sequence[str], keyword_k: int,
                df: Mapping[str, int] | None = None) -> SearchPlan:
    """The plan for searching ``owners`` owners holding ``owner_rows`` memories in a
    table of ``table_rows`` (0 before the first ANALYZE: the owners' own rows count).

    ``df``: the terms' document frequencies among those owners; without it the
    recent window is tried whenever it could apply.

    >>> p = search_plan(1_000, 1_000, owners=1, embedding=True, terms=["a"], keyword_k=40)
    >>> p.vector, p.keyword, p.recent_window
    ('exact', 'scan', False)
    """
    table = max(int(table_rows) if math.isfinite(table_rows) else 0, owner_rows)
    vector: VectorPath | None = None
    if embedding:
        vector = "exact" if prefer_exact(owner_rows, table) else "hnsw"
    keyword: KeywordPath | None = None
    window = False
    if terms:
        keyword = "scan" if prefer_keyword_scan(owner_rows, table) else "trigram"
        # One owner only: its recency index is walked in order only under an equality.
        window = keyword == "trigram" and owners == 1 and owner_rows >= LARGE_OWNER_ROWS and (
            df is None or window_may_answer(owner_rows, [df.get(t, 0) for t in terms],
                                            keyword_k))
    split = vector is not None and keyword is not None and owner_rows >= SPLIT_MIN_ROWS
    return SearchPlan(owner_rows, table, vector, keyword, window, split)


def _last_true(pred: Any, high: int = 1 << 48) -> int:
    """The largest ``x`` in ``[0, high]`` with ``pred(x)``, for a ``pred`` true at 0 that
    turns false at most once as ``x`` grows."""
    lo, hi = 0, high
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if pred(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


@lru_cache(maxsize=256)
def plan_limits(table_rows: int) -> tuple[int, int, int, int]:
    """Where :func:`search_plan`'s choices switch in a table of ``table_rows``: the most
    owner rows still searched exactly, the most whose keyword candidates still come
    from their rows, the most below :data:`SPLIT_MIN_ROWS` and the most below
    :data:`LARGE_OWNER_ROWS`. Each choice switches once as the owners' rows grow.

    >>> plan_limits(1_000_000)
    (31622, 50000, 4999, 49999)
    """
    return (_last_true(lambda x: prefer_exact(x, max(table_rows, x))),
            _last_true(lambda x: prefer_keyword_scan(x, max(table_rows, x))),
            SPLIT_MIN_ROWS - 1, LARGE_OWNER_ROWS - 1)


def same_plan_rows(owner_rows: int, table_rows: float) -> tuple[int, int]:
    """The owner row counts, from first to last, for which :func:`search_plan` chooses
    as it does for ``owner_rows`` (same table rows, every other argument the same).

    >>> same_plan_rows(1_000, 1_000), same_plan_rows(10_000, 1_000_000)
    ((0, 1000), (5000, 31622))
    """
    table = int(table_rows) if math.isfinite(table_rows) else 0
    limits = plan_limits(table)
    lo = max((t + 1 for t in limits if t < owner_rows), default=0)
    hi = min((t for t in limits if t >= owner_rows), default=1 << 62)
    return lo, hi
