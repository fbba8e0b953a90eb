"""The LoCoMo loader, the retrieval metrics, BM25 and the weight tuning, on tiny made-up data."""

from __future__ import annotations

import random
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from benchmarks.bm25 import BM25, tokens
from benchmarks.embed_cache import VectorFile
from benchmarks.locomo import (
    bootstrap_ci,
    embedded_texts,
    load_locomo,
    normalize_evidence,
    owner_id_for,
    paired_difference,
    parse_conversation,
    parse_dataset,
    parse_session_time,
    question_metrics,
    summarize,
    turn_texts,
)
from benchmarks.tuning import (
    best_index,
    fast_rank,
    leave_one_out,
    signals,
    weight_grid,
)
from dream_memory_actor import validation
from dream_memory_actor.scoring import DEFAULT_WEIGHTS, Candidate, Weights, rank

UTC = timezone.utc


def conversation(**over: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "sample_id": "conv 1/x",
        "conversation": {
            "speaker_a": "Ann", "speaker_b": "Bob",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a dog."},
                {"speaker": "Bob", "dia_id": "D1:2", "text": "Look!",
                 "img_url": ["x"], "blip_caption": "a photo of a cat"},
            ],
            "session_2_date_time": "9:05 am on 12 June, 2023",
            "session_2": [{"speaker": "Ann", "dia_id": "D2:1", "text": "The dog is Rex."}],
            # a date without turns (as in the real file) does not move "now"
            "session_3_date_time": "10:00 am on 1 January, 2025",
        },
        "qa": [
            {"question": "What pet?", "answer": "dog", "evidence": ["D1:1"], "category": 4},
            {"question": "Name?", "answer": "Rex", "evidence": ["D1:1; D2:01"], "category": 1},
            {"question": "When?", "answer": "May", "evidence": ["D:1:1", "D"], "category": 2},
            {"question": "Gone?", "answer": "x", "evidence": ["D9:9"], "category": 3},
            {"question": "Adv?", "adversarial_answer": "y", "evidence": ["D1:1"],
             "category": 5},
            {"question": "None?", "answer": "z", "evidence": [], "category": 4},
        ],
        "observation": {"leak": "D1:1"}, "session_summary": {}, "event_summary": {},
    }
    raw.update(over)
    return raw


# -- loader ------------------------------------------------------------------------------


def test_session_time_parses_both_halves_of_the_day() -> None:
    assert parse_session_time("1:56 pm on 8 May, 2023") == datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    assert parse_session_time("12:06 am on 11 November, 2022") == datetime(
        2022, 11, 11, 0, 6, tzinfo=UTC)
    assert parse_session_time("12:30 pm on 1 July 2022") == datetime(2022, 7, 1, 12, 30,
                                                                     tzinfo=UTC)
    for bad in ("13:00 pm on 1 May, 2023", "1:00 pm on 1 Maytember, 2023", "yesterday"):
        with pytest.raises(ValueError):
            parse_session_time(bad)


def test_evidence_is_split_normalised_and_the_rest_dropped() -> None:
    kept, dropped = normalize_evidence(["D8:6; D9:17", "D:11:26", "D30:05", "D", "D8:6", ""])
    assert kept == ["D8:6", "D9:17", "D11:26", "D30:5"]
    assert dropped == ["D"]


def test_owner_id_is_valid() -> None:
    for sid in ("conv-26", "conv 1/x", "_x", "é"):
        assert validation.owner_id(owner_id_for(sid)) == owner_id_for(sid)
    assert owner_id_for("conv-26") == "conv-26"


def test_conversation_turns_questions_and_counts() -> None:
    counts: Counter[str] = Counter()
    conv = parse_conversation(conversation(), counts)
    assert conv.owner == "conv-1-x"
    assert [t.dia_id for t in conv.turns] == ["D1:1", "D1:2", "D2:1"]
    assert conv.turns[0].content == "Ann: I adopted a dog."
    assert conv.turns[1].content == "Bob: Look! [shares a photo of a cat]"
    assert conv.turns[2].at == datetime(2023, 6, 12, 9, 5, tzinfo=UTC)
    assert conv.now == datetime(2023, 6, 12, 9, 5, tzinfo=UTC)
    assert [(q.question, q.category, q.evidence) for q in conv.questions] == [
        ("What pet?", 4, ("D1:1",)),
        ("Name?", 1, ("D1:1", "D2:1")),
        ("When?", 2, ("D1:1",)),
    ]
    assert counts == Counter({"questions_total": 6, "skipped_category_5": 1,
                              "skipped_no_evidence": 2, "evidence_unparseable_dropped": 1,
                              "evidence_unknown_id_dropped": 1})
    # nothing from the LLM-made summaries is read
    assert all("leak" not in t.content for t in conv.turns)


