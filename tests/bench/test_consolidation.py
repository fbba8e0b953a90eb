"""The consolidation benchmark on tiny made-up data: in-process backend, no model."""

from __future__ import annotations

import json
import random
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from benchmarks.__main__ import build_parser
from benchmarks.consolidation import run
from benchmarks.consolidation_scale import restated, scale_memories, updated
from benchmarks.report_consolidation import consolidation_section

UTC = timezone.utc
#: The planted look-alikes, in every dataset below.
SAME = "I adopted a dog named Rex last spring."
WEB = "The staging web server runs on port 8080."
ADMIN = "The staging admin server runs on port 8080."


def _locomo(path: Path) -> None:
    conv = {
        "sample_id": "conv-t", "speaker_a": "Ann", "speaker_b": "Bob",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [
            {"speaker": "Ann", "dia_id": "D1:1", "text": SAME},
            {"speaker": "Bob", "dia_id": "D1:2", "text": WEB},
            {"speaker": "Ann", "dia_id": "D1:3", "text": "We bake bread on Sundays."},
        ],
        "session_2_date_time": "9:05 am on 12 June, 2023",
        "session_2": [
            {"speaker": "Ann", "dia_id": "D2:1", "text": SAME},
            {"speaker": "Bob", "dia_id": "D2:2", "text": ADMIN},
            {"speaker": "Ann", "dia_id": "D2:3", "text": "My sister lives in Lisbon."},
        ],
    }
    qa = [{"question": "What dog did Ann adopt?", "answer": "Rex", "evidence": ["D1:1"],
           "category": 4},
          {"question": "Which port does the admin server use?", "answer": "8080",
           "evidence": ["D2:2"], "category": 4},
          {"question": "Where does the sister live?", "answer": "Lisbon",
           "evidence": ["D2:3"], "category": 4}]
    path.write_text(json.dumps([{"sample_id": "conv-t", "conversation": conv, "qa": qa,
                                 "observation": {}, "session_summary": {},
                                 "event_summary": {}}]), encoding="utf-8")


def _madial(folder: Path) -> None:
    mems = [(1, "2023-01-02", "Bart adopted a dog named Rex."),
            (2, "2023-02-03", "Bart adopted a dog named Rex."),
            (3, "2023-03-04", "Bart went skiing in the Alps with his father.")]
    folder.mkdir()
    (folder / "madial_dev_en_memory.jsonl").write_text("\n".join(
        json.dumps({str(i): {"time": t, "event": e, "id": i}}) for i, t, e in mems),
        encoding="utf-8")
    lines = ["<BOD>\n", '<Bart>: "Do you remember my dog Rex?"\n', '<Assistant>: "Yes"\n',
             "<EOD>\n"]
    (folder / "madial_dev_en_dialogue.jsonl").write_text(json.dumps(
        {"dialogue": lines, "test-turn": [2], "relevant-id": [1], "user-id": 1}),
        encoding="utf-8")


def _pairs(path: Path) -> None:
    rows = [("p1", "distinct", WEB, ADMIN),
            ("p2", "duplicate", "Alice likes green tea", "alice likes green tea."),
            ("p3", "update", "The cluster runs Kubernetes 1.27.",
             "The cluster runs Kubernetes 1.29.")]
    path.write_text("\n".join(json.dumps({"id": i, "lang": "en", "label": label, "a": a,
                                          "b": b}) for i, label, a, b in rows),
                    encoding="utf-8")


