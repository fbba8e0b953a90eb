"""Write BENCHMARKS.md and its PNG plots from the benchmark JSON results.

Reads every ``*.json`` under ``--results`` (default ``docs/bench/results``, kept in
the repository: the evidence for every figure, and what lets another machine
regenerate the report), written as
``dream-memory bench NAME --json > docs/bench/results/NAME-....json``, and groups them
by their ``benchmark`` field: ``retrieval`` (recall by category, the latest file),
``compare-mem0`` (the latest), ``search-latency`` (latency by store size, every
file a point, plus per backend how p50 grows with the store size, from the newest
file of each size) and ``concurrency`` (throughput by writers, every file a point).
The runtime section reads ``actor-overhead`` (the newest file of each placement),
``footprint`` and ``cold-start`` (the newest figure of each placement). Each table
says which machine and which command produced it. Plots need matplotlib (extra
``bench``); without it the tables are still written.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .locomo import CATEGORIES

ROWS = {"hybrid_seed": "hybrid, seed weights 0.6/0.3/0.1",
        "vector_only": "vector only (1/0/0)",
        "keyword_only_weights": "keyword only weights (0/1/0), embeddings present",
        "keyword_mode": "keyword mode, no embedder (ADR-005)",
        "bm25": "BM25 (k1=1.2, b=0.75), reference"}
PLACEMENTS = ("sharded", "dedicated")
TARGET_SNAPSHOT_VS_BARE = 0.8  # actor-overhead's target when a file does not record it
MB = 1024 * 1024
#: Where benchmark results are kept (in the repository).
RESULTS = "docs/bench/results"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--results", default=RESULTS, help="directory of JSON results")
    p.add_argument("--out", default="BENCHMARKS.md")
    p.add_argument("--plots", default="docs/bench", help="directory for the PNG plots")


def load_results(directory: str | Path) -> dict[str, list[tuple[Path, dict[str, Any]]]]:
    """The JSON results by benchmark name, oldest first (files that are not results skipped).

    Oldest by ``finished_at`` (what ``dream-memory bench`` records), files without one
    first, then by name: a checkout's file times say nothing about when a run was made.
    """
    out: dict[str, list[tuple[Path, dict[str, Any]]]] = {}
    found: list[tuple[str, str, Path, dict[str, Any]]] = []
    for path in Path(directory).glob("*.json"):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and isinstance(data.get("benchmark"), str):
            found.append((str(data.get("finished_at") or ""), path.name, path, data))
    for _, _, path, data in sorted(found, key=lambda f: f[:2]):
        out.setdefault(data["benchmark"], []).append((path, data))
    return out


def _machine(d: Mapping[str, Any]) -> str:
    m = d.get("machine") or {}
    return f"{m.get('cpus', '?')} CPUs, {m.get('platform', '?')}, Python {m.get('python', '?')}"


def _command(d: Mapping[str, Any]) -> str:
    if d.get("command"):
        return str(d["command"])
    if d.get("benchmark") == "search-latency":
        sample = (d.get("store_path") or {}).get("ops")
        extra = f" --store-sample {sample}" if sample is not None else ""
        return (f"dream-memory bench search-latency --backend {d.get('backend')} --owners "
                f"{d.get('owners')} --per-owner {d.get('per_owner')}{extra} --json "
                "(reconstructed)")
    if d.get("benchmark") == "concurrency":
        return (f"dream-memory bench concurrency --backend {d.get('backend')} --placement "
                f"{d.get('placement')} --writers {d.get('writers')} --tasks {d.get('tasks')} "
                "--json  (reconstructed)")
    return "(not recorded)"


def _provenance(path: Path, d: Mapping[str, Any]) -> str:
    return f"Machine: {_machine(d)}. Command: `{_command(d)}`. File: `{path.name}`."


def _pct(x: Any) -> str:
    return "-" if x is None else f"{100 * float(x):.1f}"


def _table(head: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return [*out, ""]


def _ci(stat: Mapping[str, Any]) -> str:
    return f"{_pct(stat['mean'])} [{_pct(stat['ci95_lo'])}, {_pct(stat['ci95_hi'])}]"


def retrieval_section(path: Path, d: Mapping[str, Any], plot: str | None) -> list[str]:
    head = d["headline_corpus"]
    corpus = d["corpora"][head]
    variants = corpus["variants"]
    lines = ["## Retrieval quality on LoCoMo", "",
             f"{d['data']['conversations']} conversations, {d['data']['turns']} turns as "
             f"memories, {d['data']['questions_used']} questions (categories 1-4 with evidence). "
             f"Backend `{d['backend']}`, ingest `{d['ingest']}`, corpus `{head}` "
             f"({corpus['corpus']['merges']} dedup merges). Percentages; 95% bootstrap "
             "intervals in brackets.", "", _provenance(path, d), ""]
    rows = []
    for key, label in ROWS.items():
        if key in variants:
            o = variants[key]["overall"]
            rows.append([label, _pct(o["recall@5"]["mean"]), _ci(o["recall@10"]),
                         _pct(o["recall@25"]["mean"]), _pct(o["recall_all@10"]["mean"]),
                         _pct(o["ndcg@10"]["mean"]), _pct(o["mrr"]["mean"])])
    lines += _table(["search", "R@5", "R@10", "R@25", "R_all@10", "nDCG@10", "MRR"], rows)
    cats = list(CATEGORIES.values())
    rows = [[ROWS[k]] + [_pct(variants[k]["by_category"].get(c, {}).get("recall@10", {})
                              .get("mean")) for c in cats] for k in ROWS if k in variants]
    lines += ["Recall@10 by question category:", ""]
    lines += _table(["search", *cats], rows)
    if plot:
        lines += [f"![recall@10 by category]({plot})", ""]
    t = d.get("tuned") or {}
    if "held_out_tuned" in t:
        diff = t["tuned_minus_seed"]["recall@10"]
        lines += ["### Tuned weights (held-out conversations only)", "", t["protocol"] + ".", ""]
        lines += _table(["weights", "R@10 on held-out"], [
            ["seed 0.6/0.3/0.1", _ci(t["held_out_seed"]["overall"]["recall@10"])],
            ["tuned per fold", _ci(t["held_out_tuned"]["overall"]["recall@10"])],
            ["difference (paired)", _ci(diff)]])
        lines += _table(["held-out", "chosen weights (vector/keyword/time, half-life)",
                         "train R@10"],
                        [[f["held_out"], "{vector:g}/{keyword:g}/{time:g}, {half_life_days:g} d"
                          .format(**f["weights"]), _pct(f["train_recall@10"])]
                         for f in t["folds"]])
    others = {k: v for k, v in d["corpora"].items() if k != head}
    for name, c in others.items():
        lines += [f"Corpus `{name}` ({c['corpus']['merges']} merges): hybrid R@10 "
                  f"{_pct(c['headline']['hybrid_seed']['recall@10'])}, vector only "
                  f"{_pct(c['headline']['vector_only']['recall@10'])}, BM25 "
                  f"{_pct(c['headline']['bm25']['recall@10'])}.", ""]
    lat = corpus["search_latency"]
    q = d.get("query_embedding", {})
    lines += _table(["timing (ms)", "p50", "p95"], [
        ["hybrid search (query vector given)", lat["hybrid_seed"]["p50_ms"],
         lat["hybrid_seed"]["p95_ms"]],
        ["keyword-mode search", lat["keyword_mode"]["p50_ms"], lat["keyword_mode"]["p95_ms"]],
        ["query embedding (MiniLM, 1 query/call)", q.get("p50_ms"), q.get("p95_ms")]])
    lines += [f"Reference only: {d.get('reference', '')}.", ""]
    return lines


def mem0_section(path: Path, d: Mapping[str, Any], plot: str | None) -> list[str]:
    lines = ["## dream-memory vs mem0 (same data, machine and run)", "",
             _provenance(path, d), ""]
    m = d.get("mem0", {})
    if "error" in m:
        where = "; ".join(m.get("raised_at", []))
        return [*lines, f"mem0 could not run: `{m['error']}` during {m.get('during')} "
                        f"(raised at {where}).", ""]
    r, lat = d["recall@10"], d["latency"]
    rows = [["recall@10", _ci(r["ours"]), _ci(r["mem0"]),
             f"{d['recall@10_ratio_ours_over_mem0']:.2f}"]]
    for kind in ("system", "end_to_end"):
        for p in ("p50_ms", "p95_ms"):
            ratio = lat[kind][f"{p[:3]}_ratio_ours_over_mem0"]
            rows.append([f"search {p[:3]} ms ({kind.replace('_', '-')})",
                         lat[kind]["ours"][p], lat[kind]["mem0"][p], f"{ratio:.2f}"])
    lines += _table(["", "dream-memory", f"mem0 {m.get('version', '')}", "ours / mem0"], rows)
    lines += ["`system`: query vectors given to both (the memory system alone); `end-to-end`: "
              "each embeds the query itself with the same model. mem0 ran without spaCy (its "
              "`nlp` extra downloads the `en_core_web_sm` model at run time, outside PyPI): no "
              "lemmatization and no entity boost, and its BM25 leg matches a memory only "
              "when it holds every word of the question (`plainto_tsquery`).", ""]
    dflt = d.get("mem0_default_session")
    if dflt:
        lines += [f"mem0 with the server's default HNSW session settings: recall@10 "
                  f"{_ci(dflt['recall@10'])}, system p50 {dflt['system_latency']['p50_ms']} ms, "
                  f"{dflt['searches_with_fewer_than_limit_hits']} short result lists.", ""]
    net = d.get("network", {})
    external = len(net.get("external_connects", []))
    lines += [f"Network during the run: external connections {external}, dummy-LLM "
              f"connections {net.get('dummy_llm_connects')}.", ""]
    if plot:
        lines += [f"![latency vs mem0]({plot})", ""]
    return lines


def _get(d: Any, *keys: str) -> Any:
    """``d[k1][k2]...``, or ``None`` where a level is missing or not a mapping."""
    for key in keys:
        if not isinstance(d, Mapping):
            return None
        d = d.get(key)
    return d


def _num(x: Any, spec: str = "") -> str:
    """A number formatted with ``spec``, ``-`` when absent or not a number."""
    if x is None or isinstance(x, bool):
        return "-"
    try:
        return format(float(x), spec) if spec else str(x)
    except (TypeError, ValueError):
        return "-"


def _positive(x: Any) -> float | None:
    """``x`` as a float when it is a finite positive number (what a log can take)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    return float(x) if math.isfinite(x) and x > 0 else None


