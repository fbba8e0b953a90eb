"""Re-ranking one candidate set under many weight settings, and choosing weights honestly.

A search gathers candidates (nearest by vector + best by keywords), which do not
depend on the weights, then ranks them with :func:`scoring.rank`. So for each
question the candidates are fetched once and ranked here under every weight
setting with numpy: the same arithmetic in the same order as ``scoring.rank``
(ties by recency, then id), which :func:`agrees_with_rank` checks.

Weights are chosen by leave-one-conversation-out: for each conversation, the grid
point with the best mean recall@10 on the *other* conversations ranks its
questions; only those held-out rankings are reported.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

from dream_memory_actor.scoring import (
    Candidate,
    Weights,
    keyword_score_folded,
    rank,
    vector_score,
)
from dream_memory_actor.text import fold

#: The product's default weights (0.6 vector, 0.3 keyword, 0.1 time, 30-day half-life).
DEFAULT_WEIGHTS = Weights()


@dataclass(frozen=True)
class Signals:
    """The candidates of one question, as arrays (one entry per distinct candidate)."""

    ids: tuple[str, ...]
    vector: np.ndarray  #: clipped cosine; 0 for a candidate without one
    keyword: np.ndarray
    days: np.ndarray  #: age at "now" in days, >= 0
    recency: np.ndarray  #: updated_at as a POSIX timestamp
    id_order: np.ndarray  #: position of the id in sorted order (last tie-break)


def signals(cands: Sequence[Candidate], query_terms: Sequence[str], now: datetime,
            term_weights: Sequence[float] | None = None,
            calibration: Callable[[float], float] | None = None) -> Signals:
    """The signals ``scoring.rank`` computes, for each distinct candidate (first kept):
    the keyword share weighted by ``term_weights``, the cosine through ``calibration``."""
    seen: dict[str, Candidate] = {}
    for c in cands:
        seen.setdefault(c.id, c)
    cs = list(seen.values())
    vec = [vector_score(c.similarity, calibration) for c in cs]
    kw = [keyword_score_folded(query_terms, c.folded if c.folded is not None else fold(c.content),
                               term_weights) for c in cs]
    days = [max(0.0, (now - c.updated_at).total_seconds() / 86400.0) for c in cs]
    ids = tuple(c.id for c in cs)
    order = np.empty(len(ids), dtype=np.int64)
    order[np.argsort(np.array(ids, dtype=object))] = np.arange(len(ids))
    return Signals(ids, np.array([0.0 if v is None else v for v in vec], dtype=np.float64),
                   np.array(kw, dtype=np.float64), np.array(days, dtype=np.float64),
                   np.array([c.updated_at.timestamp() for c in cs], dtype=np.float64), order)


def fast_rank(s: Signals, w: Weights, k: int) -> list[str]:
    """The ids ``scoring.rank(..., hybrid=True)`` returns for these candidates and weights."""
    if not s.ids:
        return []
    ts = 1.0 / (1.0 + s.days / w.half_life_days)
    score = w.vector * s.vector + w.keyword * s.keyword + w.time * ts
    order = np.lexsort((s.id_order, -s.recency, -score))[:k]
    return [s.ids[i] for i in order]


def agrees_with_rank(cands: Sequence[Candidate], query_terms: Sequence[str], now: datetime,
                     w: Weights, k: int, term_weights: Sequence[float] | None = None) -> bool:
    """Whether :func:`fast_rank` gives exactly ``scoring.rank``'s order here."""
    ref = [x.candidate.id for x in rank(cands, query_terms, now, w, k, hybrid=True,
                                        term_weights=term_weights)]
    return ref == fast_rank(signals(cands, query_terms, now, term_weights, w.calibration), w, k)


def weight_grid(step: float = 0.1, half_lives: Sequence[float] = (7.0, 30.0, 365.0)
                ) -> list[Weights]:
    """Weights on the simplex (vector + keyword + time = 1, in ``step``s) x half-lives,
    nearest to the default weights first (so ties go to their side)."""
    n = round(1 / step)
    grid = [Weights(round(i * step, 6), round(j * step, 6), round((n - i - j) * step, 6), h)
            for h in half_lives for i in range(n + 1) for j in range(n + 1 - i)]
    return sorted(grid, key=lambda w: distance_to_default(w))


def distance_to_default(w: Weights) -> float:
    s = DEFAULT_WEIGHTS
    total = (w.vector + w.keyword + w.time) or 1.0
    return float(abs(w.vector / total - s.vector) + abs(w.keyword / total - s.keyword)
                 + abs(w.time / total - s.time)
                 + abs(np.log(w.half_life_days / s.half_life_days)))


def weights_dict(w: Weights) -> dict[str, float]:
    return {"vector": w.vector, "keyword": w.keyword, "time": w.time,
            "half_life_days": w.half_life_days}


def best_index(objective: np.ndarray, tiebreak: np.ndarray) -> int:
    """The grid point with the highest mean ``objective`` (ties: ``tiebreak``, then grid
    order). Both are [grid, questions]."""
    obj = objective.mean(axis=1)
    tie = tiebreak.mean(axis=1)
    top = np.flatnonzero(obj >= obj.max() - 1e-12)
    top2 = top[tie[top] >= tie[top].max() - 1e-12]
    return int(top2[0])


def leave_one_out(groups: Sequence[str], objective: np.ndarray, tiebreak: np.ndarray,
                  grid: Sequence[Weights]) -> tuple[np.ndarray, list[dict[str, Any]]]:
    """Per question, the grid index chosen without its group; and a record per fold."""
    g = np.asarray(groups, dtype=object)
    chosen = np.full(len(groups), -1, dtype=np.int64)
    folds = []
    for held in dict.fromkeys(groups):
        train = g != held
        i = best_index(objective[:, train], tiebreak[:, train])
        chosen[~train] = i
        folds.append({"held_out": held, "weights": weights_dict(grid[i]),
                      "train_recall@10": round(float(objective[i, train].mean()), 4),
                      "held_out_questions": int((~train).sum())})
    return chosen, folds


def pick(per_grid: Sequence[Sequence[Mapping[str, float]]], chosen: np.ndarray
         ) -> list[Mapping[str, float]]:
    """Question ``q``'s metrics under its chosen grid point ``chosen[q]``."""
    return [per_grid[int(i)][q] for q, i in enumerate(chosen)]
