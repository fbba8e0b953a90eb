"""The subcommands that read and write one owner's memory: store, list, add-rule,
add-fact, set-status, delete and audit.

Each goes through a running memory system when one is named (``--system``,
``DREAM_MEMORY_SYSTEM``) and otherwise opens the configured storage in this
process. An id may be given by its start, as long as only one of the owner's ids
starts so.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from .. import validation as check
from ..engine import operations as ops
from ..engine.doors import MemoryBackend
from ..errors import InvalidBatch, InvalidMetadata, MemoryNotFound
from ..models import MemoryPendingItem
from ..storage.ops import (
    AddFact,
    AddRule,
    DeleteStatus,
    L1Op,
    RemoveFact,
    RemoveRule,
    SetStatus,
    added,
)
from ..validation import l1 as check_l1
from .common import (
    current_id,
    emit,
    item_kinds,
    json_value,
    memory_options,
    owner_call,
    read_text,
    resolve,
    with_memory,
)

if TYPE_CHECKING:
    from ..models import StoreResult
    from .common import Subparsers


def register(sub: Subparsers) -> None:
    """Add store, list, add-rule, add-fact, set-status, delete and audit to ``sub``."""
    parents = memory_options()
    p = sub.add_parser("store", parents=parents, help="store a semantic memory",
                       description="Store a semantic memory for the owner; a near-duplicate "
                                   "of an existing one is merged into it, a new value of "
                                   "one supersedes it.")
    p.add_argument("content", help="the text to remember")
    p.add_argument("--metadata", default=None, metavar="JSON",
                   help='a JSON object kept with the memory, e.g. {"agent": "deploy"}')
    p.add_argument("--context", action="append", default=None, metavar="TEXT",
                   help="what helps find it later without being part of it, searched and "
                        "embedded with it: give it once for each part (the date, the turn "
                        "it answers), each a line of the memory's context")
    p.set_defaults(run=_store)

    p = sub.add_parser("list", parents=parents, help="list an owner's semantic memories",
                       description="List the owner's semantic memories, newest first.")
    p.add_argument("--limit", type=int, default=20, help="how many (default 20)")
    p.add_argument("--offset", type=int, default=0, help="how many to skip (default 0)")
    p.add_argument("--filter", default=None, metavar="JSON",
                   help='keep memories whose metadata has these values, e.g. {"agent": "deploy"}')
    p.set_defaults(run=_list)

    p = sub.add_parser("store-many", parents=parents, help="store a batch of semantic memories",
                       description="Store the memories of FILE (- for stdin), one per line: a "
                                   "text, or a JSON object {\"content\": ..., \"metadata\": "
                                   "..., \"context\": ...}; each as store would, embedded in "
                                   "one call, written in one transaction.")
    p.add_argument("file", metavar="FILE", help="the batch, one memory per line (- for stdin)")
    p.set_defaults(run=_store_many)

    p = sub.add_parser("update", parents=parents, help="change a semantic memory's text",
                       description="Change the memory's text (and, with --metadata, its "
                                   "metadata); the previous version stays in its history.")
    p.add_argument("--id", required=True, dest="item_id", help="the memory id, or its start")
    p.add_argument("--content", required=True, help="the new text")
    p.add_argument("--metadata", default=None, metavar="JSON", help="new metadata (JSON object)")
    p.add_argument("--context", action="append", default=None, metavar="TEXT",
                   help="a new context, given once for each line, as store's (default: the "
                        "memory keeps its own)")
    p.set_defaults(run=_update)

    p = sub.add_parser("memory-history", parents=parents,
                       help="the versions of a semantic memory",
                       description="The versions of a memory's chain of updates and "
                                   "supersessions, oldest first.")
    p.add_argument("--id", required=True, dest="item_id", help="the memory id, or its start")
    p.set_defaults(run=_memory_history)

    for name, kind in (("add-rule", "rule"), ("add-fact", "fact")):
        example = ("In code review, look at security first" if kind == "rule"
                   else "The user is a Java developer")
        p = sub.add_parser(name, parents=parents, help=f"add a {kind}",
                           description=f"Add a {kind} to the owner's memory, for example "
                                       f"{example!r}. The same text twice is kept once.")
        p.add_argument("content", help=f"the {kind}")
        p.add_argument("--source", default="user", help="where it comes from (default user)")
        p.set_defaults(run=_add, kind=kind)

    p = sub.add_parser("set-status", parents=parents, help="set a status entry",
                       description="Set a current-status entry, such as "
                                   "current_project=dream-saas.")
    p.add_argument("key", help="letters, digits and _ . -, starting with a letter or _")
    p.add_argument("value")
    p.add_argument("--ttl", type=float, default=None, metavar="SECONDS",
                   help="the entry disappears by itself after this many seconds")
    p.set_defaults(run=_set_status)

    p = sub.add_parser("delete", parents=parents,
                       help="delete a memory, a rule, a fact or a status entry",
                       description="Delete the semantic memory, rule or fact with this id "
                                   "(or the start of it), or with --status a status entry.")
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("item_id", nargs="?", metavar="ID",
                        help="the id, or its start (unique within the owner)")
    target.add_argument("--status", metavar="KEY", help="delete this status entry instead")
    p.set_defaults(run=_delete)

    p = sub.add_parser("audit", parents=parents, help="show the decisions on pending items",
                       description="Who confirmed or rejected which pending item, and when, "
                                   "and who undid which confirmed proposal, newest first.")
    p.add_argument("--limit", type=int, default=20, help="how many (default 20)")
    p.set_defaults(run=_audit)


def _lines(given: list[str] | None) -> str | None:
    """The context of ``--context`` given once or more: a line each."""
    return None if given is None else "\n".join(given)


def _store(args: argparse.Namespace) -> int:
    meta = json_value(args.metadata, "--metadata", InvalidMetadata)
    result = owner_call(args, ops.store, args.content, meta, context=_lines(args.context))
    emit(args, result.model_dump(mode="json"), store_summary(result))
    return 0


def _store_many(args: argparse.Namespace) -> int:
    text = read_text(args.file, "batch")
    items = [json_value(line, f"line {n}", InvalidBatch) if line.lstrip().startswith("{")
             else line for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    results = owner_call(args, ops.store_many, items)
    emit(args, [r.model_dump(mode="json") for r in results],
         "\n".join(store_summary(r) for r in results))
    return 0


def _update(args: argparse.Namespace) -> int:
    meta = json_value(args.metadata, "--metadata", InvalidMetadata)

    async def go(m: MemoryBackend) -> Any:
        owner = check.owner_id(args.owner)
        memory_id = await current_id(m, owner, args.item_id, ("memory",))
        return await m.call(ops.update, owner, memory_id, args.content, meta,
                            context=_lines(args.context))

    new = with_memory(args, go)
    emit(args, new.model_dump(mode="json"), f"updated {new.id}: {new.content}")
    return 0


def _memory_history(args: argparse.Namespace) -> int:
    async def go(m: MemoryBackend) -> Any:
        owner = check.owner_id(args.owner)
        memory_id = await current_id(m, owner, args.item_id, ("memory",))
        return await m.call(ops.memory_history, owner, memory_id)

    versions = with_memory(args, go)
    lines = [f"{len(versions)} version(s), oldest first"]
    for v in versions:
        until = "current" if v.valid_to is None else f"until {v.valid_to:%Y-%m-%d %H:%M}"
        lines.append(f"  {v.memory_id}  {v.valid_from:%Y-%m-%d %H:%M}, {until}  {v.content}")
    emit(args, [v.model_dump(mode="json") for v in versions], "\n".join(lines))
    return 0


def store_summary(result: StoreResult) -> str:
    """One line saying what a store did and why."""
    why = f" ({result.reason})" if result.reason else ""
    if result.merged:
        return f"merged into {result.memory.id}{why}"
    if result.superseded:
        return f"stored {result.memory.id}, superseding {result.related}{why}"
    if result.related is not None:
        return f"stored {result.memory.id}, kept apart from {result.related}{why}"
    return f"stored {result.memory.id}"


def _list(args: argparse.Namespace) -> int:
    async def go(m: MemoryBackend) -> Any:
        return await m.call(ops.list_memories, check.owner_id(args.owner), args.limit,
                            args.offset, filter=json_value(args.filter, "--filter"))

    memories = with_memory(args, go)
    lines = [f"{len(memories)} memory(ies) of {args.owner}"]
    lines += [f"  {x.id}  {x.updated_at:%Y-%m-%d %H:%M}  {x.content}" for x in memories]
    emit(args, [x.model_dump(mode="json") for x in memories], "\n".join(lines))
    return 0


def _apply(args: argparse.Namespace, ops: list[L1Op]) -> Any:
    async def go(m: MemoryBackend) -> Any:
        s = m.settings
        return await m.apply(check.owner_id(args.owner),
                             check_l1.ops(ops, s.max_content_bytes, s.limits))

    return with_memory(args, go)


def _add(args: argparse.Namespace) -> int:
    op = (AddRule if args.kind == "rule" else AddFact)(
        args.content, args.source, review_updates=True)  # checked with the operations
    snap = _apply(args, [op])
    item = added(snap, op)
    text = check.content(args.content, 1 << 62)
    if isinstance(item, MemoryPendingItem):
        data = {args.kind: None, "pending": item.model_dump(mode="json"),
                "version": snap.version}
        emit(args, data, f"queued for review as pending {item.id} of {args.owner} "
                         f"({item.evidence}): {text}")
    else:
        data = {args.kind: item.model_dump(mode="json"), "version": snap.version}
        emit(args, data, f"{args.kind} {item.id} of {args.owner}, "
                         f"version {snap.version}: {text}")
    return 0


def _set_status(args: argparse.Namespace) -> int:
    snap = _apply(args, [SetStatus(args.key, args.value, args.ttl)])
    until = snap.status_expires_at.get(args.key)
    text = f"{args.key}={args.value} for {args.owner}, version {snap.version}"
    if until is not None:
        text += f" (until {until:%Y-%m-%d %H:%M} UTC)"
    emit(args, {"version": snap.version, "status": dict(snap.status)}, text)
    return 0


def _delete(args: argparse.Namespace) -> int:
    if args.status is not None:
        snap = _apply(args, [DeleteStatus(args.status)])
        emit(args, {"deleted": "status", "key": args.status, "version": snap.version},
             f"deleted status {args.status} of {args.owner}")
        return 0

    async def go(m: MemoryBackend) -> dict[str, Any]:
        owner = check.owner_id(args.owner)
        kinds = await item_kinds(m, owner)
        found = resolve(args.item_id, kinds, "item")
        if found is None:
            raise MemoryNotFound(f"{owner} has no memory, rule or fact whose id starts with "
                                 f"{args.item_id!r}")
        kind = kinds[found]
        if kind == "memory":
            await m.call(ops.delete, owner, found)
        else:
            await m.apply(owner, [RemoveRule(found) if kind == "rule" else RemoveFact(found)])
        return {"deleted": kind, "id": found}

    done = with_memory(args, go)
    emit(args, done, f"deleted {done['deleted']} {done['id']} of {args.owner}")
    return 0


def _audit(args: argparse.Namespace) -> int:
    entries = owner_call(args, ops.audit, args.limit)
    lines = [f"{len(entries)} decision(s) for {args.owner}"]
    lines += [f"  {e.at:%Y-%m-%d %H:%M}  {e.action} by {e.by}: {e.item.describe()}"
              + ("" if e.action != "undone" else
                 f" ({e.restored} memory(ies) back; queued again as {e.requeued})")
              for e in entries]
    emit(args, [e.model_dump(mode="json") for e in entries], "\n".join(lines))
    return 0
