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
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from .. import validation as check
from ..engine import operations as ops
from ..engine.doors import MemoryBackend
from ..errors import InvalidQuery
from .common import current_id, default_by, emit, memory_options, version_id, with_memory

if TYPE_CHECKING:
    from .common import Subparsers


def register(sub: Subparsers) -> None:
    """Add ``supersede`` and ``history`` to ``sub``."""
    sup = sub.add_parser("supersede", parents=memory_options(),
                         help="replace a rule or fact, keeping the old one in its history")
    sup.add_argument("--id", required=True, dest="item_id", help="the current rule or fact id")
    sup.add_argument("--content", required=True, help="the new text")
    sup.add_argument("--by", default=default_by(), help="who does it (default: login name)")
    sup.add_argument("--reason", default=None, help="why (kept in the history)")
    sup.set_defaults(run=_supersede)

    hist = sub.add_parser("history", parents=memory_options(),
                          help="the versions of a rule or fact, a status key's values, or "
                               "what was held at a past time")
    what = hist.add_mutually_exclusive_group(required=True)
    what.add_argument("--id", dest="item_id",
                      help="a rule or fact id (any of its versions), or its start")
    what.add_argument("--status", dest="status_key", help="a status key")
    what.add_argument("--as-of", dest="as_of", help="a time, ISO 8601 (UTC without offset)")
    hist.set_defaults(run=_history)


def parse_time(text: str) -> datetime:
    """An ISO 8601 time; UTC when it names no offset."""
    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidQuery(f"--as-of must be an ISO 8601 time, got {text!r}") from None
    return t if t.tzinfo is not None else t.replace(tzinfo=timezone.utc)


def _supersede(args: argparse.Namespace) -> int:
    async def go(m: MemoryBackend) -> Any:
        owner = check.owner_id(args.owner)
        item_id = await current_id(m, owner, args.item_id)
        return await m.supersede(owner, item_id, args.content, args.by, args.reason)

    item = with_memory(args, go)
    emit(args, item.model_dump(mode="json"),
         f"{args.item_id} superseded by {item.id}: {item.content}")
    return 0


def _history(args: argparse.Namespace) -> int:
    if args.as_of is not None:
        at = parse_time(args.as_of)
        snap = with_memory(args, lambda m: m.call(ops.snapshot_as_of, args.owner, at))
        emit(args, snap.model_dump(mode="json"),
             f"owner {args.owner} as of {at.isoformat()}\n{snap.to_prompt()}")
        return 0
    if args.status_key is not None:
        changes = with_memory(args, lambda m: m.call(ops.status_history, args.owner,
                                                     args.status_key))
        lines = [f"{len(changes)} value(s) of {args.status_key} for {args.owner}"]
        lines += [f"  {c.at:%Y-%m-%d %H:%M:%S}  "
                  f"{'(deleted)' if c.value is None else c.value}" for c in changes]
        emit(args, [c.model_dump(mode="json") for c in changes], "\n".join(lines))
        return 0
    async def chain_of(m: MemoryBackend) -> Any:
        owner = check.owner_id(args.owner)
        item_id = await version_id(m, owner, args.item_id)
        return await m.call(ops.history, owner, item_id)

    chain = with_memory(args, chain_of)
    lines = [f"{chain.kind} {args.item_id}: {len(chain.versions)} version(s), oldest first"]
    for v in chain.versions:
        if v.valid_to is None:
            lines.append(f"  {v.id}  current since {v.created_at:%Y-%m-%d %H:%M:%S}: "
                         f"{v.content}")
        else:
            why = f" ({v.reason})" if v.reason else ""
            lines.append(f"  {v.id}  until {v.valid_to:%Y-%m-%d %H:%M:%S}, superseded by "
                         f"{v.superseded_by} ({v.by}){why}: {v.content}")
    emit(args, chain.model_dump(mode="json"), "\n".join(lines))
    return 0
