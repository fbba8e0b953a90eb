"""The report's search sections: retrieval quality, mem0, latency by size, concurrency."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .locomo import CATEGORIES
from .report_format import (
    ci,
    command,
    engines,
    factor,
    get,
    machine,
    num,
    pct,
    positive,
    provenance,
    table,
    yes_no,
)

ROWS = {"hybrid_default": "hybrid, default weights 0.6/0.3/0.1",
        "vector_only": "vector only (1/0/0)",
        "keyword_only_weights": "keyword only weights (0/1/0), embeddings present",
        "keyword_mode": "keyword mode, no embedder",
        "bm25": "BM25 (k1=1.2, b=0.75), reference"}


def retrieval_section(path: Path, d: Mapping[str, Any], plot: str | None) -> list[str]:
    head = d["headline_corpus"]
    corpus = d["corpora"][head]
    variants = corpus["variants"]
    lines = ["## Retrieval quality on LoCoMo", "",
             f"{d['data']['conversations']} conversations, {d['data']['turns']} turns as "
             f"memories, {d['data']['questions_used']} questions (categories 1-4 with evidence). "
             f"Backend `{d['backend']}`, ingest `{d['ingest']}`, corpus `{head}` "
             f"({corpus['corpus']['merges']} dedup merges). Percentages; 95% bootstrap "
             "intervals in brackets.", "", provenance(path, d), ""]
    rows = []
    for key, label in ROWS.items():
        if key in variants:
            o = variants[key]["overall"]
            rows.append([label, pct(o["recall@5"]["mean"]), ci(o["recall@10"]),
                         pct(o["recall@25"]["mean"]), pct(o["recall_all@10"]["mean"]),
                         pct(o["ndcg@10"]["mean"]), pct(o["mrr"]["mean"])])
    lines += table(["search", "R@5", "R@10", "R@25", "R_all@10", "nDCG@10", "MRR"], rows)
    cats = list(CATEGORIES.values())
    rows = [[ROWS[k]] + [pct(variants[k]["by_category"].get(c, {}).get("recall@10", {})
                              .get("mean")) for c in cats] for k in ROWS if k in variants]
    lines += ["Recall@10 by question category:", ""]
    lines += table(["search", *cats], rows)
    if plot:
        lines += [f"![recall@10 by category]({plot})", ""]
    t = d.get("tuned") or {}
    if "held_out_tuned" in t:
        diff = t["tuned_minus_default"]["recall@10"]
        lines += ["### Tuned weights (held-out conversations only)", "", t["protocol"] + ".", ""]
        lines += table(["weights", "R@10 on held-out"], [
            ["default 0.6/0.3/0.1", ci(t["held_out_default"]["overall"]["recall@10"])],
            ["tuned per fold", ci(t["held_out_tuned"]["overall"]["recall@10"])],
            ["difference (paired)", ci(diff)]])
        lines += table(["held-out", "chosen weights (vector/keyword/time, half-life)",
                         "train R@10"],
                        [[f["held_out"], "{vector:g}/{keyword:g}/{time:g}, {half_life_days:g} d"
                          .format(**f["weights"]), pct(f["train_recall@10"])]
                         for f in t["folds"]])
    others = {k: v for k, v in d["corpora"].items() if k != head}
    for name, c in others.items():
        lines += [f"Corpus `{name}` ({c['corpus']['merges']} merges): hybrid R@10 "
                  f"{pct(c['headline']['hybrid_default']['recall@10'])}, vector only "
                  f"{pct(c['headline']['vector_only']['recall@10'])}, BM25 "
                  f"{pct(c['headline']['bm25']['recall@10'])}.", ""]
    lat = corpus["search_latency"]
    q = d.get("query_embedding", {})
    lines += table(["timing (ms)", "p50", "p95"], [
        ["hybrid search (query vector given)", lat["hybrid_default"]["p50_ms"],
         lat["hybrid_default"]["p95_ms"]],
        ["keyword-mode search", lat["keyword_mode"]["p50_ms"], lat["keyword_mode"]["p95_ms"]],
        ["query embedding (MiniLM, 1 query/call)", q.get("p50_ms"), q.get("p95_ms")]])
    lines += [f"Reference only: {d.get('reference', '')}.", ""]
    return lines + paired_lines(d)


def paired_lines(d: Mapping[str, Any]) -> list[str]:
    """The run against another one, question by question (``--paired-with``), if any."""
    p = d.get("paired_with")
    if not p:
        return []
    rows = [[f"`{k}`", f"{v['mean'] * 100:+.2f}", f"[{v['ci95_lo'] * 100:+.2f}, "
             f"{v['ci95_hi'] * 100:+.2f}]"]
            for k, v in p["this_minus_that"].items() if k != "bm25" and not k.endswith("/bm25")]
    return [f"Paired against `{p['file']}` (another run on the same questions; "
            f"{p.get('metric', 'recall@10')}, points, this run minus that one, paired "
            "bootstrap 95% interval):", "",
            *table(["row", "difference", "95% interval"], rows)]


def mem0_section(path: Path, d: Mapping[str, Any], plot: str | None) -> list[str]:
    with_context = d.get("context", "none") != "none"
    many = d.get("ingest", "store") == "store_many"
    title = ("### The same, each turn with its context" if with_context
             else "### The same, ours ingested one session a `store_many`" if many
             else "## dream-memory vs mem0 (same data, machine and run)")
    lines = [title, "", provenance(path, d), ""]
    texts = d.get("texts")
    if texts:
        shape = d.get("context_shape") or {}
        around = (f" (the context: the session's date and its {shape.get('turns')} previous "
                  "turns)" if with_context else "")
        lines += [f"What each system stored for a turn{around}: dream-memory {texts['ours']}; "
                  f"mem0 {texts['mem0']}.", ""]
    m = d.get("mem0", {})
    if "error" in m:
        where = "; ".join(m.get("raised_at", []))
        return [*lines, f"mem0 could not run: `{m['error']}` during {m.get('during')} "
                        f"(raised at {where}).", ""]
    r, lat = d["recall@10"], d["latency"]
    rows = [["recall@10", ci(r["ours"]), ci(r["mem0"]),
             f"{d['recall@10_ratio_ours_over_mem0']:.2f}"]]
    for kind in ("system", "end_to_end"):
        for p in ("p50_ms", "p95_ms"):
            ratio = lat[kind][f"{p[:3]}_ratio_ours_over_mem0"]
            rows.append([f"search {p[:3]} ms ({kind.replace('_', '-')})",
                         lat[kind]["ours"][p], lat[kind]["mem0"][p], f"{ratio:.2f}"])
    alone = lat["end_to_end"].get("embedding_alone")
    if alone:
        rows.append(["the query's embedding alone, p50 ms", alone["p50_ms"], "", ""])
    ours_in, theirs_in = get(d, "ours", "ingest", "stores_per_s"), get(m, "ingest", "adds_per_s")
    if ours_in and theirs_in:
        rows.append([f"ingest, memories/s ({'store_many' if many else 'store'} / "
                     "add(infer=False), embeddings cached)", ours_in, theirs_in,
                     f"{ours_in / theirs_in:.2f}"])
    lines += table(["", "dream-memory", f"mem0 {m.get('version', '')}", "ours / mem0"], rows)
    over = lat["end_to_end"].get("ours_p50_minus_embedding_p50_ms")
    if over is not None:
        lines += [f"End to end, ours waits {over:+.2f} ms (p50) beyond the query's embedding "
                  "alone, timed in alternation with it.", ""]
    lines += ["`system`: query vectors given to both (the memory system alone); `end-to-end`: "
              "each embeds the query itself with the same model. mem0 ran without spaCy (its "
              "`nlp` extra downloads the `en_core_web_sm` model at run time, outside PyPI): no "
              "lemmatization and no entity boost, and its BM25 leg matches a memory only "
              "when it holds every word of the question (`plainto_tsquery`).", ""]
    dflt = d.get("mem0_default_hnsw")
    if dflt:
        lines += [f"mem0 with the server's default HNSW settings: recall@10 "
                  f"{ci(dflt['recall@10'])}, system p50 {dflt['system_latency']['p50_ms']} ms, "
                  f"{dflt['searches_with_fewer_than_limit_hits']} short result lists.", ""]
    net = d.get("network", {})
    external = len(net.get("external_connects", []))
    lines += [f"Network during the run: external connections {external}, dummy-LLM "
              f"connections {net.get('dummy_llm_connects')}.", ""]
    if plot:
        lines += [f"![latency vs mem0]({plot})", ""]
    return lines


def retrieval_runs(runs: Sequence[tuple[Path, dict[str, Any]]]) -> list[str]:
    """Every retrieval run in one table, when there is more than one."""
    if len(runs) < 2:
        return []
    return ["All retrieval runs (hybrid, default weights):", "",
            *table(["file", "model", "backend", "ingest", "R@10", "search p50 ms", "command"], [
                [p.name, r.get("embedding", {}).get("model", ""), r["backend"], r["ingest"],
                 pct(r["headline"]["hybrid_default"]["recall@10"]),
                 r["corpora"][r["headline_corpus"]]["search_latency"]["hybrid_default"]["p50_ms"],
                 f"`{command(r)}`"] for p, r in runs])]


def mem0_runs(runs: Sequence[tuple[Path, dict[str, Any]]]) -> list[str]:
    """Every compare-mem0 run in one table, when there is more than one."""
    if len(runs) < 2:
        return []
    return ["All compare-mem0 runs (memory systems alone, p50 and p95 ours / mem0):", "",
            *table(["file", "context", "R@10 ours", "R@10 mem0", "p50 ms ours", "p50 ms mem0",
                    "p50 ratio", "p95 ratio"], [
                [p.name, r.get("context", "none"), pct(r["recall@10"]["ours"]["mean"]),
                 pct(r["recall@10"]["mem0"]["mean"]),
                 r["latency"]["system"]["ours"]["p50_ms"], r["latency"]["system"]["mem0"]["p50_ms"],
                 r["latency"]["system"]["p50_ratio_ours_over_mem0"],
                 r["latency"]["system"]["p95_ratio_ours_over_mem0"]]
                for p, r in runs if "latency" in r])]


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
        size = positive(d.get("total_memories"))
        if size is not None:
            newest.setdefault(str(d.get("backend")), {})[size] = d
    return {b: [by[s] for s in sorted(by)] for b, by in sorted(newest.items())}


def _build(d: Mapping[str, Any]) -> str:
    b = d.get("hnsw_build")
    if not isinstance(b, Mapping):
        return "-"
    return f"{num(b.get('maintenance_work_mem_mb'))} / {num(b.get('parallel_workers'))}"


def growth_section(items: Sequence[tuple[Path, dict[str, Any]]]) -> list[str]:
    """Per backend with two sizes or more: how p50/p95 grow with the store size."""
    lines: list[str] = []
    for backend, runs in newest_by_size(items).items():
        if len(runs) < 2:
            continue
        builds = any(isinstance(d.get("hnsw_build"), Mapping) for d in runs)
        loads = any(get(d, "bulk_load", "rows_per_s") is not None for d in runs)
        head = ["memories", "owners", "p50 ms", "p95 ms", "p50 growth vs previous size",
                "HNSW build s"]
        head += ["build (mem MB / workers)"] * builds + ["bulk load rows/s"] * loads
        rows: list[list[Any]] = []
        points: list[tuple[float, float]] = []
        prev: tuple[float, float | None] | None = None
        for d in runs:
            size = float(d["total_memories"])
            p50 = positive(get(d, "search", "p50_ms"))
            growth = "-"
            if prev is not None and prev[1] is not None and p50 is not None:
                growth = f"x{p50 / prev[1]:.2f} per {factor(size / prev[0])}x"
            prev = (size, p50)
            if p50 is not None:
                points.append((size, p50))
            row = [f"{size:,.0f}", num(d.get("owners")), num(get(d, "search", "p50_ms")),
                   num(get(d, "search", "p95_ms")), growth, num(d.get("hnsw_build_s"))]
            row += [_build(d)] * builds
            row += [num(get(d, "bulk_load", "rows_per_s"), ",.0f")] * loads
            rows.append([*row, yes_no(d.get("explain_uses_vector_index"))])
        lines += [f"### How cost grows with size: `{backend}`", "",
                  "The newest result of each size; growth is p50 over the previous size's "
                  "p50, for the size step given. Last column: the plan of the vector "
                  "candidate query uses the HNSW index (EXPLAIN).", ""]
        lines += table([*head, "uses vector index"], rows)
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
             "Synthetic memories (`python -m benchmarks search-latency`); query embedding "
             "excluded.", ""]
    store = any(get(d, "store_path", "ops_per_s") is not None for _, d in items)
    rows = [[d.get("backend"), d.get("total_memories"), d.get("owners"),
             num(get(d, "search", "p50_ms")), num(get(d, "search", "p95_ms")),
             *[num(get(d, "store_path", "ops_per_s"))] * store, machine(d),
             f"`{command(d)}`"]
            for _, d in sorted(items, key=lambda x: (x[1].get("backend", ""),
                                                     x[1].get("total_memories", 0)))]
    lines += table(["backend", "memories", "owners", "p50 ms", "p95 ms",
                     *["store path ops/s"] * store, "machine", "command"], rows)
    lines += growth_section(items)
    for path, d in items:
        pairs = d.get("counts_first_pairs")
        if isinstance(pairs, Mapping):
            ratio = pairs.get("ratio_one_round_trip_to_counts_first") or {}
            lines += [f"PostgreSQL, {num(d.get('total_memories'), ',.0f')} memories: each "
                      "query searched both ways in alternating pairs, counts and candidates "
                      "in one round trip (the store's default) against counts first: p50 "
                      f"{num(get(pairs, 'one_round_trip', 'p50_ms'), '.2f')} against "
                      f"{num(get(pairs, 'counts_first', 'p50_ms'), '.2f')} ms, per-query "
                      f"ratio p50 {num(ratio.get('p50'), '.2f')} and p95 "
                      f"{num(ratio.get('p95'), '.2f')}, load "
                      f"{num((get(pairs, 'load_average', 'before') or [None])[0])} "
                      f"(`{path.name}`).", ""]
    if plot:
        lines += [f"![latency by store size]({plot})", ""]
    return lines


def _on_engines(d: Mapping[str, Any]) -> str:
    n = engines(d)
    return "" if n is None else f" on {n} engines (`embedding_engines`)"


def concurrency_section(items: Sequence[tuple[Path, dict[str, Any]]], plot: str | None
                        ) -> list[str]:
    lines = ["## Write throughput by concurrency", ""]
    rows = [[d.get("backend"), d.get("placement"), d.get("writers"), d.get("tasks"),
             d.get("ops_per_s"), d.get("latency", {}).get("p50_ms"), machine(d),
             f"`{command(d)}`"] for _, d in items]
    lines += table(["backend", "placement", "writers", "tasks", "ops/s", "p50 ms", "machine",
                     "command"], rows)
    for path, d in items:
        r = d.get("rounds")
        if not isinstance(r, Mapping):
            continue
        lines += [f"One owner, {num(d.get('writers'))} writers against one, and against the "
                  f"same writers without their L2 stores, embedding with "
                  f"`{d.get('embedding_model')}`{_on_engines(d)}, on fresh owners in "
                  f"alternating order (`{path.name}`):", ""]
        lines += table(["round", "one writer ops/s", "writers ops/s", "ratio",
                        "L1 p95 ms", "L1 p95 ms without L2", "ratio", "load"],
                       [[i + 1, num(get(g, "one_writer", "ops_per_s")),
                         num(get(g, "writers", "ops_per_s")), num(g.get("throughput_ratio")),
                         num(get(g, "writers", "l1", "p95_ms")),
                         num(get(g, "writers_l1_only", "l1", "p95_ms")),
                         num(g.get("l1_p95_ratio")), num((g.get("load") or [None])[0])]
                        for i, g in enumerate(r.get("per_round") or [])])
        t = r.get("targets") or {}
        lines += [f"Medians: throughput {num(r.get('throughput_ratio_median'))}x one "
                  f"writer's (target at least {num(t.get('throughput_ratio_at_least'))}x: "
                  f"{'met' if t.get('throughput_met') else 'not met'}); L1 write p95 "
                  f"{num(r.get('l1_p95_ratio_median'))}x its p95 without L2 writes (target "
                  f"at most {num(t.get('l1_p95_ratio_at_most'))}x: "
                  f"{'met' if t.get('l1_p95_met') else 'not met'}).", ""]
    if plot:
        lines += [f"![throughput by concurrency]({plot})", ""]
    return lines


#: MADial rows, in the order shown.
MADIAL_ROWS = (("hybrid_default", "hybrid"), ("vector_only", "vector only"),
               ("keyword_only_weights", "keyword-only weights"), ("keyword_mode", "no embedder"),
               ("bm25", "BM25"))


def madial_section(path: Path, d: Mapping[str, Any]) -> list[str]:
    """MADial-Bench: gold recall@5 per language, model and row, with the paired
    difference of the hybrid minus each single signal."""
    rows = []
    for lang, per_model in d["languages"].items():
        for model, r in per_model.items():
            if model == "data":
                continue
            v = r["variants"]
            cells = []
            for key, _ in MADIAL_ROWS:
                m = v.get(key, {}).get("gold@5")
                cells.append("" if m is None else
                             f"{m['mean']:.3f} [{m['ci95_lo']:.2f}, {m['ci95_hi']:.2f}]")
            diffs = r.get("gold@5_differences", {})
            worst = min((x["mean"] for x in diffs.values()), default=None)
            best = r.get("in_sample_best")
            rows.append([lang, model, *cells, "" if worst is None else f"{worst:+.3f}",
                         "" if best is None else f"{best['gold@5']:.3f} ({_weights(best)})"])
    return ["## Retrieval quality on MADial-Bench", "",
            f"From `{path.name}` (`{command(d)}`), backend {d['backend']}: gold recall@5 "
            "(the first relevant memory in the top 5) with bootstrap 95% intervals, "
            "per language and local model; the last column is the smallest paired "
            "difference of the hybrid minus the best single signal. \"Ceiling\" is the "
            "best gold recall@5 of any fixed weights on the grid, chosen on these same "
            "dialogues (optimistic: an upper bound for what re-weighting these signals "
            "could reach here).", "",
            *table(["lang", "model", *[label for _, label in MADIAL_ROWS],
                    "hybrid minus best single", "ceiling (weights v/k/t@half-life)"],
                   rows), "", *paired_lines(d)]


def _weights(best: Mapping[str, Any]) -> str:
    w = best["weights"]
    return f"{w['vector']:g}/{w['keyword']:g}/{w['time']:g}@{w['half_life_days']:g}d"


def overlap_section(items: Sequence[tuple[Path, dict[str, Any]]]) -> list[str]:
    """``search-overlap``: what a search waits beyond its query's embedding, reading its
    keyword candidates meanwhile or after; each kept run, by the model's threads."""
    lines = ["## A search's wait beyond its query's embedding", ""]
    if not items:
        return [*lines, "No search-overlap results yet: run `python -m benchmarks "
                "search-overlap --json`.", ""]
    lines += ["LoCoMo's questions on PostgreSQL, each three times in alternating order: the "
              "query's embedding alone, a search that reads its keyword candidates while "
              "the query is embedded, and one that reads them after it. The phases of the "
              "overlapped search: from its call until the model starts, the model inside "
              "the search (against the embedding p50 alone), and from the query's vector "
              "to the hits (- in runs from before the phases were recorded).", ""]
    # the machine records the threads; the first runs recorded them beside it
    rows = [[get(d, "machine", "omp_num_threads") or d.get("omp_num_threads") or "default",
             num(get(d, "latency", "embedding", "p50_ms"), ".2f"),
             num(get(d, "beyond_embedding_p50_ms", "overlapped"), ".2f"),
             num(get(d, "beyond_embedding_p50_ms", "after"), ".2f"),
             num(d.get("paired_ratio_overlapped_over_after_median"), ".3f"),
             " / ".join(num(get(d, "phases", "overlapped", phase, "p50_ms"), ".2f")
                        for phase in ("before_model", "model", "after_model")),
             f"{num(d.get('searches_with_other_hits'))} of {num(d.get('searches'))}",
             f"{get(d, 'machine', 'load_average')} / {d.get('load_average_after')}",
             f"`{path.name}`"] for path, d in items]
    return [*lines, *table(["model threads (OMP_NUM_THREADS)", "embedding p50 ms",
                            "overlapped: beyond it, p50 ms", "after: beyond it, p50 ms",
                            "median pair ratio",
                            "overlapped: before the model / the model / after it, p50 ms",
                            "other hits", "load start / end", "file"],
                           rows), ""]
