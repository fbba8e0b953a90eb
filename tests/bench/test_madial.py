"""The MADial loader, its metrics and the weight ceiling, on tiny made-up data."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pytest

from benchmarks.madial import Dialogue, MadialSet, Memory, dialogue_metrics, load_madial, parse
from benchmarks.retrieval_madial import _ceiling, _ranked_ids
from benchmarks.tuning import Signals

UTC = timezone.utc


def _memory_line(i: int, day: str, event: str) -> str:
    return json.dumps({str(i): {"time": day, "event": event, "user-id": 1, "id": i}})


def _dialogue_line(lines: list[str], test_turn: int, relevant: list[int]) -> str:
    return json.dumps({"dialogue": lines, "test-turn": [test_turn], "relevant-id": relevant,
                       "user-id": 1})


def test_query_is_the_users_turns_before_the_test_turn() -> None:
    mem = [_memory_line(1, "2023-12-25", "Bart danced at the party"),
           _memory_line(2, "2024-01-03", "Bart lost his keys")]
    lines = ["<BOD>\n", '<Bart>: "I am going to a party."\n', '<Assistant>: "Nice!"\n',
             '<Bart>:"Will there be dancing?"\n', '<Assistant>: "You danced last time."\n',
             '<Bart>: "Said after the turn."\n', "<EOD>\n"]
    data = parse(mem, [_dialogue_line(lines, 4, [1, 2])], "en")
    assert data.dialogues == [Dialogue("I am going to a party. Will there be dancing?", "1",
                                       frozenset({"1", "2"}))]
    assert data.now == datetime(2024, 1, 4, tzinfo=UTC)  # the day after the newest memory
    with pytest.raises(ValueError, match="not in the memory file"):
        parse(mem, [_dialogue_line(lines, 4, [9])], "en")


def test_missing_files_say_where_the_data_is_read(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="outside the repository"):
        load_madial(tmp_path, "en")
    with pytest.raises(ValueError, match="language"):
        load_madial(tmp_path, "fr")


def test_metrics_by_hand() -> None:
    d = Dialogue("q", "b", frozenset({"b", "z"}))
    assert dialogue_metrics(["a", "c", "b"], d) == {
        "gold@1": 0.0, "gold@3": 1.0, "gold@5": 1.0, "mrr@10": pytest.approx(1 / 3),
        "any@5": 1.0}
    assert dialogue_metrics(["a", "z"], d)["any@5"] == 1.0
    assert dialogue_metrics(["a"] * 3, d)["mrr@10"] == 0.0


def _signals(ids: list[str], vector: list[float], keyword: list[float]) -> Signals:
    n = len(ids)
    order = np.empty(n, dtype=np.int64)
    order[np.argsort(np.array(ids, dtype=object))] = np.arange(n)
    return Signals(tuple(ids), np.array(vector), np.array(keyword), np.zeros(n),
                   np.zeros(n), order)


def test_ceiling_finds_the_weights_only_the_data_could_choose() -> None:
    at = datetime(2024, 1, 1, tzinfo=UTC)
    memories = [Memory(str(i), f"m{i}", at) for i in range(8)]
    ids_of = {f"x{i}": {str(i)} for i in range(8)}
    # The gold memory is last by vector and first by keyword in both dialogues, so
    # only keyword-heavy weights bring it into the top 5; the defaults do not.
    vec = [0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.0]
    kw = [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0]
    every = [_signals([f"x{i}" for i in range(8)], vec, kw)] * 2
    data = MadialSet("en", "o", memories, [Dialogue("q", "7", frozenset({"7"}))] * 2, at)
    best = _ceiling(every, data, ids_of)
    assert best["gold@5"] == 1.0
    assert best["weights"]["keyword"] >= 0.3 and best["grid_points"] > 100
    # without its keyword match, no weights bring the gold memory up: the ceiling is 0
    every = [_signals([f"x{i}" for i in range(8)], vec, [0.0] * 8)] * 2
    assert _ceiling(every, data, ids_of)["gold@5"] == 0.0


def test_a_merged_memory_stands_for_every_id_it_absorbed() -> None:
    assert _ranked_ids(["a", "b", "c"], {"a": {"3", "1"}, "b": {"1"}, "c": {"2"}}) == [
        "1", "3", "2"]
