"""The report's runtime sections: actor call overhead, footprint, cold start."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .report_format import get, num, paragraphs, positive, provenance, table

PLACEMENTS = ("sharded", "dedicated")
TARGET_SNAPSHOT_VS_BARE = 0.8  # actor-overhead's target when a file does not record it
MB = 1024 * 1024


def _placement_order(placement: str) -> tuple[int, str]:
    """Sharded, dedicated, then any other placement by name."""
    known = PLACEMENTS.index(placement) if placement in PLACEMENTS else len(PLACEMENTS)
    return known, placement


def _rate(d: Mapping[str, Any], kind: str) -> str:
    return num(get(d, kind, "calls_per_s"), ",.0f")


def _read_ratio(d: Mapping[str, Any], bare: str) -> float | None:
    """Snapshot read calls/s over ``bare``'s: as recorded, else from the two rates."""
    r = get(d, "ratios", f"snapshot_vs_{bare}")
    if isinstance(r, (int, float)) and not isinstance(r, bool):
        return float(r)
    a, b = positive(get(d, "snapshot", "calls_per_s")), positive(get(d, bare, "calls_per_s"))
    return round(a / b, 3) if a is not None and b is not None else None


def overhead_section(items: Sequence[tuple[Path, dict[str, Any]]]) -> list[str]:
    lines = ["### Actor call overhead", ""]
    if not items:
        return [*lines, "No actor-overhead results yet.", ""]
    runs: dict[str, list[tuple[Path, dict[str, Any]]]] = {}
    for path, d in items:  # oldest first
        runs.setdefault(str(d.get("placement")), []).append((path, d))
    lines += ["Sequential calls from the driver, calls per second "
              "(`python -m benchmarks actor-overhead`), "
              "every run (oldest first). "
              "Bare: a no-op method of a plain Ray actor, of one with the owner actors' "
              "options (restarts, retries, call threads), of the plain one with a "
              "snapshot read's question as an argument, and with it as the task's name "
              "instead (how a snapshot read asks). Snapshot read: an agent re-reading "
              "its snapshot; with transfer: from a process that holds no copy.", ""]
    rows: list[list[Any]] = []
    verdicts: list[str] = []
    targets: set[float] = set()
    order = sorted(runs, key=_placement_order)
    for placement in order:
        ratios: list[float] = []
        mine = {float(d.get("target_snapshot_vs_bare") or TARGET_SNAPSHOT_VS_BARE)
                for _, d in runs[placement]}
        targets |= mine
        for path, d in runs[placement]:
            plain, same = _read_ratio(d, "bare_sync"), _read_ratio(d, "bare_sync_ft")
            rows.append([placement, d.get("backend", "-"), _rate(d, "bare_sync"),
                         _rate(d, "bare_sync_ft"), _rate(d, "bare_sync_arg"),
                         _rate(d, "bare_sync_named"), _rate(d, "snapshot"),
                         _rate(d, "snapshot_transfer"), num(plain, ".2f"), num(same, ".2f"),
                         _rate(d, "search"), f"`{path.name}`"])
            if plain is not None:
                ratios.append(plain)
        target = max(mine)
        if not ratios:
            verdicts.append(f"{placement}: no plain-actor ratio recorded")
            continue
        mid = statistics.median(ratios)
        spread = (f" (median of {len(ratios)} runs, {min(ratios):.3f}-{max(ratios):.3f})"
                  if len(ratios) > 1 else "")
        verdicts.append(f"{placement} {mid:.3f}{spread}, {'met' if mid >= target else 'not met'}")
    lines += table(["placement", "backend", "bare plain calls/s", "bare same options calls/s",
                     "bare with argument calls/s", "bare named calls/s",
                     "snapshot read calls/s",
                     "snapshot with transfer calls/s", "read / plain", "read / same options",
                     "search calls/s", "file"], rows)
    goal = (f"{targets.pop():g}" if len(targets) == 1
            else "/".join(f"{t:g}" for t in sorted(targets)))
    lines += [f"Target: snapshot read rate >= {goal} x the plain actor's call rate "
              f"(`target_snapshot_vs_bare`). Against the plain actor: "
              f"{'; '.join(verdicts)}.", ""]
    return [*lines, *paragraphs([f"{placement}: {provenance(*runs[placement][-1])}"
                                  for placement in order])]


def _by_placement(items: Sequence[tuple[Path, dict[str, Any]]]
                  ) -> tuple[dict[str, tuple[Path, dict[str, Any]]], dict[str, str]]:
    """The newest file measuring each placement, and the placements only ever skipped."""
    done: dict[str, tuple[Path, dict[str, Any]]] = {}
    skipped: dict[str, str] = {}
    for path, d in items:  # oldest first
        for placement in PLACEMENTS:
            m = d.get(placement)
            if not isinstance(m, Mapping):
                continue
            if "skipped" in m:
                skipped[placement] = str(m["skipped"])
            else:
                done[placement] = (path, d)
    return ({p: done[p] for p in PLACEMENTS if p in done},
            {p: skipped[p] for p in PLACEMENTS if p in skipped and p not in done})