def _yes_no(x: Any) -> str:
    return "yes" if x is True else "no" if x is False else "-"


def _factor(f: float) -> str:
    return f"{f:,.0f}" if abs(f - round(f)) < 0.05 else f"{f:.1f}"


def growth_exponent(points: Sequence[tuple[float, float]]) -> float | None:
    """Least-squares slope of log p50 over log size: p50 ~ size^slope (None: < 2 sizes)."""
    xy = [(math.log(size), math.log(p50)) for size, p50 in points]
    if len({x for x, _ in xy}) < 2:
        return None
    mx = sum(x for x, _ in xy) / len(xy)
    my = sum(y for _, y in xy) / len(xy)
    return (sum((x - mx) * (y - my) for x, y in xy)
            / sum((x - mx) ** 2 for x, _ in xy))


def newest_by_size(items: Sequence[tuple[Path, dict[str, Any]]]
                   ) -> dict[str, list[dict[str, Any]]]:
    """Per backend, the newest result of each store size, smallest size first."""
    newest: dict[str, dict[float, dict[str, Any]]] = {}
    for _, d in items:  # oldest first: a newer file of the same size replaces it
        size = _positive(d.get("total_memories"))
        if size is not None:
            newest.setdefault(str(d.get("backend")), {})[size] = d
    return {b: [by[s] for s in sorted(by)] for b, by in sorted(newest.items())}


