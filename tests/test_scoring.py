"""Pure functions: hybrid scoring, time decay, keyword share, ranking."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from dream_memory_actor.models import VectorMemory
from dream_memory_actor.scoring import (
    Candidate,
    Weights,
    cosine,
    hybrid_score,
    keyword_score,
    rank,
    time_score,
    vector_score,
)

NOW = datetime(2026, 1, 31, tzinfo=timezone.utc)


def test_seed_weights() -> None:
    w = Weights()
    assert (w.vector, w.keyword, w.time, w.half_life_days) == (0.6, 0.3, 0.1, 30.0)


def test_hybrid_formula() -> None:
    assert hybrid_score(0.9, 0.5, 0.25) == pytest.approx(0.6 * 0.9 + 0.3 * 0.5 + 0.1 * 0.25)
    assert hybrid_score(None, 1.0, 1.0) == pytest.approx(0.4)  # keyword-only: vector counts 0
    assert hybrid_score(1, 1, 1, Weights(1, 0, 0)) == 1.0


@pytest.mark.parametrize(("days", "expected"), [(0, 1.0), (30, 0.5), (60, 1 / 3), (90, 0.25)])
def test_time_score_is_one_over_one_plus_days_over_thirty(days: int, expected: float) -> None:
    assert time_score(NOW - timedelta(days=days), NOW) == pytest.approx(expected)


def test_time_score_future_counts_as_new_and_half_life_is_configurable() -> None:
    assert time_score(NOW + timedelta(days=3), NOW) == 1.0
    assert time_score(NOW - timedelta(days=7), NOW, half_life_days=7) == pytest.approx(0.5)


def test_keyword_score_is_share_of_terms_found() -> None:
    assert keyword_score(["deploy", "helm"], "We deploy with Helm") == 1.0
    assert keyword_score(["deploy", "argo"], "We DEPLOYED with Helm") == 0.5  # substring, folded
    assert keyword_score([], "anything") == 0.0
    assert keyword_score(["部署"], "系统部署完成") == 1.0


def test_vector_score_clips_negative_cosine() -> None:
    assert vector_score(-0.4) == 0.0
    assert vector_score(0.7) == 0.7
    assert vector_score(None) is None


def test_cosine() -> None:
    assert cosine([1, 0], [1, 0]) == pytest.approx(1.0)
    assert cosine([1, 0], [0, 1]) == pytest.approx(0.0)
    assert cosine([1, 0], [0, 0]) == 0.0


@pytest.mark.parametrize("bad", [{"vector": -1.0}, {"time": float("nan")},
                                 {"half_life_days": 0.0}])
def test_weights_reject_nonsense(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        Weights(**bad)


def _cand(content: str, sim: float | None, days: float = 0, mid: str | None = None) -> Candidate:
    t = NOW - timedelta(days=days)
    m = VectorMemory(owner="o", content=content, created_at=t, updated_at=t,
                     **({"id": mid} if mid else {}))
    return Candidate.of(m, sim)


def test_rank_orders_by_hybrid_score_and_dedups() -> None:
    a = _cand("went live on kubernetes", 0.9)
    b = _cand("kubernetes deploy notes", 0.5)
    out = rank([a, b, a], ["kubernetes", "deploy"], NOW, Weights(), 10, hybrid=True)
    assert [s.candidate.id for s in out] == [a.id, b.id]
    assert out[0].score == pytest.approx(0.6 * 0.9 + 0.3 * 0.5 + 0.1)


def test_rank_keyword_mode_drops_non_matching_and_ignores_similarity() -> None:
    a = _cand("green tea", 0.99)
    b = _cand("kubernetes", None)
    out = rank([a, b], ["kubernetes"], NOW, Weights(), 10, hybrid=False)
    assert [s.candidate.id for s in out] == [b.id]
    assert out[0].vector is None


def test_rank_ties_break_by_recency_then_id() -> None:
    old = _cand("x", 0.5, days=1, mid="b")
    new = _cand("x", 0.5, days=0, mid="c")
    # equal scores forced via zero time weight
    out = rank([old, new], [], NOW, Weights(0.6, 0.3, 0.0), 10, hybrid=True)
    assert [s.candidate.id for s in out] == ["c", "b"]


def test_rank_min_score_and_limit() -> None:
    cands = [_cand(f"m{i}", i / 10) for i in range(10)]
    out = rank(cands, [], NOW, Weights(), 3, hybrid=True, min_score=0.0)
    assert len(out) == 3
    assert rank(cands, [], NOW, Weights(), 10, hybrid=True, min_score=0.6) == [
        s for s in rank(cands, [], NOW, Weights(), 10, hybrid=True) if s.score >= 0.6]


@pytest.mark.parametrize("hybrid", [True, False])
@pytest.mark.parametrize("n_terms", [0, 1, 3])
def test_rank_equals_the_reference_formulas(hybrid: bool, n_terms: int) -> None:
    """The inlined scoring loop gives exactly the scores of the named formulas, and
    the order of sorting by (score desc, age asc, id), on mixed candidates: repeats,
    unknown and out-of-range cosines, future timestamps, ties."""
    import random

    rnd = random.Random(n_terms * 2 + hybrid)
    words = ["tea", "kubernetes", "deploy", "paris", "dog", "café"]
    terms = words[:n_terms]
    weights = Weights(0.5, 0.35, 0.15, half_life_days=12.5)
    cands = [
        _cand(" ".join(rnd.choice(words) for _ in range(4)),
              rnd.choice([None, -0.3, 1.2, rnd.random(), 0.5]),
              days=rnd.choice([-2, 0, 1, 1, 7, rnd.randint(0, 400)]), mid=f"m{i:03d}")
        for i in range(120)]
    cands += cands[::7]  # repeats are ranked once
    out = rank(cands, terms, NOW, weights, 25, hybrid=hybrid, min_score=0.2)

    expected = []
    for c in {c.id: c for c in cands}.values():
        kw = keyword_score(terms, c.content)
        if not hybrid and kw == 0.0:
            continue
        vec = vector_score(c.similarity) if hybrid else None
        ts = time_score(c.updated_at, NOW, weights.half_life_days)
        score = hybrid_score(vec, kw, ts, weights)
        if score >= 0.2:
            age = (NOW - c.updated_at).total_seconds()
            expected.append((-score, age, c.id, vec, kw, ts))
    expected.sort()
    assert [(s.candidate.id, s.score, s.vector, s.keyword, s.time) for s in out] == [
        (cid, -neg, vec, kw, ts) for neg, _, cid, vec, kw, ts in expected[:25]]
