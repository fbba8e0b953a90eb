"""The ``dream-memory`` command line.

Each command module listed in ``COMMAND_MODULES`` adds its subcommands with
``register(sub)`` and gives each a handler (``set_defaults(run=...)``); a new
module is one more name in that list.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import Any

from ..process import quiet_platform_warnings, version

#: The modules that add subcommands (each has ``register(sub)``), in help order,
#: relative to the package root.
COMMAND_MODULES: tuple[str, ...] = (".cli.memory", ".cli.lifecycle", ".cli.ops",
                                     ".cli.owner", ".review.cli")

DESCRIPTION = """\
Shared long-term memory for LLM agents, from the command line.

Commands on one owner's memory (--owner) open the configured storage in this
process (settings from DREAM_MEMORY_* variables and the YAML file named by
DREAM_MEMORY_CONFIG_FILE), or go through a running memory system with
--system NAME. Ids may be given by their start when only one id of the owner
starts so. Every command prints text for people, or JSON with --json.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dream-memory", description=DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"dream-memory {version()}")
    # Also accepted before the command, as most tools take a global option; a command's
    # own --system, when given, wins.
    parser.add_argument("--system", dest="global_system", metavar="NAME", default=None,
                        help="go through the running memory system NAME (as each command's "
                             "--system)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name, __name__.split(".")[0]).register(sub)
    demo = sub.add_parser("demo", help="run the multi-agent demo (from a source checkout)")
    demo.set_defaults(run=_demo)
    return parser


def _demo(args: argparse.Namespace) -> int:
    try:
        from agents_demo.__main__ import main as demo_main
    except ModuleNotFoundError:
        print("error: the demo lives in the source repository (agents_demo/); run "
              "python -m agents_demo from a checkout", file=sys.stderr)
        return 1
    result: int = demo_main()
    return result


def main(argv: Sequence[str] | None = None) -> int:
    quiet_platform_warnings()
    argv = list(sys.argv[1:] if argv is None else argv)
    from . import ops

    if argv[:1] == ["mcp"]:  # everything after "mcp" is the MCP server's own options
        return ops.run_mcp(argv[1:])
    args = build_parser().parse_args(argv)
    if args.global_system is not None and getattr(args, "system", None) is None:
        args.system = args.global_system
    handled: Any = ops.run(args)
    return 2 if handled is None else int(handled)

