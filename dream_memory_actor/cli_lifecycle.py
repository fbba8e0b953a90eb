"""``dream-memory supersede`` and ``dream-memory history``: correcting rules and facts, and
reading what the memory believed before.

``supersede --owner O --id ID --content TEXT`` replaces the current rule or fact ID
(the old one is kept in its history, with ``--by`` and ``--reason``); ``history
--owner O`` prints the chain of versions of ``--id ID``, the kept values of
``--status KEY``, or the rules, facts and status held at ``--as-of TIME`` (ISO 8601;
UTC when it has no offset). Like the other commands they open the configured memory
in this process (``DREAM_MEMORY_*`` settings), or go through a running memory
system (``--system``). Errors are one line on stderr with exit status 1.
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime, timezone
from typing import Any

from . import cli_route
from .cli_ops import _default_by, _emit, _with_engine
from .errors import DreamMemoryError, InvalidQuery


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``supersede`` and ``history`` to ``sub``."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print JSON instead of text")
    common.add_argument("--owner", required=True, help="the owner (user) id")
    route = cli_route.route_options()

    sup = sub.add_parser("supersede", parents=[common, route],
                         help="replace a rule or fact, keeping the old one in its history")
    sup.add_argument("--id", required=True, dest="item_id", help="the current rule or fact id")
    sup.add_argument("--content", required=True, help="the new text")
    sup.add_argument("--by", default=_default_by(), help="who does it (default: login name)")
    sup.add_argument("--reason", default=None, help="why (kept in the history)")
    sup.add_argument("--op-id", default=None,
                     help="an operation id: running the command again applies it once")

    hist = sub.add_parser("history", parents=[common, route],
                          help="the versions of a rule or fact, a status key's values, or "
                               "what was held at a past time")
    what = hist.add_mutually_exclusive_group(required=True)
    what.add_argument("--id", dest="item_id", help="a rule or fact id (any of its versions)")
    what.add_argument("--status", dest="status_key", help="a status key")
    what.add_argument("--as-of", dest="as_of", help="a time, ISO 8601 (UTC without offset)")


def run(args: argparse.Namespace) -> int | None:
    """Run ``supersede`` or ``history``; ``None`` for another command."""
    handler = {"supersede": _supersede, "history": _history}.get(args.command)
    if handler is None:
        return None
    try:
        return handler(args)
    except DreamMemoryError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def parse_time(text: str) -> datetime:
    """An ISO 8601 time; UTC when it names no offset."""
    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidQuery(f"--as-of must be an ISO 8601 time, got {text!r}") from None
    return t if t.tzinfo is not None else t.replace(tzinfo=timezone.utc)


def _supersede(args: argparse.Namespace) -> int:
    if args.system:
        item = cli_route.owner_handle(args).supersede(
            args.item_id, args.content, by=args.by, reason=args.reason, op_id=args.op_id)
    else:
        item = _with_engine(lambda e: e.supersede(args.owner, args.item_id, args.content,
                                                  by=args.by, reason=args.reason,
                                                  op_id=args.op_id))
    _emit(args, item.model_dump(mode="json"),
          f"{args.item_id} superseded by {item.id}: {item.content}")
    return 0


def _history(args: argparse.Namespace) -> int:
    handle = cli_route.owner_handle(args) if args.system else None
    if args.as_of is not None:
        return _as_of(args, handle, parse_time(args.as_of))
    if args.status_key is not None:
        changes = (handle.status_history(args.status_key) if handle is not None else
                   _with_engine(lambda e: e.status_history(args.owner, args.status_key)))
        lines = [f"{len(changes)} value(s) of {args.status_key} for {args.owner}"]
        lines += [f"  {c.at:%Y-%m-%d %H:%M:%S}  "
                  f"{'(deleted)' if c.value is None else c.value}" for c in changes]
        _emit(args, [c.model_dump(mode="json") for c in changes], "\n".join(lines))
        return 0
    chain = (handle.history(args.item_id) if handle is not None else
             _with_engine(lambda e: e.history(args.owner, args.item_id)))
    lines = [f"{chain.kind} {args.item_id}: {len(chain.versions)} version(s), oldest first"]
    for v in chain.versions:
        if v.valid_to is None:
            lines.append(f"  {v.id}  current since {v.created_at:%Y-%m-%d %H:%M:%S}: "
                         f"{v.content}")
        else:
            why = f" ({v.reason})" if v.reason else ""
            lines.append(f"  {v.id}  until {v.valid_to:%Y-%m-%d %H:%M:%S}, superseded by "
                         f"{v.superseded_by} ({v.by}){why}: {v.content}")
    _emit(args, chain.model_dump(mode="json"), "\n".join(lines))
    return 0


def _as_of(args: argparse.Namespace, handle: Any, at: datetime) -> int:
    snap = (handle.snapshot_as_of(at) if handle is not None else
            _with_engine(lambda e: e.snapshot(args.owner, as_of=at)))
    _emit(args, snap.model_dump(mode="json"),
          f"owner {args.owner} as of {at.isoformat()}\n{snap.to_prompt()}")
    return 0