def test_a_turn_s_context_is_its_date_and_the_session_s_previous_turn() -> None:
    conv = parse_conversation(conversation(), Counter())
    texts = turn_texts(conv, "text")
    assert texts[0][1] == "8 May 2023\nAnn: I adopted a dog."
    assert texts[1][1] == "8 May 2023\nAnn: I adopted a dog.\nBob: Look! [shares a photo of a cat]"
    # a session's first turn has no previous turn: the other session's is not its context
    assert texts[2] == ("12 June 2023\nAnn: The dog is Rex.", "12 June 2023\nAnn: The dog is Rex.")
    assert turn_texts(conv, "none")[2] == ("Ann: The dog is Rex.", "Ann: The dog is Rex.")
    # beside: the turn stays the memory's content; what is searched joins its context to
    # it as the store does (on one line); the model embeds the turn and each line apart
    assert turn_texts(conv, "beside")[1] == (
        "Bob: Look! [shares a photo of a cat]",
        "Bob: Look! [shares a photo of a cat] 8 May 2023 Ann: I adopted a dog.")
    assert embedded_texts(conv, "beside") == [
        "Ann: I adopted a dog.", "8 May 2023", "Bob: Look! [shares a photo of a cat]",
        "Ann: The dog is Rex.", "12 June 2023"]
    assert embedded_texts(conv, "text") == [e for _, e in turn_texts(conv, "text")]


def test_dataset_file_and_missing_file(tmp_path: Path) -> None:
    import json

    p = tmp_path / "d.json"
    p.write_text(json.dumps([conversation(), conversation(sample_id="conv-2")]))
    data = load_locomo(p)
    assert data.describe()["questions_used"] == 6
    assert data.describe()["questions_by_category"] == {"multi-hop": 2, "single-hop": 2,
                                                        "temporal": 2}
    with pytest.raises(FileNotFoundError, match="--path"):
        load_locomo(tmp_path / "missing.json")
    with pytest.raises(ValueError, match="owner id"):
        parse_dataset([conversation(), conversation(sample_id="conv:1/x".replace(":", " "))])


# -- metrics ------------------------------------------------------------------------------


def test_metrics_by_hand() -> None:
    ranked = [{"a"}, {"x"}, {"b"}] + [{f"n{i}"} for i in range(30)] + [{"c"}]
    m = question_metrics(ranked, ["a", "b", "c"])
    assert m["recall@5"] == pytest.approx(2 / 3)
    assert m["recall@25"] == pytest.approx(2 / 3)
    assert m["recall_all@10"] == 0.0
    assert m["mrr"] == 1.0
    idcg = 1 + 1 / np.log2(3) + 1 / np.log2(4)
    assert m["ndcg@10"] == pytest.approx((1 + 1 / np.log2(4)) / idcg)

    m = question_metrics([{"x"}, {"y"}, {"a", "b"}], {"a", "b"})
    assert (m["recall@10"], m["recall_all@10"]) == (1.0, 1.0)
    assert m["mrr"] == pytest.approx(1 / 3)
    # a merged hit counts once in nDCG
    assert m["ndcg@10"] == pytest.approx((1 / np.log2(4)) / (1 + 1 / np.log2(3)))

    assert question_metrics([], ["a"]) == {"recall@5": 0.0, "recall@10": 0.0, "recall@25": 0.0,
                                           "recall_all@10": 0.0, "ndcg@10": 0.0, "mrr": 0.0}
    with pytest.raises(ValueError):
        question_metrics([{"a"}], [])
    # a repeated hit brings nothing new
    assert question_metrics([{"a"}, {"a"}, {"b"}], ["a", "b"])["mrr"] == 1.0


