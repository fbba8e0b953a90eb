"""capacity: the capacity model of docs/scaling.md, computed from the kept results.

``python -m benchmarks capacity`` rewrites what docs/scaling.md holds between
``<!-- capacity:start -->`` and ``<!-- capacity:end -->``: the measured inputs (each
row names its JSON file and field) and what follows from them (each row shows its
formula). A test checks the document holds exactly what this module produces, so no
figure there is typed by hand.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .report import RESULTS, load_results
from .report_search import growth_exponent

START, END = "<!-- capacity:start -->", "<!-- capacity:end -->"
DOC = "docs/scaling.md"
GIB = 1024**3
#: The sizes the model is asked about (targets, not measurements).
OWNERS_TARGET = 1_000_000
MEMORIES_TARGET = 1_000_000_000
#: The node size the footprint benchmark reports against (its NODE_BYTES).
NODE_GIB = 24

Results = Mapping[str, Sequence[tuple[Path, dict[str, Any]]]]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--results", default=RESULTS, help="directory of JSON results")
    p.add_argument("--doc", default=DOC, help="the document whose capacity block to rewrite")


class Inputs:
    """The newest kept result of each benchmark the model reads, and their rows."""

    def __init__(self, results: Results) -> None:
        self.results = results
        self.rows: list[tuple[str, str, str]] = []  # figure, value, source

    def newest(self, name: str, **match: Any) -> tuple[Path, dict[str, Any]] | None:
        found = [(p, d) for p, d in self.results.get(name, [])
                 if all(d.get(k) == v for k, v in match.items())]
        return found[-1] if found else None

    def take(self, label: str, name: str, keys: Sequence[str], unit: str = "",
             **match: Any) -> float | None:
        got = self.newest(name, **match)
        if got is None:
            return None
        path, d = got
        value: Any = d
        for k in keys:
            value = value.get(k) if isinstance(value, dict) else None
        if not isinstance(value, (int, float)):
            return None
        self.rows.append((label, f"{_num(value)}{unit}", f"`{path.name}`: `{'.'.join(keys)}`"))
        return float(value)


def _num(x: float) -> str:
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    if abs(x) >= 100:
        return f"{x:.0f}"
    return f"{x:.3g}" if abs(x) < 10 else f"{x:.1f}"


def _search_points(results: Results, backend: str) -> list[tuple[float, float, str]]:
    """(memories of the one owner, search p50 ms, file) of each single-owner size, newest."""
    newest: dict[int, tuple[float, str]] = {}
    for path, d in results.get("search-latency", []):
        if d.get("backend") == backend and d.get("owners") == 1:
            p50 = (d.get("search") or {}).get("p50_ms")
            if isinstance(p50, (int, float)):
                newest[int(d["per_owner"])] = (float(p50), path.name)
    return [(float(n), p50, f) for n, (p50, f) in sorted(newest.items())]


def block(results: Results) -> list[str]:
    """The capacity block: measured inputs, then what follows from them."""
    i = Inputs(results)
    per_owner = i.take("memory per live owner in a shard host (sharded)", "footprint",
                       ["sharded", "bytes_per_live_owner"], " B")
    baseline = i.take("RSS of the shard hosts before any owner", "footprint",
                      ["sharded", "hosts_baseline_rss_mb"], " MB")
    dedicated = i.take("live owners on a 24 GiB node, one actor each (dedicated)",
                       "footprint", ["dedicated", "max_live_owners_on_24gb_node"])
    load_rate = i.take("owners loaded into hosts per second (64 writes in flight)",
                       "footprint", ["sharded", "owners_per_s"], "/s")
    cold = i.take("first read of a passivated owner, p50", "cold-start",
                  ["sharded", "cold_read", "p50_ms"], " ms")
    snap = i.take("snapshot read through the actor, one caller, calls/s", "actor-overhead",
                  ["snapshot", "calls_per_s"], "/s", placement="sharded", backend="postgres")
    search = i.take("search through the VectorIndex, one caller, calls/s", "actor-overhead",
                    ["search", "calls_per_s"], "/s", placement="sharded", backend="postgres")
    writes_one = i.take("writes on one owner, 32 concurrent writers", "concurrency",
                        ["ops_per_s"], "/s", placement="sharded", backend="postgres",
                        embedding_model=None)
    stores = i.take("L2 stores, one sequential writer, PostgreSQL (10k rows)",
                    "search-latency", ["store_path", "ops_per_s"], "/s",
                    backend="postgres", per_owner=10_000, owners=1)
    hnsw = i.take("HNSW build of 10k rows, PostgreSQL", "search-latency", ["hnsw_build_s"],
                  " s", backend="postgres", per_owner=10_000, owners=1)
    big = i.take("search p50, one owner of 10k rows in a table of 1M (100 owners)",
                 "search-latency", ["search", "p50_ms"], " ms", backend="postgres",
                 owners=100)
    redis_stores = i.take("L2 stores, one sequential writer, one Redis (10k rows)",
                          "search-latency", ["store_path", "ops_per_s"], "/s",
                          backend="redis", per_owner=10_000)
    extraction = i.take("extraction calls/s, pool of 2 actors, model answering in 50 ms",
                        "extraction", ["pool", "calls_per_s"], "/s")
    pool_size = i.take("extraction pool size of that run", "extraction", ["pool", "pool_size"])
    points = _search_points(results, "postgres")
    for n, p50, name in points:
        i.rows.append((f"search p50, one owner of {_num(n)} memories (PostgreSQL)",
                       f"{_num(p50)} ms", f"`{name}`: `search.p50_ms`"))
    mn = i.newest("multi-node")
    if mn is not None:
        for k, r in sorted(mn[1].get("throughput_by_workers", {}).items()):
            i.rows.append((f"fact writes/s, {k} worker(s), agents on every node (one machine)",
                           f"{_num(r['writes_per_s'])}/s",
                           f"`{mn[0].name}`: `throughput_by_workers.{k}.writes_per_s`"))

    lines = ["### Measured inputs", "",
             "| figure | value | from |", "| --- | --- | --- |"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in i.rows]
    lines += ["", "### What follows", "",
              "| quantity | value | how |", "| --- | --- | --- |"]

    def row(what: str, value: float | None, unit: str, how: str) -> None:
        if value is not None:
            lines.append(f"| {what} | {_num(value)}{unit} | {how} |")

    if per_owner:
        row("live owners per GiB of shard-host memory", GIB / per_owner, "",
            "1 GiB / memory per live owner")
        row(f"live owners on a {NODE_GIB} GiB node (sharded)", NODE_GIB * GIB / per_owner,
            "", f"{NODE_GIB} GiB / memory per live owner")
        row(f"shard-host memory for {OWNERS_TARGET:,} live owners", OWNERS_TARGET * per_owner
            / GIB, " GiB", f"{OWNERS_TARGET:,} x memory per live owner")
        if baseline is not None:
            row("of which the hosts' own baseline (per host pair)", baseline / 1024, " GiB",
                "baseline RSS, paid once per host pair, not per owner")
    if dedicated and per_owner:
        row("owners per node, sharded over dedicated", NODE_GIB * GIB / per_owner / dedicated,
            "x", "the two rows above")
    if load_rate:
        row(f"time to load {OWNERS_TARGET:,} owners into hosts (one driver)",
            OWNERS_TARGET / load_rate / 60, " min", f"{OWNERS_TARGET:,} / owners loaded per s")
    if cold is not None:
        row("a passivated owner's first read", cold, " ms", "measured (above)")
    if snap:
        row("snapshot read, time per call, one caller", 1000 / snap, " ms", "1 / calls per s")
    if search:
        row("VectorIndex replicas for a demand of 1,000 searches/s", math.ceil(1000 / search), "",
            "ceil(1,000 / search calls per s of one caller)")
    if stores:
        row(f"one sequential writer storing {MEMORIES_TARGET:,} memories",
            MEMORIES_TARGET / stores / 86400, " days", f"{MEMORIES_TARGET:,} / L2 stores per s")
    if hnsw:
        row(f"HNSW build of {MEMORIES_TARGET:,} rows in one index (linear, a lower bound)",
            hnsw * MEMORIES_TARGET / 10_000 / 3600, " h",
            f"10k-row build x {MEMORIES_TARGET:,} / 10,000 (HNSW builds grow faster)")
    slope = growth_exponent([(n, p50) for n, p50, _ in points])
    if slope is not None:
        row("search p50 growth exponent by owner size (p50 ~ size^k)", slope, "",
            "least squares over the single-owner sizes above")
    shared = i.newest("search-latency", backend="postgres", owners=100)
    alone = next(((n, p) for n, p, _ in points if n == 10_000), None)
    if big and shared is not None and alone is not None:
        rows_big = float(shared[1]["total_memories"])
        factor = big / alone[1]
        row("cost of sharing one table with 99 other owners (10k rows each)", factor, "x",
            "p50 in the 1M-row table / p50 of the owner alone")
        k = math.log(factor) / math.log(rows_big / alone[0])
        row("search p50 growth exponent by table size", k, "",
            "ln(that cost) / ln(table rows / owner rows): two points only")
        row(f"search p50 of a 10k-row owner in a {MEMORIES_TARGET:,}-row table "
            "(extrapolated)", big * (MEMORIES_TARGET / rows_big) ** k, " ms",
            f"p50 in the 1M-row table x ({MEMORIES_TARGET:,} / table rows)^k")
    if redis_stores and stores:
        row("one Redis over one PostgreSQL, sequential stores", redis_stores / stores, "x",
            "the two store rates above")
    if extraction and pool_size:
        row("extraction calls/s per pool actor (50 ms model)", extraction / pool_size, "/s",
            "pool calls per s / pool size")
    if writes_one and stores:
        row("one owner under 32 writers over one sequential L2 writer", writes_one / stores,
            "x", "the two write rates above")
    return lines


def render(text: str, lines: Sequence[str]) -> str:
    """``text`` with the block between the markers replaced by ``lines``."""
    start, end = text.find(START), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"{DOC} lost its capacity markers {START} / {END}")
    return text[:start + len(START)] + "\n" + "\n".join(lines) + "\n" + text[end:]


def current(text: str) -> str | None:
    start, end = text.find(START), text.find(END)
    if start < 0 or end < start:
        return None
    return text[start + len(START):end]


async def run(args: argparse.Namespace) -> dict[str, Any]:
    results = load_results(args.results)
    path = Path(args.doc)
    path.write_text(render(path.read_text(encoding="utf-8"), block(results)),
                    encoding="utf-8")
    return {"benchmark": "capacity-report", "written": [str(path)]}
