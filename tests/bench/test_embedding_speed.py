"""The embedding-speed benchmark: its JSON and its section of the report."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from benchmarks.embedding_speed import add_arguments, run, texts
from benchmarks.report_embedding import embedding_speed_section


def test_texts_mix_both_languages_and_keep_queries_apart() -> None:
    queries, memories = texts(20, 40)
    assert len(queries) == 20 and len(memories) == 40
    for group in (queries, memories):
        assert sum(t.isascii() for t in group) == len(group) // 2
    assert not set(queries) & set(memories)
    with pytest.raises(SystemExit):
        texts(10_000, 10)


@pytest.mark.slow
async def test_a_small_run_gives_every_figure_and_the_report_shows_it(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--models", "local:multilingual-e5-small", "--queries", "6",
                              "--memories", "6", "--rounds", "2"])
    d = await run(args)
    assert d["benchmark"] == "embedding-speed" and d["uptime"]["before"]
    (m,) = d["models"]
    assert m["query_embedding"]["n"] == 6 and m["query_embedding"]["p50_ms"] > 0
    assert m["query_embedding_among_stores"]["n"] == 6
    assert m["ingest"]["memories"] == 6 and m["ingest"]["memories_per_s"] > 0
    assert len(m["ingest"]["per_round_memories_per_s"]) == 2
    lines = embedding_speed_section([(tmp_path / "embedding-speed.json", d)])
    row = next(x for x in lines if x.startswith("| `local:multilingual-e5-small`"))
    assert f"{m['query_embedding']['p50_ms']:.1f}" in row
    assert f"| {m['query_embedding_among_stores']['p50_ms']:.1f} |" in row
    assert f"{m['ingest']['memories_per_s']:,.1f}" in row
    assert any(d["uptime"]["before"] in x for x in lines)
    assert "No embedding-speed results" in embedding_speed_section([])[2]
