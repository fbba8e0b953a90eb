"""The report generator on made-up results, and the mem0 connection translation."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from dream_memory_actor.bench.compare_mem0 import conninfo
from dream_memory_actor.bench.locomo import question_metrics, summarize
from dream_memory_actor.bench.report import load_results, run

MACHINE = {"cpus": 2, "platform": "test", "python": "3.11"}


def _retrieval() -> dict[str, Any]:
    rows = [(1, question_metrics([{"a"}], ["a"])), (4, question_metrics([{"x"}], ["a"]))]
    summ = summarize(rows, resamples=50)
    head = {"recall@10": 0.5, "recall@10_ci95": [0.0, 1.0]}
    lat = {"p50_ms": 1.0, "p95_ms": 2.0}
    names = ("hybrid_seed", "vector_only", "keyword_only_weights", "keyword_mode", "bm25")
    corpus = {"corpus": {"merges": 0}, "variants": dict.fromkeys(names, summ),
              "headline": {k: head for k in names},
              "search_latency": {"hybrid_seed": lat, "keyword_mode": lat}}
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
    assert "| hybrid, seed weights 0.6/0.3/0.1 |" in text
    assert "dream-memory bench x" in text and "2 CPUs" in text
    assert "(png/recall_by_category.png)" in text
    assert "No concurrency results yet." in text
    assert (tmp_path / "png" / "search_latency.png").stat().st_size > 1000
    assert len(done["written"]) == 3


def test_conninfo_from_the_embedded_dsn() -> None:
    info = conninfo("postgresql://postgres:@/postgres?host=/tmp/pg", "-c a=b")
    assert info == "host='/tmp/pg' port='5432' dbname='postgres' user='postgres' options='-c a=b'"
    assert "password='s'" in conninfo("postgresql://u:s@db:6543/x", None)


def test_cached_vectors_are_found_by_trimmed_text() -> None:
    from dream_memory_actor.bench.compare_mem0 import Lookup

    lookup = Lookup({"What  is it? ": [1.0], "b": [2.0]})
    assert lookup("What is it?") == [1.0]
    assert lookup("b") == [2.0]
    with pytest.raises(KeyError):
        lookup("c")
