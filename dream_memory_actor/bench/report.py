"""Write BENCHMARKS.md and its PNG plots from the benchmark JSON results.

Reads every ``*.json`` under ``--results`` (default ``.bench/results``), written as
``dream-memory bench NAME --json > .bench/results/NAME-....json``, and groups them
by their ``benchmark`` field: ``retrieval`` (recall by category, the latest file),
``compare-mem0`` (the latest), ``search-latency`` (latency by store size, every
file a point) and ``concurrency`` (throughput by writers, every file a point).
Each table says which machine and which command produced it. Plots need
matplotlib (extra ``bench``); without it the tables are still written.
"""

from __future__ import annotations

import argparse
import json
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


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--results", default=".bench/results", help="directory of JSON results")
    p.add_argument("--out", default="BENCHMARKS.md")
    p.add_argument("--plots", default="docs/bench", help="directory for the PNG plots")


def load_results(directory: str | Path) -> dict[str, list[tuple[Path, dict[str, Any]]]]:
    """The JSON results by benchmark name, oldest first (files that are not results skipped)."""
    out: dict[str, list[tuple[Path, dict[str, Any]]]] = {}
    for path in sorted(Path(directory).glob("*.json"), key=lambda p: p.stat().st_mtime):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and isinstance(data.get("benchmark"), str):
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


def latency_section(items: Sequence[tuple[Path, dict[str, Any]]], plot: str | None
                    ) -> list[str]:
    lines = ["## Search latency by store size", "",
             "Synthetic memories (bench search-latency); query embedding excluded.", ""]
    rows = [[d.get("backend"), d.get("total_memories"), d.get("owners"),
             d["search"]["p50_ms"], d["search"]["p95_ms"], _machine(d), f"`{_command(d)}`"]
            for _, d in sorted(items, key=lambda x: (x[1].get("backend", ""),
                                                     x[1].get("total_memories", 0)))]
    lines += _table(["backend", "memories", "owners", "p50 ms", "p95 ms", "machine", "command"],
                    rows)
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
             f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC. Regenerate after re-running "
             "the benchmarks; the raw JSON stays out of the repository.", ""]
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
                  "`dream-memory bench retrieval --json > .bench/results/retrieval.json`.", ""]
    if results.get("compare-mem0"):
        path, d = results["compare-mem0"][-1]
        lines += mem0_section(path, d, rel(plots.mem0_latency(d, out_dir / "vs_mem0.png")))
    for name, title, section, fn in (
            ("search-latency", "search latency", latency_section, plots.latency_by_size),
            ("concurrency", "concurrency", concurrency_section, plots.throughput)):
        items = results.get(name, [])
        if items:
            lines += section(items, rel(fn([d for _, d in items],
                                           out_dir / f"{name.replace('-', '_')}.png")))
        else:
            lines += [f"## {title.capitalize()}", "", f"No {name} results yet.", ""]
    written = [str(p) for p in sorted(out_dir.glob("*.png"))] if out_dir.is_dir() else []
    md.write_text("\n".join(lines).rstrip() + "\n", encoding="utf-8")
    return {"benchmark": "report", "written": [str(md), *written],
            "inputs": {k: [str(p) for p, _ in v] for k, v in results.items()},
            "plots": plots.available()}
