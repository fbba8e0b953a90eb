"""The agents benchmark, tiny: its result's shape and checks; the checks and the
writer wait on made-up runs; its place in the report."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks.agents import (
    ANNOUNCEMENTS,
    KINDS,
    Op,
    add_arguments,
    parse_mix,
    run,
    summary,
    verify_stores,
    writer_wait,
)
from benchmarks.concurrency import Record, verify_l1
from benchmarks.report_agents import agents_rows, agents_section
from benchmarks.stats import json_ready
from dream_memory_actor.models import MemorySnapshot, VectorMemory, utcnow
from dream_memory_actor.storage.ops import AddFact, apply_ops


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(argv))


async def test_a_tiny_run_loses_and_repeats_nothing(ray_runtime: None) -> None:
    d = await run(_args("--backend", "memory", "--model", "hashing", "--agents", "3",
                        "--owners", "2", "--tasks", "2", "--ops", "60", "--seed-memories", "4",
                        "--mix", "30,20,30,20", "--team-share", "0.5", "--restate", "0.3"))
    assert (d["lost"], d["duplicates"], d["double_applied"]) == (0, 0, 0)
    assert d["versions_contiguous"] and d["replay_matches"] and d["merges_once"]
    assert d["errors"] == {} and d["first_error"] is None
    assert d["ops"] == 60 and sum(d["ops_by_kind"].values()) == 60 and d["ops_per_s"] > 0
    assert d["mix"] == {"snapshot": 0.3, "search": 0.2, "store": 0.3, "l1_write": 0.2}
    assert set(d["latency_by_kind"]) == set(KINDS)
    for kind in KINDS:
        figures = d["latency_by_kind"][kind]
        assert figures["n"] == d["ops_by_kind"][kind]
        if figures["n"]:
            assert 0 < figures["p50_ms"] <= figures["p95_ms"] <= figures["p99_ms"]
            assert figures["p99_ms"] <= figures["max_ms"]
    wait = d["writer_wait"]
    assert wait["owner"] == "team"
    assert set(wait) == {"owner", "l1_write_while_storing", "l1_write_otherwise"}
    assert d["stores"]["new"] + d["stores"]["merged"] + d["stores"]["superseded"] \
        == d["ops_by_kind"]["store"]
    assert d["stores"]["memories_after"] > 0 and d["searches"]["mean_hits"] > 0
    assert len(d["machine"]["load_average"]["before"]) == 3
    assert (d["backend"], d["embedding_model"], d["agents"], d["owners"]) == (
        "memory", "hashing", 3, 2)


def _store(memory_id: str, *, merged: bool = False, superseded: str | None = None) -> Op:
    return Op("store", "team", 0.0, 0.01, memory_id=memory_id, merged=merged,
              superseded=superseded is not None, related=superseded)


def _memory(memory_id: str, content: str = "a note", merges: int = 0) -> VectorMemory:
    return VectorMemory(id=memory_id, owner="team", content=content,
                        metadata={"merge_count": merges} if merges else {})


def test_the_store_check_sees_lost_duplicate_and_miscounted_memories() -> None:
    stores = [_store("m1"), _store("m1", merged=True), _store("m2"),
              _store("m3", superseded="m2")]  # m2 retired by m3
    good = [_memory("m1", merges=1), _memory("m3")]
    assert verify_stores(stores, good) == {"lost": 0, "duplicates": 0, "merges_once": True}
    assert verify_stores(stores, good[:1])["lost"] == 1  # m3 acknowledged, gone
    assert verify_stores(stores, [*good, _memory("m9")])["duplicates"] == 1  # unacknowledged
    assert not verify_stores(stores, [_memory("m1"), good[1]])["merges_once"]
    # an announcement held by two memories: the same text stored twice
    told = [_store("a1"), _store("a2")]
    twice = [_memory("a1", ANNOUNCEMENTS[0]), _memory("a2", ANNOUNCEMENTS[0].upper())]
    assert verify_stores(told, twice)["duplicates"] == 1


def test_the_replay_holds_an_add_kept_as_its_text_or_queued_as_a_correction() -> None:
    now = utcnow()
    base = apply_ops(MemorySnapshot(owner="o"),
                     [AddFact("Alice is on call for billing this week.", id="f1")], now)
    renamed = Record("l1", 0.1, version=2, ops=[AddFact(
        "Bob is on call for billing this week.", id="f2", review_updates=True)])
    again = Record("l1", 0.1, version=3, ops=[AddFact(
        "alice is on call for billing  this week.", id="f3")])
    final = apply_ops(apply_ops(base, renamed.ops, now), again.ops, now)
    assert [p.id for p in final.pending] == ["f2"] and [f.id for f in final.facts] == ["f1"]
    assert verify_l1([renamed, again], final, base) == {
        "lost": 0, "double_applied": 0, "versions_contiguous": True, "replay_matches": True}
    dropped = verify_l1([renamed, again], final.model_copy(update={"pending": ()}), base)
    assert dropped["lost"] == 1 and not dropped["replay_matches"]


def test_writer_wait_splits_the_l1_writes_by_stores_in_flight() -> None:
    ops = [Op("store", "team", 10.0, 1.0), Op("store", "team", 20.0, 0.5),
           Op("store", "user-0", 30.0, 5.0),
           Op("l1_write", "team", 10.5, 0.8),  # inside the first store
           Op("l1_write", "team", 9.5, 0.6),  # ends after the first store started
           Op("l1_write", "team", 15.0, 0.2),  # between the stores
           Op("l1_write", "team", 31.0, 0.3),  # beside another owner's store only
           Op("l1_write", "team", 40.0, 0.0),  # the gate's write, not timed
           Op("l1_write", "user-0", 31.0, 0.9)]  # another owner
    w = writer_wait(ops, "team")
    assert w["l1_write_while_storing"]["n"] == 2
    assert w["l1_write_while_storing"]["max_ms"] == 800.0
    assert w["l1_write_otherwise"]["n"] == 2
    assert w["l1_write_otherwise"]["max_ms"] == 300.0


def test_the_mix_takes_four_weights() -> None:
    assert parse_mix("50,25,15,10") == (50.0, 25.0, 15.0, 10.0)
    for bad in ("1,2,3", "1,2,3,-1", "0,0,0,0", "a,b,c,d"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_mix(bad)


def _result(backend: str, ops_per_s: float) -> dict[str, Any]:
    lat = {"p50_ms": 1.5, "p95_ms": 12.34, "p99_ms": 20.0, "max_ms": 25.0, "n": 10}
    return {"benchmark": "agents", "backend": backend, "placement": "sharded",
            "embedding_model": "local:multilingual-e5-small", "agents": 8, "owners": 3,
            "mix": {"snapshot": 0.5, "search": 0.25, "store": 0.15, "l1_write": 0.1},
            "ops": 400, "ops_per_s": ops_per_s, "latency_by_kind": dict.fromkeys(KINDS, lat),
            "writer_wait": {"owner": "team", "l1_write_while_storing": lat},
            "lost": 0, "duplicates": 0, "double_applied": 0,
            "machine": {"cpus": 2, "platform": "test", "python": "3.11",
                        "load_average": {"before": [0.5, 0.4, 0.3]}},
            "command": f"python -m benchmarks agents --backend {backend}"}


def test_the_report_lists_every_run_and_the_readme_the_newest_on_postgres() -> None:
    runs = [(Path("agents-pg-1.json"), _result("postgres", 120.0)),
            (Path("agents-mem.json"), _result("memory", 300.0)),
            (Path("agents-pg-2.json"), _result("postgres", 150.0))]
    text = "\n".join(agents_section(runs))
    assert ("| postgres | sharded | local:multilingual-e5-small | 8 | 3 + team | 50/25/15/10 "
            "| 400 | 120 | 1.50 / 12.3 | 1.50 / 12.3 | 1.50 / 12.3 | 1.50 / 12.3 | 25.0 "
            "| 0/0/0 | 0.5 0.4 0.3 | `agents-pg-1.json` |") in text
    assert text.count("`agents-") == 4  # three rows and the newest's provenance
    (what, figure, cmd), = agents_rows({"agents": runs})
    assert what.startswith("8 agents on 3 owners and a team owner, mix 50/25/15/10")
    assert figure.startswith("150 ops/s;") and "0 lost, 0 duplicates, 0 double-applied" in figure
    assert cmd == "`python -m benchmarks agents --backend postgres`"
    assert agents_section([]) == [] and agents_rows({}) == []


def test_a_kind_of_call_the_mix_leaves_out_is_null_in_the_json() -> None:
    assert json.loads(json.dumps(json_ready(summary([])), allow_nan=False)) == {
        "p50_ms": None, "p95_ms": None, "p99_ms": None, "mean_ms": None, "n": 0,
        "max_ms": None}
    assert summary([0.002, 0.004])["max_ms"] == 4.0


def test_the_readme_shows_the_newest_run_of_the_default_mix_and_engines() -> None:
    usual = _result("postgres", 150.0)
    writes = {**_result("postgres", 30.0),
              "mix": {"snapshot": 0.0, "search": 0.01, "store": 0.97, "l1_write": 0.02}}
    engines = {**_result("postgres", 180.0),
               "machine": {**usual["machine"], "embedding_engines": 2}}
    runs = [(Path("a.json"), usual), (Path("b.json"), writes), (Path("c.json"), engines)]
    (_, figure, _), = agents_rows({"agents": runs})
    assert figure.startswith("150 ops/s;")
    (_, figure, _), = agents_rows({"agents": runs[1:]})  # no run of the defaults: the newest
    assert figure.startswith("180 ops/s;")
