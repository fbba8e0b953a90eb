"""Hybrid scoring: pure functions, no storage, no Ray.

    hybrid = w_vector * vector + w_keyword * keyword + w_time * time
    time   = 1 / (1 + days / half_life_days)        (defaults: 0.6, 0.3, 0.1, 30 days)

``vector`` is the cosine similarity of query and memory embeddings, mapped
through the embedder's calibration (``Weights.calibration``, so the weights mean
the same with any model; see ``embedding.calibration``) and clipped to [0, 1]
(an opposite direction is no evidence of relevance, not negative evidence).
``keyword`` is the weighted share of the query's terms found in the memory, each
term weighted by its rarity among the searched memories (BM25's idf,
``term_weights``): a match on "Caroline" counts for more than one on "went".
Without an embedder the vector signal is absent (``None``) and contributes 0,
so a keyword-only score is comparable to the same hit's hybrid score.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

import numpy as np

from .models import SearchHit, VectorMemory
from .text import fold, is_cjk, occurs, word_start_at


@dataclass(frozen=True)
class Weights:
    """Weights of the three signals, the time half-life in days, and the calibration
    of raw query-to-memory cosines (``None``: the raw cosine is the vector signal)."""

    vector: float = 0.6
    keyword: float = 0.3
    time: float = 0.1
    half_life_days: float = 30.0
    calibration: Callable[[float], float] | None = None

    def __post_init__(self) -> None:
        for name in ("vector", "keyword", "time"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"weight {name} must be a finite number >= 0, got {value!r}")
        if not (math.isfinite(self.half_life_days) and self.half_life_days > 0):
            raise ValueError(f"half_life_days must be > 0, got {self.half_life_days!r}")
        if self.calibration is not None and not callable(self.calibration):
            raise ValueError("calibration must map a raw cosine to a float")


DEFAULT_WEIGHTS = Weights()


def time_score(updated_at: datetime, now: datetime, half_life_days: float = 30.0) -> float:
    """``1 / (1 + days / half_life)``; a memory from the future counts as new."""
    days = max(0.0, (now - updated_at).total_seconds() / 86400.0)
    return 1.0 / (1.0 + days / half_life_days)


#: A search keeps at most this many of its query's terms, the rarest of those some
#: memory has (``strongest_terms``). Bounds the cost of keyword candidates and ranking
#: for any query length.
MAX_QUERY_TERMS = 32


class TermStats(NamedTuple):
    """What the weights of a query's terms are computed from.

    ``docs``: memories held by the searched owners (with or without an embedding);
    ``df``: for each query term, how many of them it is found in, as counted from the
    whole terms every write keeps (``storage.terms``: the counts of the terms starting
    with it, at most each owner's memories; absent: 0); ``table_docs``: memories in the
    whole store, when the backend knows it cheaply (only for choosing a query plan,
    never for scores); ``versions``: each owner's version token read with the counts,
    by a backend that keeps owners' rows in the process (``storage.owner_rows``).
    """

    docs: int
    df: Mapping[str, int]
    table_docs: int | None = None
    versions: Mapping[str, str] | None = None


def idf(df: int, docs: int) -> float:
    """BM25's smoothed inverse document frequency, ``ln(1 + (N - df + 0.5) / (df + 0.5))``.

    Always > 0, so a term every memory has still counts a little; ``N`` is taken as at
    least ``df``.

    >>> round(idf(0, 100), 2), round(idf(50, 100), 2), round(idf(100, 100), 3)
    (5.31, 0.69, 0.005)
    """
    d = max(0, df)
    n = max(docs, d)
    return math.log(1.0 + (n - d + 0.5) / (d + 0.5))


def term_weights(terms: Sequence[str], stats: TermStats) -> list[float]:
    """The weight (``idf``) of each of ``terms``, in the same order."""
    get = stats.df.get
    return [idf(get(t, 0), stats.docs) for t in terms]


def strongest_terms(terms: Sequence[str], weights: Sequence[float], stats: TermStats,
                    limit: int = MAX_QUERY_TERMS) -> tuple[list[str], list[float]]:
    """The terms a search keeps, with their weights, in query order: those some searched
    memory has (``df > 0``), at most ``limit``, the rarest first (equal weights: query
    order).

    A term no memory has is found nowhere, yet it would carry the highest weight of
    all (the idf of df 0) into the share's denominator: a query with one word the
    memories lack ("my *trip* to Paris" against memories that say "travel") would cap
    every memory's keyword score, and a long query with many such words would reduce
    the keyword signal to noise. Left out, the share is that of the findable part of
    the query, comparable between short and long queries.
    """
    get = stats.df.get
    present = [i for i in range(len(terms)) if get(terms[i], 0) > 0]
    if len(present) > limit:
        present = sorted(sorted(present, key=lambda i: (-weights[i], i))[:limit])
    return [terms[i] for i in present], [weights[i] for i in present]


def matched_weight(query_terms: Sequence[str], weights: Sequence[float] | None,
                   folded: str) -> float:
    """Sum of the weights of the terms found in ``folded`` (``text.occurs``; each weight
    1 if None)."""
    if weights is None:
        return float(sum([occurs(t, folded) for t in query_terms]))
    return sum([w for t, w in zip(query_terms, weights, strict=True) if occurs(t, folded)])


def keyword_score(query_terms: Sequence[str], content: str,
                  weights: Sequence[float] | None = None) -> float:
    """Weighted share of the query's terms found in ``content`` (case-folded).

    A CJK term is found anywhere, any other term where a word starts (``text.occurs``):
    "deploy" matches "deployment", "ate" does not match "create". ``weights`` (aligned
    with the terms; ``None``: all equal) make a rare term count for more. No terms
    means no keyword evidence: 0. Always in [0, 1].
    """
    return keyword_score_folded(query_terms, fold(content), weights)


def keyword_score_folded(query_terms: Sequence[str], folded: str,
                         weights: Sequence[float] | None = None) -> float:
    """``keyword_score`` for text already passed through ``text.fold``."""
    if not query_terms:
        return 0.0
    total = float(len(query_terms)) if weights is None else sum(weights)
    if total <= 0.0:
        return 0.0
    return min(1.0, matched_weight(query_terms, weights, folded) / total)


def cosine(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> float:
    """Cosine similarity of two vectors; 0 when either has zero length."""
    va = np.asarray(a, dtype=np.float64)
    vb = np.asarray(b, dtype=np.float64)
    na = float(np.linalg.norm(va))
    nb = float(np.linalg.norm(vb))
    if na == 0.0 or nb == 0.0:
        return 0.0
    return float(np.dot(va, vb) / (na * nb))


def length(v: np.ndarray) -> float:
    """The length of a 1-D float64 vector, the number ``cosine`` divides by (NumPy's
    ``norm`` is the square root of the vector's dot product with itself)."""
    return math.sqrt(float(v.dot(v)))


def cosine_to(query: Sequence[float] | np.ndarray) -> Callable[[np.ndarray, float], float]:
    """``cosine(query, v)``, to the last digit, of a float64 vector ``v`` of known
    ``length``: the query converted and measured once, not once a row. A backend that
    scans its rows keeps each row's length with it."""
    q = np.asarray(query, dtype=np.float64)
    nq = float(np.linalg.norm(q))

    def of(v: np.ndarray, nv: float) -> float:
        return 0.0 if nq == 0.0 or nv == 0.0 else float(q.dot(v) / (nq * nv))

    return of


def vector_score(similarity: float | None,
                 calibration: Callable[[float], float] | None = None) -> float | None:
    """Cosine similarity, calibrated when a calibration is given, clipped to [0, 1];
    ``None`` stays ``None`` (no embedding)."""
    if similarity is None:
        return None
    if calibration is not None:
        similarity = calibration(similarity)
    return min(1.0, max(0.0, similarity))


def hybrid_score(
    vector: float | None, keyword: float, time: float, weights: Weights = DEFAULT_WEIGHTS
) -> float:
    """The weighted sum; an absent vector signal contributes 0."""
    v = 0.0 if vector is None else vector
    return weights.vector * v + weights.keyword * keyword + weights.time * time


class Candidate(NamedTuple):
    """A memory a backend proposes for ranking, with its cosine to the query if known.

    Only what ranking needs is read eagerly; ``payload`` is the backend's row,
    turned into a ``VectorMemory`` only for the hits actually returned.
    ``folded`` is the text the keyword signal reads, when the backend has it: the
    memory's content and context folded (``text.fold``), or their ``text.word_starts``,
    where ``text.occurs`` gives the same answers. ``matched``, when the backend has
    counted it (its word index), is the sum of the weights of the query's terms found
    there, added term by term in the query's order: ``rank`` reads it instead.
    """

    id: str
    content: str
    updated_at: datetime
    similarity: float | None
    payload: Any
    folded: str | None = None
    matched: float | None = None

    @classmethod
    def of(cls, memory: VectorMemory, similarity: float | None = None) -> Candidate:
        """A candidate whose payload is the memory itself."""
        return cls(memory.id, memory.content, memory.updated_at, similarity, memory)


@dataclass(frozen=True)
class Scored:
    """A ranked candidate with its signal scores (before it becomes a ``SearchHit``)."""

    candidate: Candidate
    score: float
    vector: float | None
    keyword: float
    time: float


def rank(
    candidates: Sequence[Candidate],
    query_terms: Sequence[str],
    now: datetime,
    weights: Weights,
    limit: int,
    *,
    hybrid: bool,
    min_score: float = 0.0,
    term_weights: Sequence[float] | None = None,
) -> list[Scored]:
    """Score candidates exactly and return the best ``limit``, ties broken by recency then id.

    In keyword mode (no query embedding) a candidate that matches no term is
    not a hit: recency alone is not relevance. ``term_weights`` (aligned with
    ``query_terms``; ``None``: every term 1) weight the keyword share.
    """
    # The formulas above, inlined: this loop runs for every candidate of every search
    # (~80 each; calling the functions instead doubled its time, 0.6 -> 1.3 ms for 80
    # texts of 30 words), and Scored objects are made only for the ``limit`` returned.
    rows: list[tuple[float, float, str, Candidate, float | None, float, float]] = []
    seen: set[str] = set()
    n_terms = len(query_terms)
    pairs = list(zip(query_terms, [1.0] * n_terms if term_weights is None else term_weights,
                     [not is_cjk(t[0]) for t in query_terms], strict=True))
    total = sum(w for _, w, _ in pairs)
    if total <= 0.0:
        n_terms = 0
    wv, wk, wt, half_life = weights.vector, weights.keyword, weights.time, weights.half_life_days
    calibrated = weights.calibration
    for c in candidates:
        cid = c.id
        if cid in seen:
            continue
        seen.add(cid)
        if n_terms and c.matched is not None:
            kw = min(1.0, c.matched / total)
        elif n_terms:
            folded = c.folded if c.folded is not None else fold(c.content)
            # text.occurs, its usual answers inline: the text's start, after a space
            kw = min(1.0, sum([w for t, w, word in pairs if (p := folded.find(t)) >= 0 and (
                not word or p == 0 or folded[p - 1] == " " or word_start_at(t, folded, p) >= 0
            )]) / total)
        else:
            kw = 0.0
        if not hybrid and kw == 0.0:
            continue
        vec = None
        if hybrid and (sim := c.similarity) is not None:
            if calibrated is not None:
                sim = calibrated(sim)
            vec = 1.0 if sim > 1.0 else (sim if sim > 0.0 else 0.0)
        age = (now - c.updated_at).total_seconds()
        ts = 1.0 / (1.0 + (age / 86400.0) / half_life) if age > 0.0 else 1.0
        score = (0.0 if vec is None else wv * vec) + wk * kw + wt * ts
        if score >= min_score:
            rows.append((-score, age, cid, c, vec, kw, ts))
    # best score first; ties: newest (smallest age) first, then id (unique, so the
    # tuples never compare further)
    best = heapq.nsmallest(limit, rows)
    return [Scored(r[3], -r[0], r[4], r[5], r[6]) for r in best]


def to_hit(s: Scored, memory: VectorMemory, hybrid: bool) -> SearchHit:
    return SearchHit(memory=memory, score=s.score, vector_score=s.vector, keyword_score=s.keyword,
                     time_score=s.time, mode="hybrid" if hybrid else "keyword",
                     cosine=s.candidate.similarity if hybrid else None)
