"""The report generator on made-up results, and the mem0 connection translation."""

from __future__ import annotations

import argparse
import json
import math
import os
from pathlib import Path
from typing import Any

import pytest

from benchmarks.compare_mem0 import conninfo
from benchmarks.locomo import question_metrics, summarize
from benchmarks.report import growth_exponent, load_results, run

MACHINE = {"cpus": 2, "platform": "test", "python": "3.11"}


def _retrieval() -> dict[str, Any]:
    rows = [(1, question_metrics([{"a"}], ["a"])), (4, question_metrics([{"x"}], ["a"]))]
    summ = summarize(rows, resamples=50)
    head = {"recall@10": 0.5, "recall@10_ci95": [0.0, 1.0]}
    lat = {"p50_ms": 1.0, "p95_ms": 2.0}
    names = ("hybrid_default", "vector_only", "keyword_only_weights", "keyword_mode", "bm25")
    corpus = {"corpus": {"merges": 0}, "variants": dict.fromkeys(names, summ),
              "headline": {k: head for k in names},
              "search_latency": {"hybrid_default": lat, "keyword_mode": lat}}
    return {"benchmark": "retrieval", "machine": MACHINE, "command": "dream-memory bench x",
            "backend": "memory", "ingest": "engine", "headline_corpus": "dedup_0.85",
            "data": {"conversations": 1, "turns": 3, "questions_used": 2,
                     "questions_by_category": {"multi-hop": 1, "single-hop": 1}},
            "corpora": {"dedup_0.85": corpus, "dedup_off": corpus},
            "query_embedding": lat, "tuned": {"skipped": "one conversation"},
            "reference": "ref"}


async def test_report_writes_markdown_and_plots(tmp_path: Path) -> None:
    results = tmp_path / "results"
    results.mkdir()
    (results / "r.json").write_text(json.dumps(_retrieval()))
    (results / "junk.json").write_text("not json")
    (results / "l.json").write_text(json.dumps({
        "benchmark": "search-latency", "backend": "postgres", "owners": 1, "per_owner": 10,
        "total_memories": 10, "machine": MACHINE, "search": {"p50_ms": 1.0, "p95_ms": 2.0}}))
    assert set(load_results(results)) == {"retrieval", "search-latency"}
    out = tmp_path / "BENCHMARKS.md"
    args = argparse.Namespace(results=str(results), out=str(out), plots=str(tmp_path / "png"))
    done = await run(args)
    text = out.read_text()
    assert "| hybrid, default weights 0.6/0.3/0.1 |" in text
    assert "dream-memory bench x" in text and "2 CPUs" in text
    assert "(png/recall_by_category.png)" in text
    assert "No concurrency results yet." in text
    assert (tmp_path / "png" / "search_latency.png").stat().st_size > 1000
    assert len(done["written"]) == 3


def _write(results: Path, files: list[tuple[str, dict[str, Any]]]) -> None:
    """The files in order: each finished later than the one before (load_results sorts
    by it), while the file times run the other way (a checkout's say nothing)."""
    results.mkdir(exist_ok=True)
    for i, (name, data) in enumerate(files):
        path = results / name
        path.write_text(json.dumps({"finished_at": f"2026-11-01T10:{i:02d}:00+00:00", **data}))
        os.utime(path, (1_800_000_000 - i, 1_800_000_000 - i))


def test_results_in_the_order_they_were_made(tmp_path: Path) -> None:
    files = {"b-old.json": {"benchmark": "x"},  # made before runs recorded finished_at
             "a-old.json": {"benchmark": "x"},
             "z.json": {"benchmark": "x", "finished_at": "2026-11-02T09:00:00+00:00"},
             "c.json": {"benchmark": "x", "finished_at": "2026-11-02T10:00:00+00:00"},
             "notes.json": ["not a result"]}
    for i, (name, data) in enumerate(files.items()):
        (tmp_path / name).write_text(json.dumps(data))
        os.utime(tmp_path / name, (1_800_000_000 - i, 1_800_000_000 - i))
    loaded = load_results(tmp_path)
    assert [p.name for p, _ in loaded["x"]] == ["a-old.json", "b-old.json", "z.json", "c.json"]


async def _report(tmp_path: Path, files: list[tuple[str, dict[str, Any]]]) -> str:
    results = tmp_path / "results"
    _write(results, files)
    out = tmp_path / "BENCHMARKS.md"
    await run(argparse.Namespace(results=str(results), out=str(out),
                                 plots=str(tmp_path / "png")))
    return out.read_text()


