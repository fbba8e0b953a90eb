"""``python -m benchmarks NAME [options] --json``: run one benchmark, print one JSON object.

The object gets ``finished_at`` (UTC, seconds) unless the benchmark set it: the
report orders the kept results by it. ``python -m benchmarks report`` writes
BENCHMARKS.md, its plots and the README's figures table from the kept results.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import sys
from collections.abc import Sequence
from datetime import datetime, timezone

from .stats import json_ready

#: Benchmark name -> module of this package.
BENCHMARKS = {
    "search-latency": "search_latency",
    "concurrency": "concurrency",
    "agents": "agents",
    "actor-overhead": "actor_overhead",
    "footprint": "footprint",
    "cold-start": "cold_start",
    "retrieval": "retrieval",
    "compare-mem0": "compare_mem0",
    "report": "report",
    "extraction": "extraction",
    "batch-ingest": "batch_ingest",
    "locomo-ingest": "locomo_ingest",
    "multi-node": "multi_node",
    "capacity": "capacity",
    "embedding-speed": "embedding_speed",
    "dedup": "dedup",
    "context-latency": "context_latency",
    "search-overlap": "search_overlap",
    "consolidation": "consolidation",
    "langgraph-conformance": "langgraph_conformance",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    names = parser.add_subparsers(dest="name", required=True)
    for name, module in BENCHMARKS.items():
        try:
            mod = importlib.import_module(f"benchmarks.{module}")
        except ModuleNotFoundError as exc:  # a benchmark whose requirements are missing
            if exc.name != f"benchmarks.{module}":
                raise
            continue
        p = names.add_parser(name, help=(mod.__doc__ or "").strip().splitlines()[0])
        p.add_argument("--json", action="store_true", help="print one JSON object (default)")
        mod.add_arguments(p)
        p.set_defaults(module=mod)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else list(argv))
    result = asyncio.run(args.module.run(args))
    if isinstance(result, dict):
        result.setdefault("finished_at", datetime.now(timezone.utc).isoformat(
            timespec="seconds"))
    json.dump(json_ready(result), sys.stdout, indent=2, sort_keys=True, default=str,
              allow_nan=False)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
