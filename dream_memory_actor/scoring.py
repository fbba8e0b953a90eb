"""Hybrid scoring, as the seed states it: pure functions, no storage, no Ray.

    hybrid = w_vector * vector + w_keyword * keyword + w_time * time
    time   = 1 / (1 + days / half_life_days)        (seed: 0.6, 0.3, 0.1, 30 days)

``vector`` is the cosine similarity of query and memory embeddings, clipped to
[0, 1] (an opposite direction is no evidence of relevance, not negative
evidence). ``keyword`` is the share of the query's terms found in the memory.
Without an embedder the vector signal is absent (``None``) and contributes 0,
so a keyword-only score is comparable to the same hit's hybrid score.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

import numpy as np

from .models import SearchHit, VectorMemory
from .text import fold


@dataclass(frozen=True)
class Weights:
    """Weights of the three signals and the time half-life in days."""

    vector: float = 0.6
    keyword: float = 0.3
    time: float = 0.1
    half_life_days: float = 30.0

    def __post_init__(self) -> None:
        for name in ("vector", "keyword", "time"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"weight {name} must be a finite number >= 0, got {value!r}")
        if not (math.isfinite(self.half_life_days) and self.half_life_days > 0):
            raise ValueError(f"half_life_days must be > 0, got {self.half_life_days!r}")


SEED_WEIGHTS = Weights()


def time_score(updated_at: datetime, now: datetime, half_life_days: float = 30.0) -> float:
    """``1 / (1 + days / half_life)``; a memory from the future counts as new."""
    days = max(0.0, (now - updated_at).total_seconds() / 86400.0)
    return 1.0 / (1.0 + days / half_life_days)


class TermStats(NamedTuple):
    """What the weights of a query's terms are computed from.

    ``docs``: memories held by the searched owners (with or without an embedding);
    ``df``: for each query term, how many of them have it among their ``text.terms``
    (absent: 0); ``table_docs``: memories in the whole store, when the backend knows it
    cheaply (only for choosing a query plan, never for scores).
    """

    docs: int
    df: Mapping[str, int]
    table_docs: int | None = None


def keyword_score(query_terms: Sequence[str], content: str) -> float:
    """Share of the query's terms that occur in ``content`` (substring, case-folded).

    A term is found the way ``ILIKE '%term%'`` finds it, so "deploy" matches
    "deployment". No terms means no keyword evidence: 0.
    """
    return keyword_score_folded(query_terms, fold(content))


def keyword_score_folded(query_terms: Sequence[str], folded: str) -> float:
    """``keyword_score`` for text already passed through ``text.fold``."""
    if not query_terms:
        return 0.0
    return sum(1 for t in query_terms if t in folded) / len(query_terms)


def cosine(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> float:
    """Cosine similarity of two vectors; 0 when either has zero length."""
    va = np.asarray(a, dtype=np.float64)
    vb = np.asarray(b, dtype=np.float64)
    na = float(np.linalg.norm(va))
    nb = float(np.linalg.norm(vb))
    if na == 0.0 or nb == 0.0:
        return 0.0
    return float(np.dot(va, vb) / (na * nb))


def vector_score(similarity: float | None) -> float | None:
    """Cosine similarity clipped to [0, 1]; ``None`` stays ``None`` (no embedding)."""
    if similarity is None:
        return None
    return min(1.0, max(0.0, similarity))


def hybrid_score(
    vector: float | None, keyword: float, time: float, weights: Weights = SEED_WEIGHTS
) -> float:
    """The weighted sum; an absent vector signal contributes 0."""
    v = 0.0 if vector is None else vector
    return weights.vector * v + weights.keyword * keyword + weights.time * time


class Candidate(NamedTuple):
    """A memory a backend proposes for ranking, with its cosine to the query if known.

    Only what ranking needs is read eagerly; ``payload`` is the backend's row,
    turned into a ``VectorMemory`` only for the hits actually returned.
    ``folded`` is the case-folded text when the backend already stores it.
    """

    id: str
    content: str
    updated_at: datetime
    similarity: float | None
    payload: Any
    folded: str | None = None

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
) -> list[Scored]:
    """Score candidates exactly and return the best ``limit``, ties broken by recency then id.

    In keyword mode (no query embedding) a candidate that matches no term is
    not a hit: recency alone is not relevance.
    """
    # The formulas above, inlined: this loop runs for every candidate of every search
    # (~80 each), and Scored objects are made only for the ``limit`` returned.
    rows: list[tuple[float, float, str, Candidate, float | None, float, float]] = []
    seen: set[str] = set()
    n_terms = len(query_terms)
    wv, wk, wt, half_life = weights.vector, weights.keyword, weights.time, weights.half_life_days
    for c in candidates:
        cid = c.id
        if cid in seen:
            continue
        seen.add(cid)
        if n_terms:
            folded = c.folded if c.folded is not None else fold(c.content)
            kw = sum([t in folded for t in query_terms]) / n_terms
        else:
            kw = 0.0
        if not hybrid and kw == 0.0:
            continue
        vec = None
        if hybrid and (sim := c.similarity) is not None:
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
                     time_score=s.time, mode="hybrid" if hybrid else "keyword")
