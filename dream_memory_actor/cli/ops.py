"""The operator's subcommands of ``dream-memory``: the pending queue, consolidation,
snapshot, search, system and doctor (in ``doctor``).

``pending``, ``consolidate``, ``undo-proposal``, ``snapshot`` and ``search`` go through
a running memory system when one is named (``--system``, ``DREAM_MEMORY_SYSTEM``; see
``process``) and otherwise open the configured storage in this process. Errors of the
memory (bad owner id, unknown pending item, a proposal whose memories changed, a backend
that is down, no such system running) are printed as one line on stderr with exit
status 1 (``cli.main``).
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from .. import validation as check
from ..engine import operations as ops
from ..engine.doors import MemoryBackend
from ..errors import DreamMemoryError
from ..models import MemoryPendingItem
from ..validation.l2 import metadata_filter
from .common import (
    default_by,
    emit,
    json_option,
    json_value,
    memory_options,
    owner_call,
    resolve,
    with_memory,
)
from .doctor import doctor

if TYPE_CHECKING:
    from .common import Subparsers


def register(sub: Subparsers) -> None:
    """Add ``pending``, ``consolidate``, ``undo-proposal``, ``snapshot``, ``search``,
    ``doctor`` and ``system``."""
    parents = memory_options()
    pending = sub.add_parser("pending", help="work the human-in-the-loop queue",
                             description="List, confirm or reject the items that wait for a "
                                         "person: extracted memories, and the merges, "
                                         "supersessions and expiries consolidate "
                                         "proposes (confirming one applies it).")
    actions = pending.add_subparsers(dest="pending_action", required=True)
    actions.add_parser("list", parents=parents, help="list the pending items")
    for name, text in (("confirm", "write a pending item"), ("reject", "drop a pending item")):
        p = actions.add_parser(name, parents=parents, help=text)
        p.add_argument("--id", required=True, dest="item_id",
                       help="the pending item id, or its start (unique within the owner)")
        p.add_argument("--by", default=default_by(),
                       help="who decides (default: the login name)")
        if name == "confirm":
            p.add_argument("--edit", default=None,
                           help="write this text instead (the content, a status value, or "
                                "the text a consolidation proposal keeps)")
    pending.set_defaults(run=_pending)

    p = sub.add_parser("consolidate", parents=parents,
                       help="propose merges, supersessions and expiries of an owner's "
                            "memories",
                       description="Run a consolidation pass over the owner's semantic "
                                   "memories: duplicates are proposed to be merged, outdated "
                                   "ones to be superseded by their newer version, and (with "
                                   "consolidation_expire_after_days) old ones to expire. Each "
                                   "proposal waits in the pending queue for a person (pending "
                                   "confirm, optionally with --edit, or pending reject); a "
                                   "proposal rejected before is not made again.")
    p.add_argument("--apply-all", action="store_true",
                   help="confirm every proposal at once, in the name of --by (an owner who "
                        "opted in); one whose memories changed meanwhile is refused and "
                        "stays queued")
    p.add_argument("--by", default="consolidation", metavar="NAME",
                   help="who confirms with --apply-all (default: consolidation)")
    p.set_defaults(run=_consolidate)

    p = sub.add_parser("undo-proposal", parents=parents,
                       help="reverse a confirmed consolidation proposal",
                       description="Reverse a confirmed consolidation proposal exactly: the "
                                   "memories it closed live again as they were, the memory it "
                                   "kept has its text back, and their histories are as "
                                   "before. The undo is recorded in the audit trail, and the "
                                   "proposal waits in the pending queue again (a new id) to "
                                   "be confirmed or rejected once more. Refused, with nothing "
                                   "written, when the kept memory changed since.")
    p.add_argument("pending_id", metavar="PENDING_ID",
                   help="the proposal's pending item id, or its start (as pending list and "
                        "audit show it)")
    p.add_argument("--by", default=default_by(),
                   help="who undoes it (default: the login name)")
    p.set_defaults(run=_undo_proposal)

    sub.add_parser("snapshot", parents=parents,
                   help="print an owner's rules, facts, status and pending items"
                   ).set_defaults(run=_snapshot)
    search = sub.add_parser("search", parents=parents, help="search an owner's memories")
    search.add_argument("query")
    search.add_argument("--limit", type=int, default=10, help="how many hits (default 10)")
    search.add_argument("--filter", default=None, metavar="JSON",
                        help='keep memories whose metadata has these values, e.g. '
                             '{"agent": "deploy"}')
    search.set_defaults(run=_search)

    p = sub.add_parser("doctor", parents=[json_option()],
                       help="check the installation and the configuration")
    p.add_argument("--skip", action="append", default=[],
                   choices=("packages", "ray", "backend", "redis", "embedder", "llm"),
                   help="leave out one check (repeatable)")
    p.set_defaults(run=_doctor)

    system = sub.add_parser("system", parents=[json_option()],
                            help="start, check or stop the memory system on a running "
                                 "Ray cluster")
    system.add_argument("system_action", choices=("start", "status", "stop"))
    system.add_argument("--name", default="default", help="the system's name (default: default)")
    system.add_argument("--ray-address", default="auto",
                        help="the cluster to join (default: auto, the one of this node)")
    system.set_defaults(run=_system)


def run(args: argparse.Namespace) -> int:
    """Run the subcommand in ``args`` (each one's parser names its handler)."""
    try:
        return int(args.run(args))
    except DreamMemoryError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


# -- pending -----------------------------------------------------------------------


def _pending(args: argparse.Namespace) -> int:
    async def go(m: MemoryBackend) -> Any:
        owner = check.owner_id(args.owner)
        items = await m.pending(owner)
        if args.pending_action == "list":
            return items
        pid = resolve(args.item_id, [p.id for p in items], "pending item") or args.item_id
        if args.pending_action == "confirm":
            return await m.call(ops.confirm, owner, pid, args.by, args.edit)
        return await m.call(ops.reject, owner, pid, args.by)

    result = with_memory(args, go)
    if args.pending_action == "list":
        items = list(result)
        lines = [f"{len(items)} pending item(s) for {args.owner}"]
        for p in items:
            expires = f", expires {p.expires_at:%Y-%m-%d %H:%M}" if p.expires_at else ""
            lines.append(f"  {p.id}  {p.describe()}{expires}")
            if p.proposal is not None:
                lines += proposal_lines(p)
            elif p.evidence:
                lines.append(f"      evidence: {p.evidence!r}")
        emit(args, [p.model_dump(mode="json") for p in items], "\n".join(lines))
        return 0
    entry = result.entry
    how = "" if result.applied else " (decided before; nothing changed)"
    text = f"{entry.action} {entry.pending_id} by {entry.by}{how}: {entry.item.describe()}"
    if entry.action == "confirmed" and entry.written:
        text += f"\n  written: {entry.written}"
    if result.memory_id:
        text += f"\n  memory id: {result.memory_id}"
    emit(args, result.model_dump(mode="json"), text)
    return 0


def proposal_lines(item: MemoryPendingItem) -> list[str]:
    """The memories a consolidation proposal changes, each as it was proposed, and what
    confirming it leaves: indented lines under the item's description."""
    prop = item.proposal
    if prop is None:
        return []
    fate = {"merge": "merged", "supersede": "superseded", "expire": "expired"}[item.kind]
    lines = [f"      {'kept' if t.id == prop.keep else fate:>10}  {t.id}  "
             f"{t.updated_at:%Y-%m-%d}  {t.content}" for t in prop.touches]
    if item.kind == "merge" and item.content is not None:  # the kept memory's text after
        lines.append(f"      {'result':>10}  {item.content}")
    return lines


# -- consolidation -------------------------------------------------------------------


def _consolidate(args: argparse.Namespace) -> int:
    report = owner_call(args, ops.consolidate, apply_all=args.apply_all, by=args.by)
    counts = ", ".join(f"{n} {kind}" for kind, n in report.counts.items())
    lines = [f"{len(report.proposals)} proposal(s) for {args.owner}: {counts}"]
    for p in report.proposals:
        lines.append(f"  {p.id}  {p.describe()}")
        lines += proposal_lines(p)
    if args.apply_all or report.applied or report.refused:  # or the owner's auto-apply
        lines.append(f"applied {report.applied}" + (
            f", refused {report.refused} (what they change changed meanwhile; they stay "
            "queued)" if report.refused else ""))
    elif report.proposals:
        lines.append(f"queued for review: dream-memory pending list --owner {args.owner}")
    emit(args, report.model_dump(mode="json"), "\n".join(lines))
    return 0


def _undo_proposal(args: argparse.Namespace) -> int:
    async def go(m: MemoryBackend) -> Any:
        owner = check.owner_id(args.owner)
        confirmed = [e.pending_id for e in await m.call(ops.audit, owner, check.MAX_SEARCH_LIMIT)
                     if e.action == "confirmed" and e.item.proposal is not None]
        pid = resolve(args.pending_id, confirmed, "proposal") or args.pending_id
        return await m.call(ops.undo_proposal, owner, pid, args.by)

    result = with_memory(args, go)
    e = result.entry
    how = "" if result.applied else f" (undone before, at {e.at:%Y-%m-%d %H:%M}; nothing changed)"
    back = (f"status {e.item.key} set again" if e.item.status_expiry
            else f"{e.restored} memory(ies) back as they were")
    emit(args, result.model_dump(mode="json"),
         f"undid proposal {e.pending_id} of {args.owner} by {e.by}{how}: {back}"
         f"\n  queued again as {e.requeued}: "
         f"dream-memory pending confirm|reject --owner {args.owner} --id {e.requeued}")
    return 0


# -- snapshot and search ---------------------------------------------------------------


def _snapshot(args: argparse.Namespace) -> int:
    snap = with_memory(args, lambda m: m.snapshot(check.owner_id(args.owner)))
    held = snap.rules or snap.facts or snap.status
    prompt = snap.to_prompt().strip() if held else "(no rules, facts or status)"
    text = f"owner {args.owner}, version {snap.version}\n{prompt}"
    if snap.pending:
        text += f"\n{len(snap.pending)} pending item(s):"
        text += "".join(f"\n  {p.id}  {p.describe()}" for p in snap.pending)
    emit(args, snap.model_dump(mode="json"), text)
    return 0


def _search(args: argparse.Namespace) -> int:
    where = metadata_filter(json_value(args.filter, "--filter"))
    hits = with_memory(args, lambda m: m.search(check.owner_ids(args.owner), args.query,
                                                check.limit(args.limit), where))
    lines = [f"{len(hits)} hit(s) for {args.query!r}"]
    for h in hits:
        vec = "n/a" if h.vector_score is None else f"{h.vector_score:.3f}"
        lines.append(f"  {h.score:.3f}  {h.memory.content}")
        lines.append(f"         id {h.memory.id}; vector {vec}, keyword "
                     f"{h.keyword_score:.2f}, time {h.time_score:.2f}")
    emit(args, [h.model_dump(mode="json") for h in hits], "\n".join(lines))
    return 0


# -- system ----------------------------------------------------------------------------


def _system(args: argparse.Namespace) -> int:
    """``start`` is idempotent (a running system is left alone), for deployment scripts."""
    from ..runtime import MemorySystem, RuntimeUnavailable

    name, address = args.name, args.ray_address

    def say(state: str, running: bool) -> None:
        emit(args, {"name": name, "state": state, "running": running},
             f"memory system {name!r} {state}")

    try:
        system = MemorySystem.connect(name, ray_address=address)
    except RuntimeUnavailable:
        if args.system_action != "start":
            say("is not running", False)
            return 0 if args.system_action == "stop" else 1
        MemorySystem.start(name=name, ray_address=address)  # detached: outlives this process
        say("started", True)
        return 0
    if args.system_action == "stop":
        system.shutdown()
        say("stopped", False)
    else:
        say("is running", True)
    return 0


def _doctor(args: argparse.Namespace) -> int:
    ok, data, text = doctor(args.skip)
    emit(args, data, text)
    return 0 if ok else 1