def _latency(backend: str, memories: int, p50: float, **extra: Any) -> dict[str, Any]:
    return {"benchmark": "search-latency", "backend": backend, "owners": 1,
            "per_owner": memories, "total_memories": memories, "machine": MACHINE,
            "search": {"p50_ms": p50, "p95_ms": 2 * p50}, **extra}


def _calls(rate: float) -> dict[str, Any]:
    return {"calls_per_s": rate, "p50_ms": 1000 / rate, "p95_ms": 2000 / rate}


async def test_search_latency_growth_by_store_size(tmp_path: Path) -> None:
    build = {"maintenance_work_mem_mb": 2048, "parallel_workers": 1}
    text = await _report(tmp_path, [
        ("pg-1k.json", _latency("postgres", 1_000, 1.0, store_path={"ops": 500,
                                                                    "ops_per_s": 123.4})),
        # an older run of the 10k size: in the full table, not in the growth table
        ("pg-10k-old.json", _latency("postgres", 10_000, 99.0)),
        ("pg-10k.json", _latency("postgres", 10_000, 4.0, hnsw_build_s=3.5, hnsw_build=build,
                                 explain_uses_vector_index=False)),
        ("pg-1m.json", _latency("postgres", 1_000_000, 8.0, hnsw_build_s=812.5,
                                hnsw_build=build, explain_uses_vector_index=True,
                                bulk_load={"rows": 999_500, "rows_per_s": 25_000},
                                after_load="VACUUM (ANALYZE)")),
        ("redis-1k.json", _latency("redis", 1_000, 0.5)),
    ])
    # the full table keeps every file, with the store path rate where it was measured
    assert "| p50 ms | p95 ms | store path ops/s | machine |" in text
    assert "| postgres | 1000 | 1 | 1.0 | 2.0 | 123.4 | 2 CPUs" in text
    assert "| postgres | 10000 | 1 | 99.0 | 198.0 | - | 2 CPUs" in text
    assert "| postgres | 10000 | 1 | 4.0 | 8.0 | - | 2 CPUs" in text
    # the growth table: newest file per size, ratio to the previous size per size step
    assert "### How cost grows with size: `postgres`" in text
    assert ("| memories | owners | p50 ms | p95 ms | p50 growth vs previous size | HNSW build s "
            "| build (mem MB / workers) | bulk load rows/s | uses vector index |") in text
    assert "| 1,000 | 1 | 1.0 | 2.0 | - | - | - | - | - |" in text
    assert "| 10,000 | 1 | 4.0 | 8.0 | x4.00 per 10x | 3.5 | 2048 / 1 | - | no |" in text
    assert ("| 1,000,000 | 1 | 8.0 | 16.0 | x2.00 per 100x | 812.5 | 2048 / 1 | 25,000 | yes |"
            in text)
    assert "x24.75" not in text and "x99.00" not in text
    # least squares on log10 sizes 3, 4, 6 (mean 13/3, deviations -4/3, -1/3, 5/3, sum of
    # squares 42/9): slope = (-4 y1 - y2 + 5 y3) / 14, not the end-to-end 0.30
    expected = (-4 * math.log10(1.0) - math.log10(4.0) + 5 * math.log10(8.0)) / 14
    assert f"{expected:.2f}" == "0.28"
    assert "p50 grows as size^0.28 from 1,000 to 1,000,000 memories" in text
    assert "After the bulk load: VACUUM (ANALYZE)." in text
    # one size only: no growth table
    assert "How cost grows with size: `redis`" not in text


def test_growth_exponent_is_the_least_squares_slope() -> None:
    points = [(1_000.0, 1.0), (10_000.0, 4.0), (1_000_000.0, 8.0)]
    expected = (-4 * math.log10(1.0) - math.log10(4.0) + 5 * math.log10(8.0)) / 14
    assert growth_exponent(points) == pytest.approx(expected)
    assert growth_exponent([(10.0, 2.0), (100.0, 2.0)]) == pytest.approx(0.0)
    assert growth_exponent([(10.0, 1.0), (100.0, 10.0)]) == pytest.approx(1.0)
    assert growth_exponent([(10.0, 1.0), (10.0, 3.0)]) is None


