"""The README's figures table: written from the kept results, and what it says."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks.report import RESULTS, load_results, run
from benchmarks.report_figures import END, START, between_markers, figures_block, with_figures

ROOT = Path(__file__).resolve().parents[2]
MACHINE = {"cpus": 2, "platform": "test", "python": "3.11"}


def test_readme_table_is_what_the_kept_results_give() -> None:
    """A figure typed into the README by hand, or results changed without
    ``python -m benchmarks report``, fails here."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = between_markers(readme)
    assert block is not None, "README.md lost its figures markers"
    expected = "\n" + "\n".join(figures_block(load_results(ROOT / RESULTS))) + "\n"
    assert block == expected


def test_with_figures_replaces_only_between_the_markers() -> None:
    text = f"before\n{START}\nold | 1.0 |\n{END}\nafter\n"
    out = with_figures(text, ["new"])
    assert out == f"before\n{START}\nnew\n{END}\nafter\n"
    assert with_figures(out, ["new"]) == out
    with pytest.raises(ValueError, match="markers"):
        with_figures("no markers here", ["new"])


def _latency(memories: int, p50: float, p95: float, finished: str) -> dict[str, Any]:
    return {"benchmark": "search-latency", "backend": "postgres", "owners": 1,
            "per_owner": memories, "total_memories": memories, "machine": MACHINE,
            "search": {"p50_ms": p50, "p95_ms": p95}, "finished_at": finished,
            "command": f"python -m benchmarks search-latency --owners 1 --per-owner {memories}"}


def _overhead(placement: str, snap: float, arg: float, finished: str) -> dict[str, Any]:
    return {"benchmark": "actor-overhead", "placement": placement, "machine": MACHINE,
            "rounds": 20, "target_snapshot_vs_bare": 0.8, "finished_at": finished,
            "ratios": {"snapshot_vs_bare_sync": snap, "bare_sync_arg_vs_bare_sync": arg},
            "command": f"python -m benchmarks actor-overhead --placement {placement}"}


async def test_report_rewrites_the_readme_table(tmp_path: Path) -> None:
    results = tmp_path / "results"
    results.mkdir()
    files = {"a.json": _latency(1000, 1.2, 1.5, "2026-01-01T00:00:00+00:00"),
             "b.json": _latency(1000, 1.4, 1.9, "2026-01-02T00:00:00+00:00"),
             "c.json": _latency(10_000, 2.0, 2.5, "2026-01-03T00:00:00+00:00"),
             "d.json": _overhead("sharded", 0.85, 0.81, "2026-01-04T00:00:00+00:00"),
             "e.json": _overhead("sharded", 0.75, 0.86, "2026-01-05T00:00:00+00:00"),
             "f.json": _overhead("sharded", 0.90, 0.84, "2026-01-06T00:00:00+00:00"),
             "g.json": _overhead("dedicated", 0.70, 0.80, "2026-01-07T00:00:00+00:00")}
    for name, data in files.items():
        (results / name).write_text(json.dumps(data))
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n{START}\n| typed | 9.9 ms | by hand |\n{END}\n\nend\n")
    done = await run(argparse.Namespace(results=str(results), out=str(tmp_path / "B.md"),
                                        plots=str(tmp_path / "png"), readme=str(readme)))
    text = readme.read_text()
    assert str(readme) in done["written"]
    assert "9.9 ms" not in text and text.startswith("# x\n") and text.endswith("\nend\n")
    assert ("| hybrid search, PostgreSQL, one owner of 1k / 10k memories | p95 1.50-1.90 / "
            "2.50 ms, p50 1.20-1.40 / 2.00 ms (2, 1 runs) | "
            "`python -m benchmarks search-latency --owners 1 --per-owner N` |") in text
    assert ("| snapshot read through the actors (median of runs) | 0.85x (sharded; 0.75-0.90 "
            "in 3 runs) and 0.70x (dedicated; 0.70 in 1 run) a no-op call on a plain Ray "
            "actor, each run the median of 20 paired rounds; the same no-op with one "
            "argument: 0.80-0.86x | `python -m benchmarks actor-overhead --placement P` |"
            ) in text
    assert ("Targets: snapshot read >= 0.8x a plain Ray call (sharded): met; snapshot read "
            ">= 0.8x a plain Ray call (dedicated): not met.") in text
    assert "From 7 result files in `docs/bench/results`, run on machines with 2 CPUs" in text
    assert "mem0" not in text  # no row without results


async def test_report_without_readme_markers_fails_and_keeps_it(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("# no markers\n")
    with pytest.raises(ValueError, match="markers"):
        await run(argparse.Namespace(results=str(tmp_path), out=str(tmp_path / "B.md"),
                                     plots=str(tmp_path / "png"), readme=str(readme)))
    assert readme.read_text() == "# no markers\n"


async def test_benchmarks_md_has_the_newest_extraction_run(tmp_path: Path) -> None:
    def mode(rate: float) -> dict[str, Any]:
        return {"calls": 10, "calls_per_s": rate, "candidates_per_s": 5 * rate,
                "latency": {"p50_ms": 60.0, "p95_ms": 80.0},
                "share": {"server_delay": 0.5, "litellm_http": 0.3, "our_code": 0.0012,
                          "ray_and_queue": 0.1988}}
    results = tmp_path / "results"
    results.mkdir()
    for name, rate, finished in (("old.json", 1.0, "01"), ("new.json", 20.0, "02")):
        (results / name).write_text(json.dumps({
            "benchmark": "extraction", "machine": MACHINE, "delay_ms": 50.0,
            "items_per_call": 5, "concurrency": 8, "pool": mode(rate),
            "finished_at": f"2026-01-{finished}T00:00:00+00:00"}))
    out = tmp_path / "B.md"
    await run(argparse.Namespace(results=str(results), out=str(out),
                                 plots=str(tmp_path / "png")))
    text = out.read_text()
    section = text[text.index("## Extraction throughput"):]
    assert "fixed 50 ms with 5 candidates, 8 in flight" in section
    assert "| pool | 20.0 | 100.0 | 60.0 | 80.0 | 50.00 | 30.00 | 0.12 | 19.88 |" in section
    assert "| pool | 1.0 |" not in section and "| local |" not in section
    assert ("Command: `python -m benchmarks extraction --calls 10 --concurrency 8 "
            "--delay-ms 50 --items 5 --json (reconstructed)`. File: `new.json`.") in section


def test_the_mem0_figure_leaves_out_runs_with_context() -> None:
    def run(p50_ratio: float, **extra: Any) -> dict[str, Any]:
        lat = {"ours": {"p50_ms": 4.0}, "mem0": {"p50_ms": 8.0},
               "p50_ratio_ours_over_mem0": p50_ratio, "p95_ratio_ours_over_mem0": 0.5}
        return {"benchmark": "compare-mem0", "command": "python -m benchmarks compare-mem0",
                "mem0": {"version": "2.2.1"}, "latency": {"system": lat, "end_to_end": lat},
                "recall@10": {"ours": {"mean": 0.6}, "mem0": {"mean": 0.5}}, **extra}

    results = {"compare-mem0": [(Path("a.json"), run(0.61)),
                                (Path("b.json"), run(0.97, context="beside"))]}
    row = next(x for x in figures_block(results) if "against mem0" in x)
    assert "0.61x in 1 runs" in row and "0.97" not in row
