"""The ``dream-memory`` program: the command-line door and the other doors' servers.

The commands on the memory are this package's modules (``memory``, ``lifecycle``,
``ops``, ``owner``): each adds its subcommands with ``register(sub)`` and gives each
a handler (``set_defaults(run=...)``). ``mcp`` and ``review`` run the MCP server and
the review pages, doors of their own. This module is where the program puts the
doors together, so it is the one module that imports more than one door: none of
them imports another (what they share lies below them, in ``engine`` and
``process``). The MCP server is imported when its command runs, since its extra may
not be installed; the review pages' command line needs no extra.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ..errors import DreamMemoryError
from ..process import quiet_platform_warnings, version
from ..review import cli as review
from . import lifecycle, memory, ops, owner

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
    for module in (memory, lifecycle, ops):
        module.register(sub)
    mcp = sub.add_parser("mcp", help="run the MCP server (the arguments after it are its own; "
                                     "see dream-memory mcp --help)", add_help=False)
    mcp.add_argument("mcp_args", nargs=argparse.REMAINDER)
    mcp.set_defaults(run=lambda args: run_mcp([a for a in args.mcp_args if a != "--"]))
    owner.register(sub)
    review.register(sub)
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
    if argv[:1] == ["mcp"]:  # everything after "mcp" is the MCP server's own options
        return run_mcp(argv[1:])
    args = build_parser().parse_args(argv)
    if args.global_system is not None and getattr(args, "system", None) is None:
        args.system = args.global_system
    return ops.run(args)


def run_mcp(argv: list[str]) -> int:
    """``dream_memory_actor.mcp.main(argv)``, or a clear message when the ``mcp`` extra
    is not installed."""
    try:
        from ..mcp import main
    except DreamMemoryError as exc:  # the mcp extra is not installed
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except ImportError as exc:  # a trimmed installation without the server
        print(f"error: the MCP server is not part of this installation ({exc})",
              file=sys.stderr)
        return 1
    return main(argv, prog="dream-memory mcp")