async def test_runtime_overhead_section(tmp_path: Path) -> None:
    machine = {"machine": MACHINE}
    dedicated = {"benchmark": "actor-overhead", "backend": "postgres", "placement": "dedicated",
                 "bare_sync": _calls(1000.0), "bare_sync_ft": _calls(900.0),
                 "bare_sync_arg": _calls(800.0), "bare_sync_named": _calls(990.0),
                 "snapshot": _calls(740.0),
                 "snapshot_transfer": _calls(500.0), "search": _calls(300.0),
                 "ratios": {"snapshot_vs_bare_sync": 0.74, "snapshot_vs_bare_sync_ft": 0.822},
                 "target_snapshot_vs_bare": 0.8, "command": "dream-memory bench ao-d",
                 **machine}
    # an older file: no bare_sync_ft / bare_sync_arg / bare_sync_named, no ratios
    # (computed from the rates)
    sharded = {"benchmark": "actor-overhead", "backend": "memory", "placement": "sharded",
               "bare_sync": _calls(2000.0), "snapshot": _calls(1700.0),
               "snapshot_transfer": _calls(1200.0), "search": _calls(600.0), **machine}
    fp_old = {"benchmark": "footprint", "backend": "postgres", "command": "fp both", **machine,
              "sharded": {"owners_touched": 100, "live_actors": 3,
                          "bytes_per_live_owner": 50_000, "holders_rss_mb": 1.0},
              "dedicated": {"owners_touched": 6, "live_actors": 7,
                            "bytes_per_live_owner": 60 * 1024 * 1024,
                            "holders_rss_mb": 900.0,
                            "extrapolated_rss_mb_for_10000": 600_000.0}}
    fp_new = {"benchmark": "footprint", "backend": "postgres", "command": "fp sharded",
              **machine,
              "sharded": {"owners_touched": 10_000, "live_actors": 3,
                          "bytes_per_live_owner": 11_264, "holders_rss_mb": 420.5,
                          "extrapolated_rss_mb_for_10000": 430.0}}
    cold = {"benchmark": "cold-start", "backend": "memory", "command": "cs", **machine,
            "sharded": {"owners": 200, "passivated": 200,
                        "cold_read": {"p50_ms": 6.4, "p95_ms": 9.1},
                        "warm_read": {"p50_ms": 0.5, "p95_ms": 0.9}},
            "dedicated": {"skipped": "use --backend postgres"}}
    text = await _report(tmp_path, [
        ("ao-dedicated-old.json", {**dedicated, "ratios": {"snapshot_vs_bare_sync": 0.1}}),
        ("ao-dedicated.json", dedicated), ("ao-sharded.json", sharded),
        ("ao-dedicated-new.json", {**dedicated, "command": "dream-memory bench ao-n",
                                   "ratios": {"snapshot_vs_bare_sync": 0.9}}),
        ("fp-old.json", fp_old), ("fp-new.json", fp_new), ("cs.json", cold)])
    runtime = text[text.index("## Runtime overhead (Ray actors)"):]
    assert ("| placement | backend | bare plain calls/s | bare same options calls/s | bare with "
            "argument calls/s | bare named calls/s | snapshot read calls/s | snapshot with "
            "transfer calls/s | read / plain | read / same options | search calls/s | file |"
            ) in runtime
    assert "| sharded | memory | 2,000 | - | - | - | 1,700 | 1,200 | 0.85 | - | 600 |" in runtime
    assert ("| dedicated | postgres | 1,000 | 900 | 800 | 990 | 740 | 500 | 0.74 | 0.82 | 300 |"
            in runtime)
    assert runtime.index("| sharded | memory") < runtime.index("| dedicated | postgres")
    # every run is a row, in the order made; the verdict is the median of the runs
    rows = [line for line in runtime.splitlines() if line.startswith("| dedicated | postgres")]
    assert [row.rsplit("|", 2)[-2].strip() for row in rows[:3]] == [
        "`ao-dedicated-old.json`", "`ao-dedicated.json`", "`ao-dedicated-new.json`"]
    assert ("Target: snapshot read rate >= 0.8 x the plain actor's call rate "
            "(`target_snapshot_vs_bare`). Against the plain actor: sharded 0.850, met; "
            "dedicated 0.740 (median of 3 runs, 0.100-0.900), not met.") in runtime
    assert "dedicated: Machine: 2 CPUs" in runtime
    assert "Command: `dream-memory bench ao-n`. File: `ao-dedicated-new.json`." in runtime
    # footprint: the newest figure of each placement, even from different files
    assert "| sharded | postgres | 10,000 | 3 | 11.0 KB | 420.5 | 430.0 |" in runtime
    assert "| dedicated | postgres | 6 | 7 | 60.0 MB | 900.0 | 600,000.0 |" in runtime
    assert "sharded: Machine: 2 CPUs, test, Python 3.11. Command: `fp sharded`." in runtime
    assert "dedicated: Machine: 2 CPUs, test, Python 3.11. Command: `fp both`." in runtime
    assert "| 100 |" not in runtime
    # cold start: the measured placement, the skipped one said so
    assert "| sharded | memory | 200 | 6.4 | 9.1 | 0.5 |" in runtime
    assert "dedicated: skipped (use --backend postgres)." in runtime
    assert "No actor-overhead results yet." not in text


