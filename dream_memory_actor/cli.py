"""The ``dream-memory`` command line.

``dream-memory bench NAME [options] --json`` runs one benchmark and prints one
JSON object. Each benchmark is a module of ``dream_memory_actor.bench`` with
``add_arguments(parser)`` and ``async run(args) -> dict``.

``pending list|confirm|reject``, ``snapshot`` and ``search`` open the configured
memory in this process (``MemorySettings()``: ``DREAM_MEMORY_*`` variables and the
YAML file of ``DREAM_MEMORY_CONFIG_FILE``); ``doctor`` checks the installation and
the configuration and says what is missing; ``system start|status|stop`` manages
the detached memory system on a running Ray cluster; ``mcp`` runs the MCP server.
Output is for people unless ``--json`` is given.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import sys
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

#: Benchmark name -> module under ``dream_memory_actor.bench``.
BENCHMARKS = {
    "search-latency": "search_latency",
    "concurrency": "concurrency",
    "actor-overhead": "actor_overhead",
    "footprint": "footprint",
    "cold-start": "cold_start",
    "retrieval": "retrieval",
    "compare-mem0": "compare_mem0",
    "report": "report",
    "extraction": "extraction",
}


def _bench_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    bench = sub.add_parser("bench", help="run a benchmark and print its figures as JSON")
    names = bench.add_subparsers(dest="bench_name", required=True)
    for name, module in BENCHMARKS.items():
        try:
            mod = importlib.import_module(f"dream_memory_actor.bench.{module}")
        except ModuleNotFoundError as exc:
            if exc.name != f"dream_memory_actor.bench.{module}":
                raise
            continue
        p = names.add_parser(name, help=(mod.__doc__ or "").strip().splitlines()[0])
        p.add_argument("--json", action="store_true", help="print one JSON object (default)")
        mod.add_arguments(p)
        p.set_defaults(bench_module=mod)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dream-memory", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    _bench_parser(sub)
    demo = sub.add_parser("demo", help="run the multi-agent demo on the embedded default")
    demo.set_defaults(run_demo=True)
    from . import cli_ops

    cli_ops.add_parsers(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["mcp"]:  # everything after "mcp" is the MCP server's own options
        from . import cli_ops

        return cli_ops.run_mcp(argv[1:])
    args = build_parser().parse_args(argv)
    if args.command == "bench":
        result = asyncio.run(args.bench_module.run(args))
        if isinstance(result, dict):  # orders the results when the report picks the newest
            result.setdefault("finished_at", datetime.now(timezone.utc).isoformat(
                timespec="seconds"))
        json.dump(result, sys.stdout, indent=2, sort_keys=True, default=str)
        sys.stdout.write("\n")
        return 0
    if args.command == "demo":
        from agents_demo.__main__ import main as demo_main

        return demo_main()
    from . import cli_ops

    handled: Any = cli_ops.run(args)
    return 2 if handled is None else int(handled)


if __name__ == "__main__":
    raise SystemExit(main())