def _placementprovenance(done: Mapping[str, tuple[Path, dict[str, Any]]]) -> list[str]:
    files: dict[Path, tuple[list[str], dict[str, Any]]] = {}
    for placement, (path, d) in done.items():
        files.setdefault(path, ([], d))[0].append(placement)
    return paragraphs([f"{', '.join(ps)}: {provenance(path, d)}"
                        for path, (ps, d) in files.items()])


def _size(n: Any) -> str:
    b = positive(n)
    if b is None:
        return "-" if n is None else str(n)
    return f"{b / MB:,.1f} MB" if b >= MB else f"{b / 1024:,.1f} KB"


def footprint_section(items: Sequence[tuple[Path, dict[str, Any]]]) -> list[str]:
    lines = ["### Memory footprint of live owners", ""]
    done, _ = _by_placement(items)
    if not done:
        return [*lines, "No footprint results yet.", ""]
    lines += ["Memory per live owner: `sharded`, the growth of the shard hosts' RSS divided "
              "by the owners; `dedicated`, each owner process's unique memory (USS). Total: "
              "the RSS of the actors holding owners. The newest result of each placement.",
              ""]
    rows = []
    for placement, (_, d) in done.items():
        m = d[placement]
        rows.append([placement, d.get("backend", "-"), num(m.get("owners_touched"), ",.0f"),
                     num(m.get("live_actors"), ",.0f"), _size(m.get("bytes_per_live_owner")),
                     num(m.get("holders_rss_mb"), ",.1f"),
                     num(m.get("extrapolated_rss_mb_for_10000"), ",.1f")])
    lines += table(["placement", "backend", "owners touched", "live actors",
                     "memory per live owner", "total RSS MB", "extrapolated MB for 10,000"],
                    rows)
    return [*lines, *_placementprovenance(done)]


def cold_start_section(items: Sequence[tuple[Path, dict[str, Any]]]) -> list[str]:
    lines = ["### First access to a passivated owner", ""]
    done, skipped = _by_placement(items)
    if not done and not skipped:
        return [*lines, "No cold-start results yet.", ""]
    lines += ["The first read after passivation: `dedicated` starts an actor process, "
              "`sharded` loads the owner in its shard host. The newest result of each "
              "placement.", ""]
    rows = []
    for placement, (_, d) in done.items():
        m = d[placement]
        rows.append([placement, d.get("backend", "-"), num(m.get("owners"), ",.0f"),
                     num(get(m, "cold_read", "p50_ms")), num(get(m, "cold_read", "p95_ms")),
                     num(get(m, "warm_read", "p50_ms"))])
    if rows:
        lines += table(["placement", "backend", "owners", "first read p50 ms",
                         "first read p95 ms", "warm read p50 ms"], rows)
    lines += paragraphs([f"{placement}: skipped ({why})." for placement, why in skipped.items()])
    return [*lines, *_placementprovenance(done)]


def runtime_section(results: Mapping[str, Sequence[tuple[Path, dict[str, Any]]]]
                    ) -> list[str]:
    return ["## Runtime overhead (Ray actors)", "",
            *overhead_section(results.get("actor-overhead", [])),
            *footprint_section(results.get("footprint", [])),
            *cold_start_section(results.get("cold-start", []))]


def extraction_section(items: Sequence[tuple[Path, dict[str, Any]]]) -> list[str]:
    """The newest extraction run: throughput per mode and where a call's time goes."""
    lines = ["## Extraction throughput", ""]
    if not items:
        return [*lines, "No extraction results yet.", ""]
    path, d = items[-1]
    lines += [f"Extractions against a local server that answers after a fixed "
              f"{num(d.get('delay_ms'), 'g')} ms with {num(d.get('items_per_call'))} "
              f"candidates, {num(d.get('concurrency'))} in flight "
              "(`python -m benchmarks extraction`): `pool` through the Ray extractor pool, "
              "`local` an extractor in the calling process. Time shares are of a call's "
              "time at the caller.", ""]
    parts = ("server_delay", "litellm_http", "our_code", "ray_and_queue")
    rows = [[mode, num(get(d, mode, "calls_per_s"), ",.1f"),
             num(get(d, mode, "candidates_per_s"), ",.1f"),
             num(get(d, mode, "latency", "p50_ms")), num(get(d, mode, "latency", "p95_ms")),
             *(num(100 * s, ".2f") if isinstance(s := get(d, mode, "share", k), (int, float))
               else "-" for k in parts)]
            for mode in ("pool", "local") if isinstance(d.get(mode), Mapping)]
    lines += table(["mode", "calls/s", "candidates/s", "p50 ms", "p95 ms",
                    *(f"{k.replace('_', ' ')} %" for k in parts)], rows)
    return [*lines, provenance(path, d), ""]