async def test_runtime_overhead_without_results(tmp_path: Path) -> None:
    text = await _report(tmp_path, [])
    runtime = text[text.index("## Runtime overhead (Ray actors)"):]
    for name in ("actor-overhead", "footprint", "cold-start"):
        assert f"No {name} results yet." in runtime
    assert "No search-latency results yet." in text


def _compare(p50_ratio: float) -> dict[str, Any]:
    recall = {"mean": 0.6, "ci95_lo": 0.57, "ci95_hi": 0.63}
    lat = {"ours": {"p50_ms": 3.8, "p95_ms": 5.0}, "mem0": {"p50_ms": 7.2, "p95_ms": 10.4},
           "p50_ratio_ours_over_mem0": p50_ratio, "p95_ratio_ours_over_mem0": 0.48}
    return {"benchmark": "compare-mem0", "machine": MACHINE, "command": "dream-memory bench y",
            "mem0": {"version": "2.2.1"}, "recall@10": {"ours": recall, "mem0": recall},
            "recall@10_ratio_ours_over_mem0": 1.0,
            "latency": {"system": lat, "end_to_end": lat}}


async def test_every_compare_mem0_run_is_listed(tmp_path: Path) -> None:
    """The section shows the latest run; a table lists each run's figures."""
    md = await _report(tmp_path, [("compare-mem0-r1.json", _compare(0.612)),
                                  ("compare-mem0-r2.json", _compare(0.487))])
    table = md[md.index("All compare-mem0 runs"):]
    assert "compare-mem0-r1.json" in table and "| 0.612 |" in table
    assert "compare-mem0-r2.json" in table and "| 0.487 |" in table


async def test_a_run_with_context_gets_its_own_section_after_the_turns_alone(
        tmp_path: Path) -> None:
    from benchmarks.compare_mem0 import TEXTS

    plain = {**_compare(0.5), "finished_at": "2026-12-01T00:00:00+00:00"}
    ctx = {**_compare(0.7), "context": "beside", "texts": TEXTS["beside"],
           "context_shape": {"turns": 2, "date": True},
           "finished_at": "2026-12-02T00:00:00+00:00"}
    md = await _report(tmp_path, [("compare-mem0-none.json", plain),
                                  ("compare-mem0-ctx.json", ctx)])
    part = md[md.index("## dream-memory vs mem0"):]
    assert (part.index("compare-mem0-none.json")
            < part.index("### The same, each turn with its context")
            < part.index("compare-mem0-ctx.json"))
    assert f"mem0 {TEXTS['beside']['mem0']}" in part
    assert "| compare-mem0-ctx.json | beside |" in part
    assert "| compare-mem0-none.json | none |" in part


async def test_a_store_many_run_shows_both_ingest_rates_and_the_embedding_gap(
        tmp_path: Path) -> None:
    plain = {**_compare(0.5), "finished_at": "2026-12-01T00:00:00+00:00"}
    many = _compare(0.6)
    many["latency"] = {**many["latency"], "end_to_end": {
        **many["latency"]["end_to_end"], "embedding_alone": {"p50_ms": 21.5},
        "ours_p50_minus_embedding_p50_ms": 1.25}}
    many.update({"ingest": "store_many", "finished_at": "2026-12-02T00:00:00+00:00",
                 "ours": {"ingest": {"stores_per_s": 1500.0}},
                 "mem0": {"version": "2.2.1", "ingest": {"adds_per_s": 300.0}}})
    md = await _report(tmp_path, [("compare-mem0-none.json", plain),
                                  ("compare-mem0-many.json", many)])
    part = md[md.index("## dream-memory vs mem0"):]
    assert (part.index("compare-mem0-none.json")
            < part.index("### The same, ours ingested one session a `store_many`")
            < part.index("compare-mem0-many.json"))
    assert "| ingest, memories/s (store_many / add(infer=False), embeddings cached) " \
           "| 1500.0 | 300.0 | 5.00 |" in part
    assert "| the query's embedding alone, p50 ms | 21.5 |" in part
    assert "ours waits +1.25 ms (p50) beyond the query's embedding alone" in part


