"""``dream-memory forget|export|import``: an owner's data as a whole.

Like the other commands on one owner they open the configured storage in this process
(``DREAM_MEMORY_*`` settings), or go through a running memory system when one is named
(``--system``, ``DREAM_MEMORY_SYSTEM``), so the owner's actor applies them.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import TYPE_CHECKING

from ..engine import operations as ops
from ..process import route_options
from .common import (
    default_by,
    emit,
    json_option,
    memory_options,
    read_text,
    with_memory,
    write_text,
)

if TYPE_CHECKING:
    from .common import Subparsers


def register(sub: Subparsers) -> None:
    """Add ``forget``, ``export`` and ``import`` to ``sub``."""
    forget = sub.add_parser(
        "forget", parents=memory_options(),
        help="erase everything of an owner (rules, facts, status, pending items, memories, "
             "chat windows, audit trail); leaves a tombstone without the owner's id")
    forget.add_argument("--yes", action="store_true",
                        help="really erase (required: there is no undo)")
    forget.add_argument("--by", default=default_by(),
                        help="who asks for the erasure (default: the login name)")
    forget.set_defaults(run=_forget)

    export = sub.add_parser("export", parents=memory_options(),
                            help="write an owner's data to a JSON Lines file")
    export.add_argument("--output", required=True, help="the file to write ('-': stdout)")
    export.set_defaults(run=_export)

    imp = sub.add_parser("import", parents=[json_option(), route_options()],
                         help="read an export file into its owner, which must be empty")
    imp.add_argument("--input", required=True, help="the file to read ('-': stdin)")
    imp.add_argument("--as", dest="as_owner", metavar="OWNER", default=None,
                     help="import as this owner instead of the document's own (a copy: "
                          "its memories get new ids, so it can live beside the original)")
    imp.set_defaults(run=_import)

    re = sub.add_parser(
        "reembed", parents=[json_option()],
        help="embed every owner's memories again with another model, in place",
        description="Record MODEL as the store's embedding model, then embed the memories "
                    "of every owner (or of each --owner) again with it, owner after owner, a "
                    "batch a write under the owner's writer. Until an owner is done, a "
                    "search finds its memories by their words only, and processes "
                    "configured with the old model are refused. After a stop, run it again "
                    "(--from the owner it stopped at). Opens the storage in this process.")
    re.add_argument("--model", required=True,
                    help="the embedding model to embed with (as the embedding_model setting)")
    re.add_argument("--owner", action="append", default=None,
                    help="only this owner (may be given more than once)")
    re.add_argument("--from", dest="start", default=None, metavar="OWNER",
                    help="begin at this owner, in sorted order (to resume)")
    re.add_argument("--yes", action="store_true",
                    help="really re-embed (required: the store changes model at once)")
    re.set_defaults(run=_reembed)


def _forget(args: argparse.Namespace) -> int:
    if not args.yes:
        print(f"error: forgetting {args.owner!r} erases all of its data for good; "
              "add --yes to do it", file=sys.stderr)
        return 2
    tomb = with_memory(args, lambda memory: memory.call(ops.forget, args.owner, by=args.by))
    counts = ", ".join(f"{n} {kind}" for kind, n in sorted(tomb.counts.items()))
    emit(args, tomb.model_dump(mode="json"),
         f"forgot {args.owner} ({counts}); tombstone {tomb.id}")
    return 0


def _export(args: argparse.Namespace) -> int:
    lines = with_memory(args, lambda memory: memory.call(ops.export, args.owner))
    text = "".join(line + "\n" for line in lines)
    if args.output == "-":
        sys.stdout.write(text)
        return 0
    write_text(args.output, text, "export file")
    emit(args, {"owner": args.owner, "records": len(lines) - 2, "output": args.output},
         f"exported {args.owner}: {len(lines) - 2} record(s) to {args.output}")
    return 0


def _import(args: argparse.Namespace) -> int:
    from ..engine.portability import parse, renamed

    raw = read_text(args.input, "export file")
    lines = raw.splitlines()
    if args.as_owner is not None:
        lines = renamed(lines, args.as_owner)
    owner = parse(lines).owner
    counts = with_memory(args, lambda memory: memory.call(ops.import_document, owner, lines))
    text = ", ".join(f"{n} {kind}" for kind, n in counts.items())
    emit(args, {"owner": owner, "counts": counts}, f"imported {owner}: {text}")
    return 0


def _reembed(args: argparse.Namespace) -> int:
    if not args.yes:
        print(f"error: re-embedding records {args.model!r} as the store's model at once and "
              "embeds every memory again; add --yes to do it", file=sys.stderr)
        return 2

    async def go() -> dict[str, int]:
        from ..config import MemorySettings
        from ..engine import MemoryEngine

        settings = MemorySettings().model_copy(update={"embedding_model": args.model,
                                                       "embedding_dim": None})
        engine = await MemoryEngine.open(settings, adopt=True)
        try:
            owners = sorted(args.owner) if args.owner else await engine.vector.owners()
            done: dict[str, int] = {}
            for owner in owners:
                if args.start is not None and owner < args.start:
                    continue
                done[owner] = await engine.reembed(owner)
                if not args.json:
                    print(f"{owner}: {done[owner]} memories", flush=True)
            return done
        finally:
            await engine.close()

    done = asyncio.run(go())
    emit(args, {"model": args.model, "owners": done},
         f"embedded {sum(done.values())} memories of {len(done)} owners again with "
         f"{args.model}")
    return 0