def _build(d: Mapping[str, Any]) -> str:
    b = d.get("hnsw_build")
    if not isinstance(b, Mapping):
        return "-"
    return f"{_num(b.get('maintenance_work_mem_mb'))} / {_num(b.get('parallel_workers'))}"


def growth_section(items: Sequence[tuple[Path, dict[str, Any]]]) -> list[str]:
    """Per backend with two sizes or more: how p50/p95 grow with the store size."""
    lines: list[str] = []
    for backend, runs in newest_by_size(items).items():
        if len(runs) < 2:
            continue
        builds = any(isinstance(d.get("hnsw_build"), Mapping) for d in runs)
        loads = any(_get(d, "bulk_load", "rows_per_s") is not None for d in runs)
        head = ["memories", "owners", "p50 ms", "p95 ms", "p50 growth vs previous size",
                "HNSW build s"]
        head += ["build (mem MB / workers)"] * builds + ["bulk load rows/s"] * loads
        rows: list[list[Any]] = []
        points: list[tuple[float, float]] = []
        prev: tuple[float, float | None] | None = None
        for d in runs:
            size = float(d["total_memories"])
            p50 = _positive(_get(d, "search", "p50_ms"))
            growth = "-"
            if prev is not None and prev[1] is not None and p50 is not None:
                growth = f"x{p50 / prev[1]:.2f} per {_factor(size / prev[0])}x"
            prev = (size, p50)
            if p50 is not None:
                points.append((size, p50))
            row = [f"{size:,.0f}", _num(d.get("owners")), _num(_get(d, "search", "p50_ms")),
                   _num(_get(d, "search", "p95_ms")), growth, _num(d.get("hnsw_build_s"))]
            row += [_build(d)] * builds
            row += [_num(_get(d, "bulk_load", "rows_per_s"), ",.0f")] * loads
            rows.append([*row, _yes_no(d.get("explain_uses_vector_index"))])
        lines += [f"### How cost grows with size: `{backend}`", "",
                  "The newest result of each size; growth is p50 over the previous size's "
                  "p50, for the size step given. Last column: the plan of the vector "
                  "candidate query uses the HNSW index (EXPLAIN).", ""]
        lines += _table([*head, "uses vector index"], rows)
        slope = growth_exponent(points)
        if slope is not None:
            lo, hi = points[0][0], points[-1][0]
            lines += [f"p50 grows as size^{slope:.2f} from {lo:,.0f} to {hi:,.0f} memories "
                      f"(least-squares slope of log p50 over log size, {len(points)} sizes; "
                      "1 would be linear, 0 flat).", ""]
        after = sorted({str(d["after_load"]) for d in runs if d.get("after_load")})
        if after:
            lines += [f"After the bulk load: {'; '.join(after)}.", ""]
    return lines