def test_mem0_gets_a_turn_s_context_written_before_it() -> None:
    from collections import Counter

    from benchmarks.compare_mem0 import mem0_texts
    from benchmarks.locomo import parse_conversation

    raw = {"sample_id": "c", "conversation": {
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [{"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a dog."},
                      {"speaker": "Bob", "dia_id": "D1:2", "text": "Which breed?"}]}}
    conv = parse_conversation(raw, Counter())
    assert mem0_texts(conv, "none", 2) == ["Ann: I adopted a dog.", "Bob: Which breed?"]
    assert mem0_texts(conv, "beside", 2) == [
        "8 May 2023\nAnn: I adopted a dog.",
        "8 May 2023\nAnn: I adopted a dog.\nBob: Which breed?"]


def test_conninfo_from_the_embedded_dsn() -> None:
    info = conninfo("postgresql://postgres:@/postgres?host=/tmp/pg", "-c a=b")
    assert info == "host='/tmp/pg' port='5432' dbname='postgres' user='postgres' options='-c a=b'"
    assert "password='s'" in conninfo("postgresql://u:s@db:6543/x", None)


def test_cached_vectors_are_found_by_trimmed_text() -> None:
    from benchmarks.compare_mem0 import Lookup

    lookup = Lookup({"What  is it? ": [1.0], "b": [2.0]})
    assert lookup("What is it?") == [1.0]
    assert lookup("b") == [2.0]
    with pytest.raises(KeyError):
        lookup("c")


def test_retrieval_targets_name_the_ceiling_beside_the_verdict() -> None:
    from benchmarks.report_figures import DEFAULT_MODEL, retrieval_targets

    locomo = {"embedding": {"model": DEFAULT_MODEL},
              "targets": {"hybrid_recall@10": {"hybrid": 0.638, "target": 0.7, "met": False,
                                               "in_sample_best": 0.664}}}
    other = {"embedding": {"model": "all-MiniLM-L6-v2"},
             "targets": {"hybrid_recall@10": {"hybrid": 0.9, "target": 0.7, "met": True}}}
    madial = {"targets": {DEFAULT_MODEL: {
        "en": {"hybrid_gold@5": 0.645, "target": 0.8, "met": False,
               "in_sample_best_gold@5": 0.671},
        "zh": {"hybrid_gold@5": 0.76, "target": 0.75, "met": True}}}}
    got = retrieval_targets({"retrieval": [(Path("a.json"), locomo), (Path("b.json"), other)],
                             "retrieval-madial": [(Path("m.json"), madial)]})
    assert got[0].startswith(f"LoCoMo hybrid recall@10 >= 70.0 ({DEFAULT_MODEL}): not met")
    assert "63.8; best fixed weights 66.4" in got[0]  # the default model's run, not the last
    assert got[1] == (f"MADial en gold recall@5 >= 0.80 ({DEFAULT_MODEL}): not met "
                      "(0.645; best fixed weights 0.671)")
    assert got[2] == f"MADial zh gold recall@5 >= 0.75 ({DEFAULT_MODEL}): met (0.760)"
    assert retrieval_targets({}) == []


def test_the_dedup_section_shows_the_held_apart_pairs(tmp_path: Path) -> None:
    from benchmarks.report_dedup import dedup_section

    run_ = {"model": "local:m", "calibration_pairs": {"related-en": {"kept": 3}},
            "confusion": {"en": {"duplicate": {"merged": 2, "kept": 1}}},
            "held_apart_pairs": {"en": {"paraphrase": {"merged": 5, "kept": 2},
                                        "distinct": {"kept": 4, "superseded": 1}}}}
    d = {"benchmark": "dedup", "command": "python -m benchmarks dedup", "machine": MACHINE,
         "runs": [run_]}
    text = "\n".join(dedup_section([(tmp_path / "dedup-m.json", d)]))
    assert "| `local:m` | en | paraphrase | 7 | 5 | 0 | 2 |" in text
    assert "| `local:m` | en | distinct | 5 | 0 | 1 | 4 |" in text
    # a result written before the held-apart pairs were counted shows no such table
    old = {**d, "runs": [{k: v for k, v in run_.items() if k != "held_apart_pairs"}]}
    assert "held-apart" not in "\n".join(dedup_section([(tmp_path / "dedup-m.json", old)]))