async def test_each_part_merges_the_planted_duplicate_and_keeps_the_distinct_pair(
        tmp_path: Path) -> None:
    _locomo(tmp_path / "locomo.json")
    _madial(tmp_path / "madial")
    _pairs(tmp_path / "pairs.jsonl")
    args = build_parser().parse_args([
        "consolidation", "--parts", "locomo,madial,pairs", "--model", "none",
        "--languages", "en", "--resamples", "50",
        "--locomo", str(tmp_path / "locomo.json"), "--madial", str(tmp_path / "madial"),
        "--pairs", str(tmp_path / "pairs.jsonl")])
    got = json.loads(json.dumps(await run(args), default=str))
    assert got["benchmark"] == "consolidation" and set(got["parts"]) == {
        "locomo", "madial", "pairs"}
    assert str(tmp_path) not in json.dumps(got)  # file names only

    for context in ("none", "beside"):
        lo = got["parts"]["locomo"]["by_context"][context]
        t = lo["totals"]
        assert (t["memories_before"], t["memories_after"]) == (6, 5)
        assert t["proposals"]["merge"] == 1 and t["applied"] == 1 and t["refused"] == 0
        assert t["undo_exact"] is True and t["memories_after_undo"] == 6
        merged = lo["owners"][0]["examples"]["merge"][0]["texts"]
        assert merged == [f"Ann: {SAME}"] * 2
        r = lo["recall@10"]
        assert r["questions"] == 3 and set(r) >= {"before", "after", "after_minus_before"}
        # the merged memory stands for both turns: the question on the first still finds it
        assert r["after"]["mean"] >= r["before"]["mean"]
        # read strictly, the kept memory is the second turn only: the first is lost
        assert r["strict"]["after"]["mean"] < r["before"]["mean"]

    md = got["parts"]["madial"]["languages"]["en"]
    assert (md["memories_before"], md["memories_after"]) == (3, 2)
    assert md["undo_exact"] is True and md["gold@5"]["after"]["mean"] == 1.0

    labels = got["parts"]["pairs"]["languages"]["en"]["labels"]
    assert labels["distinct"]["touched_both"] == 0
    assert labels["duplicate"]["merge"] == 1
    assert labels["update"]["supersede"] == labels["update"]["supersede_newest_kept"] == 1
    assert got["parts"]["pairs"]["languages"]["en"]["distinct_touched"] == []

    text = "\n".join(consolidation_section([(tmp_path / "c.json", got)]))
    assert "| LoCoMo, context beside, recall@10 | 1 | 6 → 5 | 1 / 0 / 0 | 1 / 0 |" in text
    assert "| en | distinct | 1 | 0 | 0 | 0 | 0 |" in text


def test_scale_variants_are_updates_and_restatements_of_stored_texts() -> None:
    rng = random.Random(0)
    assert updated("The cluster runs Kubernetes 1.27.", rng) is None  # no lone number
    new = updated("We meet 3 times a week on Monday.", rng)
    assert new is not None and new != "We meet 3 times a week on Monday."
    assert updated("We meet on Monday.", rng) not in (None, "We meet on Monday.")
    assert restated("Alice likes tea.") == "alice likes tea"
    assert restated("alice likes tea") == "Alice likes tea."
    at = datetime(2024, 1, 1, tzinfo=UTC)
    sources: list[tuple[str, datetime, str]] = [
        (f"Memory {i} happened on Monday.", at, "src") for i in range(40)]
    mems, writer, made_from = scale_memories(sources, 30, 0.2, 5, seed=1)
    texts = [t for t, _, _ in mems]
    assert len(mems) == 30 and len(set(texts)) == 30 and len(writer) == 5
    assert not set(writer) & set(texts)
    made = [m for m in mems if m[2] != "src"]
    assert len(made) == 6 and all(when > at for _, when, _ in made)
    kinds: Any = {k for _, _, k in made}
    assert kinds <= {"restated", "updated"}
    assert set(made_from) == {t for t, _, _ in made} and set(made_from.values()) <= set(texts)


def test_the_report_shows_each_part_from_its_newest_run(tmp_path: Path) -> None:
    """A run of the runtime part alone does not hide the passes of an earlier full run."""
    full = {"benchmark": "consolidation", "model": "m", "parts": {"pairs": {"languages": {
        "en": {"labels": {"distinct": {"pairs": 3, "touched_both": 0}}}}}}}
    runtime = {"benchmark": "consolidation", "model": "m", "parts": {"runtime": {
        "memories": 10_000, "writer": {"interval_ms": 50.0}, "phases": {
            "no_pass": [{"writes": 300, "wait_p50_ms": 15.5, "wait_p95_ms": 23.3,
                         "longest_wait_ms": 147.3}],
            "propose": [{"pass_s": 10.2, "writes": 152, "wait_p50_ms": 15.6,
                         "wait_p95_ms": 26.4, "longest_wait_ms": 76.6}]}}}}
    text = "\n".join(consolidation_section([(tmp_path / "a.json", full),
                                            (tmp_path / "b.json", runtime)]))
    assert "| en | distinct | 3 | 0 |" in text
    assert "| `propose` (proposals only) | 10.2 | 152 | 15.6 | 26.4 | 76.6 |" in text
    assert "File: `a.json`" in text and "File: `b.json`" in text