def latency_section(items: Sequence[tuple[Path, dict[str, Any]]], plot: str | None
                    ) -> list[str]:
    lines = ["## Search latency by store size", "",
             "Synthetic memories (bench search-latency); query embedding excluded.", ""]
    store = any(_get(d, "store_path", "ops_per_s") is not None for _, d in items)
    rows = [[d.get("backend"), d.get("total_memories"), d.get("owners"),
             _num(_get(d, "search", "p50_ms")), _num(_get(d, "search", "p95_ms")),
             *[_num(_get(d, "store_path", "ops_per_s"))] * store, _machine(d),
             f"`{_command(d)}`"]
            for _, d in sorted(items, key=lambda x: (x[1].get("backend", ""),
                                                     x[1].get("total_memories", 0)))]
    lines += _table(["backend", "memories", "owners", "p50 ms", "p95 ms",
                     *["store path ops/s"] * store, "machine", "command"], rows)
    lines += growth_section(items)
    if plot:
        lines += [f"![latency by store size]({plot})", ""]
    return lines


def concurrency_section(items: Sequence[tuple[Path, dict[str, Any]]], plot: str | None
                        ) -> list[str]:
    lines = ["## Write throughput by concurrency", ""]
    rows = [[d.get("backend"), d.get("placement"), d.get("writers"), d.get("tasks"),
             d.get("ops_per_s"), d.get("latency", {}).get("p50_ms"), _machine(d),
             f"`{_command(d)}`"] for _, d in items]
    lines += _table(["backend", "placement", "writers", "tasks", "ops/s", "p50 ms", "machine",
                     "command"], rows)
    if plot:
        lines += [f"![throughput by concurrency]({plot})", ""]
    return lines