def test_bootstrap_is_deterministic_and_brackets_the_mean() -> None:
    vals = [0.0, 1.0, 1.0, 0.5, 0.25, 1.0, 0.0, 0.75]
    lo, hi = bootstrap_ci(vals, seed=3)
    assert (lo, hi) == bootstrap_ci(vals, seed=3)
    assert lo <= float(np.mean(vals)) <= hi
    assert bootstrap_ci([0.5] * 5) == (0.5, 0.5)


def test_summary_per_category_and_paired_difference() -> None:
    rows = [(1, question_metrics([{"a"}], ["a"])), (4, question_metrics([{"x"}], ["a"])),
            (4, question_metrics([{"a"}], ["a"]))]
    s = summarize(rows, resamples=200)
    assert s["overall"]["n"] == 3
    assert s["overall"]["recall@10"]["mean"] == pytest.approx(0.6667, abs=1e-4)
    assert s["by_category"]["multi-hop"]["recall@10"]["mean"] == 1.0
    assert s["by_category"]["single-hop"]["n"] == 2
    assert "temporal" not in s["by_category"]
    d = paired_difference([1.0, 1.0, 0.0], [0.0, 1.0, 0.0], resamples=200)
    assert d["mean"] == pytest.approx(0.3333, abs=1e-4)
    assert d["ci95_lo"] >= 0.0
    with pytest.raises(ValueError):
        paired_difference([1.0], [1.0, 0.0])


# -- BM25 ---------------------------------------------------------------------------------


def test_bm25_ranks_rare_matching_terms_first() -> None:
    docs = ["the dog barked at the dog", "a cat sat", "dog and cat", "nothing here"]
    assert tokens("The dog, the DOG!") == ["dog", "dog"]
    index = BM25(docs)
    assert index.top("dog", 10) == [0, 2]
    assert index.top("cat dog", 10)[0] == 2
    assert index.top("unknown", 10) == []
    assert index.idf["cat"] == index.idf["dog"]  # both in two of four documents


# -- tuning: the numpy re-ranking is scoring.rank ------------------------------------------


def _candidates(n: int, rng: random.Random) -> list[Candidate]:
    now = datetime(2024, 1, 1, tzinfo=UTC)
    words = ["dog", "cat", "rex", "walk", "park"]
    out = []
    for i in range(n):
        text = " ".join(rng.choice(words) for _ in range(3))
        at = now - timedelta(days=rng.choice([0, 1, 1, 30, 400]))  # repeated ages: ties
        sim = rng.choice([None, 0.5, 0.5, -0.2, rng.random()])
        out.append(Candidate(f"id{rng.randrange(n)}-{i % 3}", text, at, sim, None))
    return out


@pytest.mark.parametrize("w", [DEFAULT_WEIGHTS, Weights(1, 0, 0), Weights(0, 1, 0),
                               Weights(0.2, 0.2, 0.6, 7.0)])
def test_fast_rank_equals_scoring_rank(w: Weights) -> None:
    rng = random.Random(5)
    now = datetime(2024, 1, 1, tzinfo=UTC)
    for _ in range(50):
        cands = _candidates(rng.randrange(0, 40), rng)
        q = ["dog", "park"]
        ref = [s.candidate.id for s in rank(cands, q, now, w, 10, hybrid=True)]
        assert fast_rank(signals(cands, q, now), w, 10) == ref


def test_grid_and_leave_one_out() -> None:
    grid = weight_grid(0.5, (30.0,))
    assert len(grid) == 6 and DEFAULT_WEIGHTS not in grid
    assert DEFAULT_WEIGHTS in weight_grid(0.1, (7.0, 30.0))
    # two groups: point 1 is best on group a, point 2 on group b
    obj = np.array([[0.5, 0.5, 0.5, 0.5], [1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 1.0]])
    assert best_index(obj, np.zeros_like(obj)) == 0  # a three-way tie goes to grid order
    chosen, folds = leave_one_out(["a", "a", "b", "b"], obj, np.zeros_like(obj), grid[:3])
    assert chosen.tolist() == [2, 2, 1, 1]
    assert [f["held_out"] for f in folds] == ["a", "b"]


def test_vector_file_round_trip(tmp_path: Path) -> None:
    f = VectorFile(tmp_path, "m/x")
    assert f.get("hello") is None
    f.put("hello", [1.0, 2.0])
    f.save()
    again = VectorFile(tmp_path, "m/x")
    assert len(again) == 1 and again.get("hello") is not None
    assert VectorFile(tmp_path, "other").get("hello") is None
