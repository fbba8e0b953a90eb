"""The ``dream-memory`` command line.

``pending list|confirm|reject``, ``snapshot`` and ``search`` open the configured
memory in this process (``MemorySettings()``: ``DREAM_MEMORY_*`` variables and the
YAML file of ``DREAM_MEMORY_CONFIG_FILE``); ``doctor`` checks the installation and
the configuration and says what is missing; ``system start|status|stop`` manages
the detached memory system on a running Ray cluster; ``mcp`` runs the MCP server;
``demo`` runs the multi-agent demo on the embedded default.
Output is for people unless ``--json`` is given.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from .review import cli as review_cli


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dream-memory", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run the multi-agent demo on the embedded default")
    demo.set_defaults(run_demo=True)
    from . import cli_ops

    cli_ops.add_parsers(sub)
    review_cli.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["mcp"]:  # everything after "mcp" is the MCP server's own options
        from . import cli_ops

        return cli_ops.run_mcp(argv[1:])
    args = build_parser().parse_args(argv)
    if args.command == "demo":
        from agents_demo.__main__ import main as demo_main

        return demo_main()
    if args.command == "review":
        return review_cli.run(args)
    from . import cli_ops

    handled: Any = cli_ops.run(args)
    return 2 if handled is None else int(handled)


if __name__ == "__main__":
    raise SystemExit(main())
