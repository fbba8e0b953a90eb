"""The PNG plots of BENCHMARKS.md (matplotlib, headless). Each returns the file it wrote,
or ``None`` when matplotlib is missing or there is nothing to plot."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .locomo import CATEGORIES
from .report_format import engines

LABELS = {"hybrid_default": "hybrid (default weights)", "vector_only": "vector only",
          "keyword_only_weights": "keyword weights", "keyword_mode": "keyword mode",
          "bm25": "BM25"}


def available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": 10, "figure.dpi": 110})
    return plt


def _save(fig: Any, out: Path) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out)
    fig.clf()
    import matplotlib.pyplot as plt

    plt.close(fig)
    return out


def recall_by_category(d: Mapping[str, Any], out: Path) -> Path | None:
    if not available():
        return None
    plt = _plt()
    variants = d["corpora"][d["headline_corpus"]]["variants"]
    groups = ["overall", *CATEGORIES.values()]
    names = [k for k in LABELS if k in variants]
    fig, ax = plt.subplots(figsize=(9, 4.2))
    width = 0.8 / len(names)
    for i, name in enumerate(names):
        v = variants[name]
        stats = [v["overall"] if g == "overall" else v["by_category"].get(g) for g in groups]
        mean = [100 * s["recall@10"]["mean"] if s else 0 for s in stats]
        lo = [100 * (s["recall@10"]["mean"] - s["recall@10"]["ci95_lo"]) if s else 0
              for s in stats]
        hi = [100 * (s["recall@10"]["ci95_hi"] - s["recall@10"]["mean"]) if s else 0
              for s in stats]
        xs = [j + (i - (len(names) - 1) / 2) * width for j in range(len(groups))]
        ax.bar(xs, mean, width, yerr=[lo, hi], capsize=2, label=LABELS[name])
    counts = [d["data"]["questions_used"]] + [
        d["data"]["questions_by_category"].get(c, 0) for c in CATEGORIES.values()]
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([f"{g}\n(n={n})" for g, n in zip(groups, counts, strict=True)])
    ax.set_ylabel("recall@10 (%)")
    ax.set_ylim(0, 100)
    ax.set_title("LoCoMo turn-level recall@10 by question category (95% bootstrap CI)")
    ax.legend(ncol=3, fontsize=8, loc="upper left")
    ax.grid(axis="y", alpha=0.3)
    return _save(fig, out)


def mem0_latency(d: Mapping[str, Any], out: Path) -> Path | None:
    if not available() or "latency" not in d:
        return None
    plt = _plt()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(9, 3.6),
                                 gridspec_kw={"width_ratios": [2.2, 1]})
    lat = d["latency"]
    kinds = ["system", "end_to_end"]
    for i, (who, label) in enumerate((("ours", "dream-memory"), ("mem0", "mem0"))):
        xs = [j * 2.4 + k + i * 0.4 for j in range(len(kinds)) for k in (0, 1)]
        ys = [lat[kind][who][p] for kind in kinds for p in ("p50_ms", "p95_ms")]
        a1.bar(xs, ys, 0.4, label=label)
    a1.set_xticks([j * 2.4 + k + 0.2 for j in range(len(kinds)) for k in (0, 1)])
    a1.set_xticklabels([f"{kind.replace('_', '-')}\n{p}" for kind in kinds
                        for p in ("p50", "p95")])
    a1.set_ylabel("search latency (ms)")
    a1.set_title("Search latency, same queries")
    a1.legend(fontsize=8)
    a1.grid(axis="y", alpha=0.3)
    r = d["recall@10"]
    means = [100 * r["ours"]["mean"], 100 * r["mem0"]["mean"]]
    errs = [[100 * (r[k]["mean"] - r[k]["ci95_lo"]) for k in ("ours", "mem0")],
            [100 * (r[k]["ci95_hi"] - r[k]["mean"]) for k in ("ours", "mem0")]]
    a2.bar([0, 1], means, 0.6, yerr=errs, capsize=3, color=["C0", "C1"])
    a2.set_xticks([0, 1])
    a2.set_xticklabels(["dream-memory", "mem0"])
    a2.set_ylim(0, 100)
    a2.set_ylabel("recall@10 (%)")
    a2.set_title("LoCoMo recall@10")
    a2.grid(axis="y", alpha=0.3)
    return _save(fig, out)


def latency_by_size(items: Sequence[Mapping[str, Any]], out: Path) -> Path | None:
    if not available() or not items:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4))
    for backend in sorted({str(d.get("backend")) for d in items}):
        pts = sorted((d["total_memories"], d["search"]["p50_ms"], d["search"]["p95_ms"])
                     for d in items if str(d.get("backend")) == backend)
        xs = [p[0] for p in pts]
        ax.plot(xs, [p[1] for p in pts], "o-", label=f"{backend} p50")
        ax.plot(xs, [p[2] for p in pts], "s--", label=f"{backend} p95")
    ax.set_xscale("log")
    ax.set_ylim(bottom=0)
    ax.set_xlabel("memories in the store")
    ax.set_ylabel("search latency (ms)")
    ax.set_title("Hybrid search latency by store size (query embedding excluded)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")
    return _save(fig, out)


def _series(d: Mapping[str, Any]) -> str:
    """A concurrency run's line: backend and placement, and the model (with its engines
    where the run set them) when each store was embedded."""
    label = f"{d.get('backend')}, {d.get('placement')}"
    model = d.get("embedding_model")
    if model:
        n = engines(d)
        label += f", {str(model).removeprefix('local:')}"
        label += "" if n is None else f", {n} engines"
    return label


def _points(d: Mapping[str, Any]) -> list[tuple[float, float]]:
    """(writers, ops/s) of a concurrency run: with rounds, the medians of one writer and of
    the writers; else its one load."""
    rounds = (d.get("rounds") or {}).get("per_round") or []
    if rounds:
        one = statistics.median(g["one_writer"]["ops_per_s"] for g in rounds)
        many = statistics.median(g["writers"]["ops_per_s"] for g in rounds)
        return [(1, one), (d["writers"], many)]
    return [] if d.get("ops_per_s") is None else [(d["writers"], d["ops_per_s"])]


def throughput(items: Sequence[Mapping[str, Any]], out: Path) -> Path | None:
    if not available() or not items:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4))
    series: dict[str, list[tuple[float, float]]] = {}
    for d in items:
        series.setdefault(_series(d), []).extend(_points(d))
    for label in sorted(series):
        pts = sorted(series[label])
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=label)
    ax.set_xlabel("concurrent writers")
    ax.set_ylabel("acknowledged writes per second")
    ax.set_title("Write throughput by concurrency (one owner)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return _save(fig, out)
