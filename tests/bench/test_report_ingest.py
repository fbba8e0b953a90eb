"""The batch-ingest section and README row: what a kept result says, and its target."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.report_ingest import ingest_rows, ingest_section, ingest_targets


def _run(backend: str, median: float, finished: str) -> dict[str, Any]:
    return {
        "benchmark": "batch-ingest",
        "backend": backend,
        "model": "m",
        "pairs": 2,
        "items_per_pair": 4,
        "target_ratio": 5.0,
        "meets_target": median >= 5.0,
        "one_by_one": {"items_per_s": 1.0},
        "batch": {"items_per_s": median},
        "ratios": {
            "median": median,
            "min": median - 1,
            "max": median + 1,
            "cpu_median": median + 0.5,
        },
        "uptime_before": "10:00 up 1 min, 0 user, load average: 3.50, 2.00, 1.00",
        "machine": {"cpus": 2},
        "finished_at": finished,
        "command": f"python -m benchmarks batch-ingest --backend {backend}",
    }


def test_section_and_rows_follow_the_results() -> None:
    items = [
        (Path("a.json"), _run("postgres", 4.0, "1")),
        (Path("b.json"), _run("postgres", 6.5, "2")),
        (Path("c.json"), _run("memory", 1.2, "3")),
    ]
    text = "\n".join(ingest_section(items))
    assert (
        "| postgres | m | 2 x 4 | 1.00 | 6.50 | 6.50 (5.50-7.50) | 7.00 | 5: yes | 3.50 / - |"
        in text
    )
    assert "`a.json`" in text and "`c.json`" in text
    rows = ingest_rows({"batch-ingest": items})
    assert [r[1].split("x")[0] for r in rows] == ["1.20", "6.50"]  # newest per backend
    assert ingest_targets({"batch-ingest": items}) == [
        "batch ingest >= 5x one by one (memory): not met",
        "batch ingest >= 5x one by one (postgres): met",
    ]
    assert ingest_section([])[-2].startswith("No batch-ingest results")
