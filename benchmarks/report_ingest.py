"""The report's batch-ingest section: ``store_many`` against one ``store`` per memory."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .report_format import get, num, provenance, table, yes_no


def ingest_section(items: Sequence[tuple[Path, dict[str, Any]]]) -> list[str]:
    """Every batch-ingest run (oldest first): rates, the pairs' ratios, the load."""
    lines = ["## Batch ingest", ""]
    if not items:
        return [
            *lines,
            "No batch-ingest results yet: run `python -m benchmarks batch-ingest --json`.",
            "",
        ]
    lines += [
        "Memories per second through `MemoryEngine` with a real embedding model: "
        "`store_many` (one embedding call, one write) against one `store` per "
        "memory, as alternating pairs in one run (`python -m benchmarks "
        "batch-ingest`). Ratio: batch rate over one-by-one rate per pair, the "
        "median; by wall clock and by the process's CPU time. Load: the load "
        "average before and after the run.",
        "",
    ]
    rows = []
    for _, d in items:
        ratios = d.get("ratios") or {}
        rows.append(
            [
                d.get("backend"),
                d.get("model"),
                f"{d.get('pairs')} x {d.get('items_per_pair')}",
                num(get(d, "one_by_one", "items_per_s"), ".2f"),
                num(get(d, "batch", "items_per_s"), ".2f"),
                f"{num(ratios.get('median'), '.2f')} ({num(ratios.get('min'), '.2f')}-"
                f"{num(ratios.get('max'), '.2f')})",
                num(ratios.get("cpu_median"), ".2f"),
                f"{num(d.get('target_ratio'), 'g')}: {yes_no(d.get('meets_target'))}",
                f"{_load(d.get('uptime_before'))} / {_load(d.get('uptime_after'))}",
            ]
        )
    lines += table(
        [
            "backend",
            "model",
            "pairs x items",
            "one by one /s",
            "batch /s",
            "ratio, wall (min-max)",
            "ratio, CPU",
            "target met",
            "load before / after",
        ],
        rows,
    )
    for path, d in items:
        lines += [provenance(path, d), ""]
    return lines


def _load(uptime: Any) -> str:
    """The 1-minute load average of an ``uptime`` line."""
    if not isinstance(uptime, str) or "load average:" not in uptime:
        return "-"
    return uptime.split("load average:", 1)[1].split(",")[0].strip()


def ingest_rows(results: Any) -> list[tuple[str, str, str]]:
    """The README figures row: the newest run of each backend, batch over one-by-one."""
    from .report_format import command

    newest: dict[str, dict[str, Any]] = {}
    for _, d in results.get("batch-ingest", []):  # oldest first: the newest wins
        if get(d, "ratios", "median") is not None:
            newest[str(d.get("backend"))] = d
    rows = []
    for backend, d in sorted(newest.items()):
        r = d["ratios"]
        rows.append(
            (
                f"batch ingest (`store_many`), {backend}, {d.get('model')}",
                f"{num(r['median'], '.2f')}x the one-by-one rate (CPU time "
                f"{num(r.get('cpu_median'), '.2f')}x), load {_load(d.get('uptime_before'))}",
                f"`{command(d)}`",
            )
        )
    return rows


def ingest_targets(results: Any) -> list[str]:
    """The batch-ingest target, met or not in the newest run of each backend."""
    newest: dict[str, dict[str, Any]] = {}
    for _, d in results.get("batch-ingest", []):
        if get(d, "ratios", "median") is not None:
            newest[str(d.get("backend"))] = d
    return [
        f"batch ingest >= {num(d.get('target_ratio'), 'g')}x one by one ({backend}): "
        f"{'met' if d.get('meets_target') else 'not met'}"
        for backend, d in sorted(newest.items())
    ]