def test_the_overlap_section_shows_each_run_by_the_model_s_threads(tmp_path: Path) -> None:
    from benchmarks.report_search import overlap_section

    d = {"benchmark": "search-overlap", "machine": {**MACHINE, "load_average": [1.0]},
         "omp_num_threads": "1", "latency": {"embedding": {"p50_ms": 22.3}},
         "beyond_embedding_p50_ms": {"overlapped": 4.11, "after": 5.52},
         "paired_ratio_overlapped_over_after_median": 0.965, "searches": 9,
         "searches_with_other_hits": 0, "load_average_after": [1.2]}
    text = "\n".join(overlap_section([(tmp_path / "search-overlap-1.json", d)]))
    assert "| 1 | 22.30 | 4.11 | 5.52 | 0.965 | - / - / - | 0 of 9 |" in text
    d["phases"] = {"overlapped": {"before_model": {"p50_ms": 0.04}, "model": {"p50_ms": 23.1},
                                  "after_model": {"p50_ms": 2.02}}}
    text = "\n".join(overlap_section([(tmp_path / "search-overlap-1.json", d)]))
    assert "| 0.965 | 0.04 / 23.10 / 2.02 | 0 of 9 |" in text
    assert "search-overlap-1.json" in text
    assert "No search-overlap results" in "\n".join(overlap_section([]))


def test_the_machine_line_names_the_model_s_threads_when_a_run_set_them() -> None:
    from benchmarks.report_format import machine

    assert "thread" not in machine({"machine": MACHINE})
    assert machine({"machine": {**MACHINE, "omp_num_threads": "1"}}).endswith(
        ", the model on 1 thread(s) (OMP_NUM_THREADS)")


def test_the_machine_line_gives_the_reference_loop_a_run_timed() -> None:
    """Two hosts print the same platform at different speeds: the reference loop's time
    tells a reader which figures came from the slower one."""
    from benchmarks.report_format import machine
    from benchmarks.stats import machine as this_machine

    assert "reference" not in machine({"machine": MACHINE})
    assert machine({"machine": {**MACHINE, "reference_ms": 42.8}}).endswith(
        ", a reference Python loop in 42.8 ms (lower is faster)")
    assert this_machine()["reference_ms"] > 0


def test_a_run_with_model_engines_is_named_by_them(monkeypatch: pytest.MonkeyPatch,
                                                    tmp_path: Path) -> None:
    """A run with ``DREAM_MEMORY_EMBEDDING_ENGINES`` set says so in its command and machine,
    and the report and the plot keep it apart from the run with the default."""
    from benchmarks.report_agents import agents_section
    from benchmarks.report_plots import _points, _series
    from benchmarks.report_search import concurrency_section
    from benchmarks.stats import command
    from benchmarks.stats import machine as this_machine

    monkeypatch.setenv("DREAM_MEMORY_EMBEDDING_ENGINES", "2")
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr("sys.argv", ["benchmarks", "agents", "--json"])
    assert command() == "DREAM_MEMORY_EMBEDDING_ENGINES=2 python -m benchmarks agents --json"
    assert this_machine()["embedding_engines"] == "2"
    one = {"one_writer": {"ops_per_s": 40.0}, "writers": {"ops_per_s": 70.0, "l1": {}},
           "writers_l1_only": {"l1": {}}}
    run = {"backend": "postgres", "placement": "sharded", "writers": 32, "ops_per_s": 50.0,
           "embedding_model": "local:multilingual-e5-small",
           "machine": {**MACHINE, "embedding_engines": "2"},
           "rounds": {"per_round": [one, {**one, "writers": {"ops_per_s": 90.0, "l1": {}}},
                                    one], "targets": {}}}
    assert _series(run) == "postgres, sharded, multilingual-e5-small, 2 engines"
    assert _points(run) == [(1, 40.0), (32, 70.0)]  # the rounds' medians
    plain = {k: v for k, v in run.items() if k not in ("embedding_model", "rounds")}
    assert _series(plain) == "postgres, sharded" and _points(plain) == [(32, 50.0)]
    text = "\n".join(concurrency_section([(tmp_path / "c.json", run)], None))
    assert "`local:multilingual-e5-small` on 2 engines (`embedding_engines`)" in text
    agents = {"backend": "postgres", "embedding_model": "local:multilingual-e5-small",
              "machine": {**MACHINE, "embedding_engines": "2", "load_average": {}}}
    assert "local:multilingual-e5-small, 2 engines" in "\n".join(
        agents_section([(tmp_path / "a.json", agents)]))
