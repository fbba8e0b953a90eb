"""``dream-memory forget|export|import``: an owner's data as a whole.

Like the other operator commands they open the configured storage in this process
(``DREAM_MEMORY_*`` settings), or go through a running memory system when one is
named (``--system``, ``DREAM_MEMORY_SYSTEM``), so the owner's actor applies them.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from . import cli_route


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser],
                common: argparse.ArgumentParser, by_default: str) -> None:
    """Add ``forget``, ``export`` and ``import`` to ``sub``."""
    route = cli_route.route_options()
    owner = argparse.ArgumentParser(add_help=False)
    owner.add_argument("--owner", required=True, help="the owner (user) id")

    forget = sub.add_parser(
        "forget", parents=[common, owner, route],
        help="erase everything of an owner (rules, facts, status, pending items, memories, "
             "chat windows, audit trail); leaves a tombstone without the owner's id")
    forget.add_argument("--yes", action="store_true",
                        help="really erase (required: there is no undo)")
    forget.add_argument("--by", default=by_default,
                        help="who asks for the erasure (default: the login name)")

    export = sub.add_parser("export", parents=[common, owner, route],
                            help="write an owner's data to a JSON Lines file")
    export.add_argument("--output", required=True, help="the file to write ('-': stdout)")

    imp = sub.add_parser("import", parents=[common, route],
                         help="read an export file into its owner, which must be empty")
    imp.add_argument("--input", required=True, help="the file to read ('-': stdin)")


def run(args: argparse.Namespace, emit: Any, with_engine: Any) -> int | None:
    """Run ``forget``/``export``/``import``; ``None`` if ``args`` is another command."""
    if args.command == "forget":
        return _forget(args, emit, with_engine)
    if args.command == "export":
        return _export(args, emit, with_engine)
    if args.command == "import":
        return _import(args, emit, with_engine)
    return None


def _forget(args: argparse.Namespace, emit: Any, with_engine: Any) -> int:
    if not args.yes:
        print(f"error: forgetting {args.owner!r} erases all of its data for good; "
              "add --yes to do it", file=sys.stderr)
        return 2
    tomb = (cli_route.owner_handle(args).forget(by=args.by) if args.system
            else with_engine(lambda engine: engine.forget(args.owner, by=args.by)))
    counts = ", ".join(f"{n} {kind}" for kind, n in sorted(tomb.counts.items()))
    emit(args, tomb.model_dump(mode="json"),
         f"forgot {args.owner} ({counts}); tombstone {tomb.id}")
    return 0


def _export(args: argparse.Namespace, emit: Any, with_engine: Any) -> int:
    lines = (cli_route.owner_handle(args).export() if args.system
             else with_engine(lambda engine: engine.export(args.owner)))
    text = "".join(line + "\n" for line in lines)
    if args.output == "-":
        sys.stdout.write(text)
        return 0
    Path(args.output).write_text(text, encoding="utf-8")
    emit(args, {"owner": args.owner, "records": len(lines) - 2, "output": args.output},
         f"exported {args.owner}: {len(lines) - 2} record(s) to {args.output}")
    return 0


def _import(args: argparse.Namespace, emit: Any, with_engine: Any) -> int:
    from .portability import parse

    raw = sys.stdin.read() if args.input == "-" else Path(args.input).read_text("utf-8")
    lines = raw.splitlines()
    owner = parse(lines).owner
    if args.system:
        args.owner = owner
        counts = cli_route.owner_handle(args).import_document(lines)
    else:
        counts = with_engine(lambda engine: engine.import_document(lines))
    text = ", ".join(f"{n} {kind}" for kind, n in counts.items())
    emit(args, {"owner": owner, "counts": counts}, f"imported {owner}: {text}")
    return 0
