"""The README's table of measured figures, written from the kept benchmark results.

The table sits in README.md between ``<!-- figures:start -->`` and
``<!-- figures:end -->``; ``python -m benchmarks report`` rewrites what is between
them from the same JSON as BENCHMARKS.md, and a test checks the README holds
exactly what this module produces, so no figure there is typed by hand. Each row
takes every run of its benchmark that fits the row: a range where runs differ.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .report_agents import agents_rows
from .report_format import command, get, pct, positive
from .report_ingest import ingest_rows, ingest_targets
from .report_search import newest_by_size

START, END = "<!-- figures:start -->", "<!-- figures:end -->"
Results = Mapping[str, Sequence[tuple[Path, dict[str, Any]]]]
Row = tuple[str, str, str]


def ms(x: Any) -> str:
    """Milliseconds, two decimals below 10, one above."""
    v = float(x)
    return f"{v:.2f}" if v < 10 else f"{v:.1f}"


def spread(values: Sequence[float], fmt: Callable[[float], str] = ms) -> str:
    """One value, or ``lo-hi`` over several (each formatted, equal ends shown once)."""
    shown = [fmt(v) for v in sorted(values)]
    return shown[0] if shown[0] == shown[-1] else f"{shown[0]}-{shown[-1]}"


def ratio(x: float) -> str:
    return f"{x:.2f}"


def size_label(n: float) -> str:
    for unit, div in (("M", 1_000_000), ("k", 1_000)):
        if n >= div and n % div == 0:
            return f"{n / div:g}{unit}"
    return f"{n:,.0f}"


def pattern(items: Sequence[Mapping[str, Any]], flag: str, symbol: str,
            *more: tuple[str, str]) -> str:
    """The runs' commands with each flag's value replaced by its symbol, each shown once."""
    seen: list[str] = []
    for d in items:
        c = command(d)
        for f, sym in ((flag, symbol), *more):
            c = re.sub(rf"{re.escape(f)} \S+", f"{f} {sym}", c)
        if c not in seen:
            seen.append(c)
    return "; ".join(f"`{c}`" for c in seen)


def _pg_one_owner(results: Results) -> list[Row]:
    runs = [d for _, d in results.get("search-latency", [])
            if d.get("backend") == "postgres" and d.get("owners") == 1
            and positive(get(d, "search", "p95_ms")) is not None]
    sizes = sorted({float(d["total_memories"]) for d in runs})
    if not sizes:
        return []
    by = [[d for d in runs if float(d["total_memories"]) == s] for s in sizes]
    p95 = " / ".join(spread([d["search"]["p95_ms"] for d in g]) for g in by)
    p50 = " / ".join(spread([d["search"]["p50_ms"] for d in g]) for g in by)
    n = ", ".join(str(len(g)) for g in by)
    label = " / ".join(size_label(s) for s in sizes)
    return [(f"hybrid search, PostgreSQL, one owner of {label} memories",
             f"p95 {p95} ms, p50 {p50} ms ({n} runs)", pattern(runs, "--per-owner", "N"))]


def _pg_many_owners(results: Results) -> list[Row]:
    runs = [d for _, d in results.get("search-latency", [])
            if d.get("backend") == "postgres" and (d.get("owners") or 0) > 1
            and positive(get(d, "search", "p50_ms")) is not None]
    if not runs:
        return []
    d = max(runs, key=lambda r: float(r["total_memories"]))  # the newest of the largest
    scan = get(d, "chosen_scans", "vector")
    extra = [f"HNSW build {d['hnsw_build_s']:,.0f} s"] if d.get("hnsw_build_s") else []
    if get(d, "bulk_load", "rows_per_s"):
        extra.append(f"load {d['bulk_load']['rows_per_s']:,.0f} rows/s")
    figure = (f"p50 {ms(d['search']['p50_ms'])} ms, p95 {ms(d['search']['p95_ms'])} ms"
              + (f" (vector candidates: {scan})" if scan else "")
              + ("; " + ", ".join(extra) if extra else ""))
    return [(f"same, {size_label(float(d['total_memories']))} memories: {d['owners']} owners "
             f"of {size_label(float(d['per_owner']))} in one table", figure,
             f"`{command(d)}`")]


def _redis(results: Results) -> list[Row]:
    by = newest_by_size([(p, d) for p, d in results.get("search-latency", [])
                         if d.get("owners") == 1])
    parts, used = [], []
    for backend, label in (("redis", "no search module"), ("redis-stack", "Redis Stack")):
        runs = [d for d in by.get(backend, []) if get(d, "search", "p95_ms") is not None]
        if runs:
            used += runs
            parts.append((" / ".join(size_label(float(d["total_memories"])) for d in runs),
                          " / ".join(ms(d["search"]["p95_ms"]) for d in runs), label))
    if not parts:
        return []
    sizes = parts[0][0] if len({p[0] for p in parts}) == 1 else "various"
    figure = "p95 " + ", ".join(f"{p95} ms ({label})" for _, p95, label in parts)
    return [(f"same on Redis, one owner of {sizes} memories", figure,
             pattern(used, "--per-owner", "N", ("--redis-url", "URL")))]


#: The local model of the README's and the demo's settings.
DEFAULT_MODEL = "multilingual-e5-small"


def _retrieval(results: Results) -> list[Row]:
    runs = results.get("retrieval", [])
    if not runs:
        return []
    engine = [r for r in runs if r[1].get("ingest") == "engine"] or runs
    # the row is about the model the README and the demo use; the others are in BENCHMARKS.md
    default = [r for r in engine if get(r[1], "embedding", "model") == DEFAULT_MODEL]
    d = (default or engine)[-1][1]
    head = d["headline"]
    names = (("hybrid_default", "hybrid"), ("bm25", "BM25"),
             ("keyword_only_weights", "keyword-only weights"), ("vector_only", "vector only"))
    recall = ", ".join(f"{label} {pct(head[k]['recall@10'])}" for k, label in names if k in head)
    p50 = get(d, "corpora", d["headline_corpus"], "search_latency", "hybrid_default", "p50_ms")
    model = get(d, "embedding", "model")
    return [(f"LoCoMo ({d['data']['conversations']} conversations) turn recall@10"
             + (f", {model}" if model else ""),
             recall + (f"; hybrid search p50 {ms(p50)} ms" if p50 is not None else ""),
             f"`{command(d)}`")]


def _madial(results: Results) -> list[Row]:
    runs = results.get("retrieval-madial", [])
    if not runs:
        return []
    d = runs[-1][1]
    parts = []
    for lang, per_model in d["languages"].items():
        for model, r in per_model.items():
            h = r.get("headline", {}) if model != "data" else {}
            if "hybrid_default" in h:
                parts.append(f"{lang} {model} {h['hybrid_default']['gold@5']:.2f} "
                             f"(vector only {h['vector_only']['gold@5']:.2f}, "
                             f"BM25 {h['bm25']['gold@5']:.2f})")
    return [("MADial-Bench gold recall@5, hybrid", "; ".join(parts), f"`{command(d)}`")]


def _mem0(results: Results) -> list[Row]:
    # the turns alone on both sides: runs with a context (``--context``) are not the same
    # comparison
    runs = [d for _, d in results.get("compare-mem0", [])
            if "latency" in d and d.get("context", "none") == "none"]
    if not runs:
        return []
    last, sys_ = runs[-1], [d["latency"]["system"] for d in runs]
    e2e = [d["latency"]["end_to_end"] for d in runs]
    e2e_ratio = spread([e["p50_ratio_ours_over_mem0"] for e in e2e], ratio)
    figure = (f"recall@10 {pct(last['recall@10']['ours']['mean'])} vs "
              f"{pct(last['recall@10']['mem0']['mean'])}; search p50 "
              f"{spread([s['ours']['p50_ms'] for s in sys_])} vs "
              f"{spread([s['mem0']['p50_ms'] for s in sys_])} ms: "
              + ", ".join(f"{s['p50_ratio_ours_over_mem0']:.2f}x" for s in sys_)
              + f" in {len(runs)} runs; p95 "
              f"{spread([s['p95_ratio_ours_over_mem0'] for s in sys_], ratio)}x; with query "
              f"embedding (same model) {e2e_ratio}x")
    many = [d for _, d in results.get("compare-mem0", [])
            if d.get("ingest") == "store_many" and d.get("ingest_rate_ratio_ours_over_mem0")]
    if many:
        figure += ("; ingest, store_many with the embeddings cached, "
                   + ", ".join(f"{d['ingest_rate_ratio_ours_over_mem0']:.2f}x"
                               for d in many)
                   + " mem0's add(infer=False) rate")
    dflt = [get(d, "mem0_default_hnsw", "system_latency", "p50_ms") for d in runs]
    if all(x is not None for x in dflt):
        figure += f"; mem0 with the server's default HNSW settings p50 {spread(dflt)} ms"
    version = get(last, "mem0", "version")
    return [(f"against mem0 {version}, same embedder and database", figure,
             pattern(runs, "--seed", "S"))]


def _concurrency(results: Results) -> list[Row]:
    newest: dict[tuple[Any, Any], dict[str, Any]] = {}
    with_model = None
    for _, d in results.get("concurrency", []):
        if d.get("backend") == "postgres" and d.get("embedding_model"):
            with_model = d  # the same writers, each store embedded: a row of its own
        elif d.get("backend") == "postgres":
            newest[(d.get("writers"), d.get("placement"))] = d
    rows = []
    for writers in sorted({w for w, _ in newest}, key=lambda w: -(w or 0))[:1]:
        runs = [newest[k] for k in sorted(newest, key=lambda k: str(k[1]), reverse=True)
                if k[0] == writers]
        checks = ", ".join(f"{sum(int(d.get(k) or 0) for d in runs)} {label}" for k, label in (
            ("lost", "lost"), ("duplicates", "duplicates"), ("double_applied", "double-applied")))
        rates = " / ".join(f"{d['ops_per_s']:.0f}" for d in runs)
        places = " / ".join(str(d.get("placement")) for d in runs)
        rows.append((f"{writers} concurrent writers on one owner",
                     f"{checks}; {rates} writes/s on PostgreSQL ({places})",
                     pattern(runs, "--placement", "P")))
    if with_model is not None:
        d = with_model
        tput = get(d, "rounds", "throughput_ratio_median")
        rows.append((f"{d.get('writers')} concurrent writers on one owner, each store "
                     f"embedded ({d.get('embedding_model')})",
                     f"{d.get('lost')} lost, {d.get('double_applied')} double-applied; "
                     f"{d['ops_per_s']:.0f} writes/s ({d.get('placement')})"
                     + ("" if tput is None else f"; {tput}x one writer's throughput"),
                     f"`{d.get('command')}`"))
    return rows


def _overhead(results: Results) -> list[Row]:
    runs = [d for _, d in results.get("actor-overhead", [])
            if get(d, "ratios", "snapshot_vs_bare_sync") is not None]
    if not runs:
        return []
    parts = []
    for placement in ("sharded", "dedicated"):
        r = [d["ratios"]["snapshot_vs_bare_sync"] for d in runs if d.get("placement") == placement]
        if r:
            runs_n = f"{len(r)} run" + "s" * (len(r) != 1)
            parts.append(f"{statistics.median(r):.2f}x ({placement}; {spread(r, ratio)} "
                         f"in {runs_n})")
    rounds = sorted({int(d["rounds"]) for d in runs if d.get("rounds")})
    arg = [d["ratios"]["bare_sync_arg_vs_bare_sync"] for d in runs
           if get(d, "ratios", "bare_sync_arg_vs_bare_sync") is not None]
    figure = " and ".join(parts) + " a no-op call on a plain Ray actor"
    if rounds:
        figure += f", each run the median of {'/'.join(map(str, rounds))} paired rounds"
    if arg:
        figure += f"; the same no-op with one argument: {spread(arg, ratio)}x"
    return [("snapshot read through the actors (median of runs)", figure,
             pattern(runs, "--placement", "P"))]


def _footprint(results: Results) -> list[Row]:
    runs = results.get("footprint", [])
    sharded = [d for _, d in runs if get(d, "sharded", "bytes_per_live_owner")]
    dedicated = [d for _, d in runs if get(d, "dedicated", "bytes_per_live_owner")]
    if not sharded:
        return []
    d, s = sharded[-1], sharded[-1]["sharded"]
    kb = s["bytes_per_live_owner"] / 1024
    figure = (f"{s['owners_touched']:,} owners on one node, ~{kb:.0f} KB each "
              f"({s['holders_rss_mb']:.0f} MB in {s['live_actors']} hosts)")
    if dedicated:
        per = dedicated[-1]["dedicated"]["bytes_per_live_owner"] / 1024 / 1024
        figure += f"; dedicated {per:.0f} MB an owner"
    return [("live owners, sharded placement", figure, f"`{command(d)}`")]


def _cold_start(results: Results) -> list[Row]:
    runs = results.get("cold-start", [])
    if not runs:
        return []
    d = runs[-1][1]
    s, x = get(d, "sharded", "cold_read", "p50_ms"), get(d, "dedicated", "cold_read", "p50_ms")
    parts = ([f"p50 {ms(s)} ms sharded"] if s is not None else [])
    parts += [f"{x / 1000:.2f} s dedicated (a process start)"] if x is not None else []
    return [("first access to a passivated owner", ", ".join(parts), f"`{command(d)}`")] \
        if parts else []


def _extraction(results: Results) -> list[Row]:
    runs = [d for _, d in results.get("extraction", []) if get(d, "pool", "candidates_per_s")]
    if not runs:
        return []
    d = runs[-1]
    share = get(d, "pool", "share", "our_code")
    figure = f"{d['pool']['candidates_per_s']:,.0f} candidates/s"
    if share is not None:
        figure += f", our code {100 * share:.2f}% of the time"
    return [(f"extraction pool, {d['delay_ms']:g} ms scripted LLM", figure, f"`{command(d)}`")]


ROWS = (_pg_one_owner, _pg_many_owners, _redis, _retrieval, _madial, _mem0, _concurrency,
        agents_rows, _overhead, _footprint, _cold_start, _extraction, ingest_rows)


def targets(results: Results) -> list[str]:
    """The targets the newest results record, each said met or not met."""
    out = []
    for placement in ("sharded", "dedicated"):
        runs = [d for _, d in results.get("actor-overhead", []) if d.get("placement") == placement
                and get(d, "ratios", "snapshot_vs_bare_sync") is not None]
        if runs:
            goal = max(float(d.get("target_snapshot_vs_bare") or 0.8) for d in runs)
            mid = statistics.median(d["ratios"]["snapshot_vs_bare_sync"] for d in runs)
            out.append(f"snapshot read >= {goal:g}x a plain Ray call ({placement}): "
                       f"{'met' if mid >= goal else 'not met'}")
    mem0 = [d for _, d in results.get("compare-mem0", []) if isinstance(d.get("targets"), dict)]
    names = {"recall@10_at_least_mem0": "recall@10 at least mem0's",
             "latency_p50_at_most_half_of_mem0_system": "search p50 at most half of mem0's "
                                                        "(memory systems alone)",
             "latency_p50_at_most_half_of_mem0_end_to_end": "search p50 at most half of "
                                                            "mem0's (with query embedding)",
             "latency_p95_at_most_0.7_of_mem0_system": "search p95 at most 0.7x mem0's "
                                                       "(memory systems alone)",
             "end_to_end_p50_at_most_embedding_p50_plus_2_ms": "search p50 with the query "
                                                               "embedding at most the "
                                                               "embedding's + 2 ms",
             "ingest_at_least_twice_mem0": "store_many ingest at least 2x mem0's "
                                           "add(infer=False)",
             "ingest_at_least_1000_per_s": "store_many ingest at least 1,000 memories/s"}
    for key, label in names.items():
        # the ingest targets are store_many's (``--ingest store_many``)
        got = [d["targets"][key] for d in mem0 if key in d["targets"]
               and (not key.startswith("ingest") or d.get("ingest") == "store_many")]
        if got:
            met = sum(bool(g) for g in got)
            out.append(f"{label}: met in {met} of {len(got)} runs")
    return out + retrieval_targets(results) + ingest_targets(results)


def retrieval_targets(results: Results) -> list[str]:
    """The retrieval targets, for the default model: met or not, with the best any fixed
    weights reach on the same questions (the ceiling of these signals)."""
    out = []
    runs = [d for _, d in results.get("retrieval", [])
            if get(d, "embedding", "model") == DEFAULT_MODEL
            and get(d, "targets", "hybrid_recall@10") is not None]
    if runs:
        t = runs[-1]["targets"]["hybrid_recall@10"]
        best = t.get("in_sample_best")
        out.append(f"LoCoMo hybrid recall@10 >= {pct(t['target'])} ({DEFAULT_MODEL}): "
                   f"{'met' if t['met'] else 'not met'} ({pct(t['hybrid'])}"
                   + ("" if best is None else f"; best fixed weights {pct(best)}") + ")")
    madial = [d for _, d in results.get("retrieval-madial", [])
              if DEFAULT_MODEL in d.get("targets", {})]
    if madial:
        for lang, t in sorted(madial[-1]["targets"][DEFAULT_MODEL].items()):
            best = t.get("in_sample_best_gold@5")
            out.append(f"MADial {lang} gold recall@5 >= {t['target']:.2f} ({DEFAULT_MODEL}): "
                       f"{'met' if t['met'] else 'not met'} ({t['hybrid_gold@5']:.3f}"
                       + ("" if best is None else f"; best fixed weights {best:.3f}") + ")")
    return out


def figures_block(results: Results) -> list[str]:
    """The lines between the README's markers (the markers excluded)."""
    rows = [row for fn in ROWS for row in fn(results)]
    files = sum(len(v) for v in results.values())
    cpus = sorted({str(get(d, "machine", "cpus")) for v in results.values() for _, d in v
                   if get(d, "machine", "cpus") is not None})
    lines = ["<!-- written by `python -m benchmarks report`; edits here are overwritten -->",
             "", "| what | figure | command |", "|---|---|---|",
             *(f"| {w} | {f} | {c} |" for w, f, c in rows), "",
             f"From {files} result files in `docs/bench/results`, run on machines with "
             f"{' or '.join(cpus) or '?'} CPUs; each file records its machine."]
    goals = targets(results)
    return [*lines, "", "Targets: " + "; ".join(goals) + "."] if goals else lines


def between_markers(text: str) -> str | None:
    """What lies between the markers, or ``None`` when they are missing."""
    i, j = text.find(START), text.find(END)
    return None if i < 0 or j < i else text[i + len(START):j]


def with_figures(text: str, block: Sequence[str]) -> str:
    """``text`` with the part between the markers replaced by ``block``."""
    if between_markers(text) is None:
        raise ValueError(f"README has no {START} ... {END} markers")
    i, j = text.index(START), text.index(END)
    return text[:i + len(START)] + "\n" + "\n".join(block) + "\n" + text[j:]
