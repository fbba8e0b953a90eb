"""Pure functions: hybrid scoring, time decay, keyword share, ranking."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import numpy as np
import pytest

from dream_memory_actor.models import VectorMemory
from dream_memory_actor.scoring import (
    MAX_QUERY_TERMS,
    Candidate,
    TermStats,
    Weights,
    cosine,
    cosine_to,
    hybrid_score,
    idf,
    keyword_score,
    length,
    matched_weight,
    rank,
    strongest_terms,
    term_weights,
    time_score,
    vector_score,
)
from dream_memory_actor.text import fold, occurs

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


def test_cosine_to_a_vector_of_known_length_is_cosine_to_the_last_digit() -> None:
    """The in-memory backend scores its rows with ``cosine_to`` and each row's kept
    ``length``: the same numbers as ``cosine``, so every backend ranks alike."""
    rng = np.random.default_rng(5)
    for i in range(600):
        dim = (3, 384, 768)[i % 3]
        query: Any = rng.standard_normal(dim) * rng.uniform(1e-3, 1e3)
        if i % 4 == 0:
            query = query.astype(np.float32)
        if i % 2:
            query = [float(x) for x in query]
        row = np.zeros(dim) if i % 50 == 0 else rng.standard_normal(dim)
        assert length(row) == float(np.linalg.norm(row))
        assert cosine_to(query)(row, length(row)) == cosine(query, row)
    assert cosine_to([0.0, 0.0])(np.array([1.0, 0.0]), 1.0) == 0.0


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


def test_rank_reads_a_candidates_matched_weight_as_it_would_find_it() -> None:
    """A backend's count of the weights found (``Candidate.matched``, added term by term
    in the query's order) gives the very scores that looking for the terms gives."""
    import random

    rnd = random.Random(5)
    words = ["tea", "kubernetes", "deploy", "deployment", "paris", "部署", "系统"]
    terms, tw = ["deploy", "部署", "tea", "paris"], [2.3, 0.7, 1.9, 0.01]
    found = [_cand(" ".join(rnd.choice(words) for _ in range(3)), rnd.random(),
                   days=rnd.randint(0, 40), mid=f"m{i:03d}") for i in range(80)]
    counted = [c._replace(matched=sum([w for t, w in zip(terms, tw, strict=True)
                                       if occurs(t, fold(c.content))]), content="")
               for c in found]
    for hybrid in (True, False):
        got = rank(counted, terms, NOW, Weights(), 80, hybrid=hybrid, term_weights=tw)
        want = rank(found, terms, NOW, Weights(), 80, hybrid=hybrid, term_weights=tw)
        assert [(s.candidate.id, s.score, s.vector, s.keyword, s.time) for s in got] == [
            (s.candidate.id, s.score, s.vector, s.keyword, s.time) for s in want]
        assert any(s.keyword > 0 for s in want)
        assert any(s.keyword == 0 for s in want) == hybrid  # keyword mode drops those


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("hybrid", [True, False])
@pytest.mark.parametrize("n_terms", [0, 1, 3])
def test_rank_equals_the_reference_formulas(hybrid: bool, n_terms: int, weighted: bool) -> None:
    """The inlined scoring loop gives exactly the scores of the named formulas, and
    the order of sorting by (score desc, age asc, id), on mixed candidates: repeats,
    unknown and out-of-range cosines, future timestamps, ties; with and without
    term weights."""
    import random

    rnd = random.Random(n_terms * 2 + hybrid)
    words = ["tea", "kubernetes", "deploy", "paris", "dog", "café"]
    terms = words[:n_terms]
    tw = [rnd.uniform(0.01, 6.0) for _ in terms] if weighted else None
    weights = Weights(0.5, 0.35, 0.15, half_life_days=12.5)
    cands = [
        _cand(" ".join(rnd.choice(words) for _ in range(4)),
              rnd.choice([None, -0.3, 1.2, rnd.random(), 0.5]),
              days=rnd.choice([-2, 0, 1, 1, 7, rnd.randint(0, 400)]), mid=f"m{i:03d}")
        for i in range(120)]
    cands += cands[::7]  # repeats are ranked once
    out = rank(cands, terms, NOW, weights, 25, hybrid=hybrid, min_score=0.2, term_weights=tw)

    expected = []
    for c in {c.id: c for c in cands}.values():
        kw = keyword_score(terms, c.content, tw)
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


# -- rarity weights ---------------------------------------------------------------------


def test_idf_is_bm25s_smoothed_formula() -> None:
    import math

    for df, n in [(0, 0), (0, 10), (3, 10), (10, 10), (1, 1000)]:
        assert idf(df, n) == pytest.approx(math.log(1 + (n - df + 0.5) / (df + 0.5)))
    assert idf(10, 10) > 0  # a term every memory has still counts a little
    assert idf(1, 100) > idf(10, 100) > idf(90, 100)
    assert idf(5, 3) == idf(5, 5)  # N is at least df


def test_term_weights_follow_document_frequency_and_absent_terms_are_rarest() -> None:
    stats = TermStats(100, {"went": 60, "caroline": 3})
    went, caroline, unseen = term_weights(["went", "caroline", "xyz"], stats)
    assert unseen > caroline > 2 * went > 0
    assert term_weights([], stats) == []


def test_weighted_keyword_score_counts_rare_terms_more_and_stays_in_unit_range() -> None:
    terms = ["went", "caroline"]
    w = term_weights(terms, TermStats(100, {"went": 60, "caroline": 3}))
    rare = keyword_score(terms, "Caroline called", w)
    common = keyword_score(terms, "we went home", w)
    assert rare > 0.5 > common > 0
    assert rare + common == pytest.approx(1.0)
    assert keyword_score(terms, "Caroline went home", w) == 1.0
    assert keyword_score(terms, "nothing here", w) == 0.0
    assert keyword_score([], "anything", []) == 0.0
    assert keyword_score(terms, "went", [1.0, 1.0]) == keyword_score(terms, "went") == 0.5
    assert matched_weight(terms, [2.0, 3.0], "caroline went") == 5.0
    assert matched_weight(terms, None, "caroline") == 1.0


def test_strongest_terms_keep_the_rarest_present_terms_in_query_order() -> None:
    terms = ["a1", "b2", "c3", "d4", "e5"]
    every = TermStats(10, dict.fromkeys(terms, 1))
    assert strongest_terms(terms, [1.0, 5.0, 2.0, 5.0, 0.5], every, 3) == (
        ["b2", "c3", "d4"], [5.0, 2.0, 5.0])
    # ties: the earlier term
    assert strongest_terms(terms, [1.0] * 5, every, 2) == (["a1", "b2"], [1.0, 1.0])
    assert strongest_terms(terms[:2], [1.0, 2.0], every) == (["a1", "b2"], [1.0, 2.0])
    many = [f"t{i}" for i in range(100)]
    assert len(strongest_terms(many, [1.0] * 100, TermStats(10, dict.fromkeys(many, 1)))[0]
               ) == MAX_QUERY_TERMS
    # terms no memory has are left out, however rare: they find nothing, and their
    # weight would only shrink every memory's share
    stats = TermStats(10, {"b2": 4, "e5": 9})
    w = term_weights(terms, stats)
    assert strongest_terms(terms, w, stats, 3) == (["b2", "e5"], [w[1], w[4]])
    assert strongest_terms(terms, w, TermStats(10, {}), 3) == ([], [])