def _placement_order(placement: str) -> tuple[int, str]:
    """Sharded, dedicated, then any other placement by name."""
    known = PLACEMENTS.index(placement) if placement in PLACEMENTS else len(PLACEMENTS)
    return known, placement


def _paragraphs(lines: Sequence[str]) -> list[str]:
    """Each line its own Markdown paragraph."""
    return [x for line in lines for x in (line, "")]


def _rate(d: Mapping[str, Any], kind: str) -> str:
    return _num(_get(d, kind, "calls_per_s"), ",.0f")


def _read_ratio(d: Mapping[str, Any], bare: str) -> float | None:
    """Snapshot read calls/s over ``bare``'s: as recorded, else from the two rates."""
    r = _get(d, "ratios", f"snapshot_vs_{bare}")
    if isinstance(r, (int, float)) and not isinstance(r, bool):
        return float(r)
    a, b = _positive(_get(d, "snapshot", "calls_per_s")), _positive(_get(d, bare, "calls_per_s"))
    return round(a / b, 3) if a is not None and b is not None else None


def overhead_section(items: Sequence[tuple[Path, dict[str, Any]]]) -> list[str]:
    lines = ["### Actor call overhead", ""]
    if not items:
        return [*lines, "No actor-overhead results yet.", ""]
    runs: dict[str, list[tuple[Path, dict[str, Any]]]] = {}
    for path, d in items:  # oldest first
        runs.setdefault(str(d.get("placement")), []).append((path, d))
    lines += ["Sequential calls from the driver, calls per second (bench actor-overhead), "
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
                         _rate(d, "snapshot_transfer"), _num(plain, ".2f"), _num(same, ".2f"),
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
    lines += _table(["placement", "backend", "bare plain calls/s", "bare same options calls/s",
                     "bare with argument calls/s", "bare named calls/s",
                     "snapshot read calls/s",
                     "snapshot with transfer calls/s", "read / plain", "read / same options",
                     "search calls/s", "file"], rows)
    goal = (f"{targets.pop():g}" if len(targets) == 1
            else "/".join(f"{t:g}" for t in sorted(targets)))
    lines += [f"Target: snapshot read rate >= {goal} x the plain actor's call rate "
              f"(`target_snapshot_vs_bare`). Against the plain actor: "
              f"{'; '.join(verdicts)}.", ""]
    return [*lines, *_paragraphs([f"{placement}: {_provenance(*runs[placement][-1])}"
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


def _placement_provenance(done: Mapping[str, tuple[Path, dict[str, Any]]]) -> list[str]:
    files: dict[Path, tuple[list[str], dict[str, Any]]] = {}
    for placement, (path, d) in done.items():
        files.setdefault(path, ([], d))[0].append(placement)
    return _paragraphs([f"{', '.join(ps)}: {_provenance(path, d)}"
                        for path, (ps, d) in files.items()])


def _size(n: Any) -> str:
    b = _positive(n)
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
        rows.append([placement, d.get("backend", "-"), _num(m.get("owners_touched"), ",.0f"),
                     _num(m.get("live_actors"), ",.0f"), _size(m.get("bytes_per_live_owner")),
                     _num(m.get("holders_rss_mb"), ",.1f"),
                     _num(m.get("extrapolated_rss_mb_for_10000"), ",.1f")])
    lines += _table(["placement", "backend", "owners touched", "live actors",
                     "memory per live owner", "total RSS MB", "extrapolated MB for 10,000"],
                    rows)
    return [*lines, *_placement_provenance(done)]


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
        rows.append([placement, d.get("backend", "-"), _num(m.get("owners"), ",.0f"),
                     _num(_get(m, "cold_read", "p50_ms")), _num(_get(m, "cold_read", "p95_ms")),
                     _num(_get(m, "warm_read", "p50_ms"))])
    if rows:
        lines += _table(["placement", "backend", "owners", "first read p50 ms",
                         "first read p95 ms", "warm read p50 ms"], rows)
    lines += _paragraphs([f"{placement}: skipped ({why})." for placement, why in skipped.items()])
    return [*lines, *_placement_provenance(done)]


def runtime_section(results: Mapping[str, Sequence[tuple[Path, dict[str, Any]]]]
                    ) -> list[str]:
    return ["## Runtime overhead (Ray actors)", "",
            *overhead_section(results.get("actor-overhead", [])),
            *footprint_section(results.get("footprint", [])),
            *cold_start_section(results.get("cold-start", []))]


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from . import report_plots as plots

    results = load_results(args.results)
    out_dir = Path(args.plots)
    md = Path(args.out)

    def rel(p: Path | None) -> str | None:
        if p is None:
            return None
        try:
            return str(p.resolve().relative_to(md.resolve().parent))
        except ValueError:
            return str(p)

    lines = ["# Benchmarks", "",
             f"Generated by `dream-memory bench report` from `{args.results}` on "
             f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC: each table names the JSON file "
             "it comes from, kept there. Regenerate after re-running the benchmarks.", ""]
    written: list[str] = []
    if results.get("retrieval"):
        runs = results["retrieval"]
        engine = [r for r in runs if r[1].get("ingest") == "engine"]
        path, d = (engine or runs)[-1]
        png = plots.recall_by_category(d, out_dir / "recall_by_category.png")
        lines += retrieval_section(path, d, rel(png))
        if len(runs) > 1:
            lines += ["All retrieval runs (hybrid, seed weights):", ""]
            lines += _table(["file", "backend", "ingest", "R@10", "search p50 ms", "command"], [
                [p.name, r["backend"], r["ingest"],
                 _pct(r["headline"]["hybrid_seed"]["recall@10"]),
                 r["corpora"][r["headline_corpus"]]["search_latency"]["hybrid_seed"]["p50_ms"],
                 f"`{_command(r)}`"] for p, r in runs])
    else:
        lines += ["## Retrieval quality on LoCoMo", "", "No results yet: run "
                  f"`dream-memory bench retrieval --json > {RESULTS}/retrieval.json`.", ""]
    if results.get("compare-mem0"):
        runs = results["compare-mem0"]
        path, d = runs[-1]
        lines += mem0_section(path, d, rel(plots.mem0_latency(d, out_dir / "vs_mem0.png")))
        if len(runs) > 1:
            lines += ["All compare-mem0 runs (memory systems alone, p50 and p95 ours / mem0):", ""]
            lines += _table(["file", "R@10 ours", "R@10 mem0", "p50 ms ours", "p50 ms mem0",
                             "p50 ratio", "p95 ratio"], [
                [p.name, _pct(r["recall@10"]["ours"]["mean"]), _pct(r["recall@10"]["mem0"]["mean"]),
                 r["latency"]["system"]["ours"]["p50_ms"], r["latency"]["system"]["mem0"]["p50_ms"],
                 r["latency"]["system"]["p50_ratio_ours_over_mem0"],
                 r["latency"]["system"]["p95_ratio_ours_over_mem0"]]
                for p, r in runs if "latency" in r])
    for name, title, section, fn in (
            ("search-latency", "search latency", latency_section, plots.latency_by_size),
            ("concurrency", "concurrency", concurrency_section, plots.throughput)):
        items = results.get(name, [])
        if items:
            lines += section(items, rel(fn([d for _, d in items],
                                           out_dir / f"{name.replace('-', '_')}.png")))
        else:
            lines += [f"## {title.capitalize()}", "", f"No {name} results yet.", ""]
    lines += runtime_section(results)
    written = [str(p) for p in sorted(out_dir.glob("*.png"))] if out_dir.is_dir() else []
    md.write_text("\n".join(lines).rstrip() + "\n", encoding="utf-8")
    return {"benchmark": "report", "written": [str(md), *written],
            "inputs": {k: [str(p) for p, _ in v] for k, v in results.items()},
            "plots": plots.available()}
