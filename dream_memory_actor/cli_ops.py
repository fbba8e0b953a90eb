"""The operator's subcommands of ``dream-memory``: the pending queue, snapshot, search,
system, doctor (in ``cli_doctor``) and mcp (``cli.py`` wires them in).

Each opens ``MemoryEngine.open(MemorySettings())`` in this process, does one thing
and closes it; ``pending`` and ``snapshot`` go through a running memory system
instead when one is named (``--system``, ``DREAM_MEMORY_SYSTEM``; see ``cli_route``).
Errors of the memory (bad owner id, unknown pending item, a backend that is
down, no such system running) are printed as one line on stderr with exit status 1.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import importlib
import importlib.util
import inspect
import json
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from . import cli_route
from .cli_doctor import EXTRAS, Check, doctor
from .config import MemorySettings
from .errors import DreamMemoryError

__all__ = ["EXTRAS", "Check", "add_parsers", "run", "run_mcp"]


def _default_by() -> str:
    try:
        return getpass.getuser()[:64] or "cli"
    except Exception:  # no user name in some containers
        return "cli"


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``pending``, ``snapshot``, ``search``, ``doctor`` and ``mcp`` to ``sub``."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print JSON instead of text")
    owner = argparse.ArgumentParser(add_help=False)
    owner.add_argument("--owner", required=True, help="the owner (user) id")
    route = cli_route.route_options()

    pending = sub.add_parser("pending", help="work the human-in-the-loop queue")
    actions = pending.add_subparsers(dest="pending_action", required=True)
    actions.add_parser("list", parents=[common, owner, route], help="list the pending items")
    for name, text in (("confirm", "write a pending item"), ("reject", "drop a pending item")):
        p = actions.add_parser(name, parents=[common, owner, route], help=text)
        p.add_argument("--id", required=True, dest="item_id", help="the pending item id")
        p.add_argument("--by", default=_default_by(),
                       help="who decides (default: the login name)")
        if name == "confirm":
            p.add_argument("--edit", default=None,
                           help="write this text instead (the content, or a status value)")

    sub.add_parser("snapshot", parents=[common, owner, route],
                   help="print an owner's rules, facts, status and pending items")
    search = sub.add_parser("search", parents=[common, owner],
                            help="search an owner's memories")
    search.add_argument("query")
    search.add_argument("--limit", type=int, default=10)

    doctor = sub.add_parser("doctor", parents=[common],
                            help="check the installation and the configuration")
    doctor.add_argument("--skip", action="append", default=[],
                        choices=("packages", "ray", "backend", "redis", "embedder", "llm"),
                        help="leave out one check (repeatable)")

    system = sub.add_parser("system", help="start, check or stop the memory system on a "
                                           "running Ray cluster")
    system.add_argument("system_action", choices=("start", "status", "stop"))
    system.add_argument("--name", default="default", help="the system's name (default: default)")
    system.add_argument("--ray-address", default="auto",
                        help="the cluster to join (default: auto, the one of this node)")

    from . import cli_owner

    cli_owner.add_parsers(sub, common, _default_by())

    mcp = sub.add_parser("mcp", help="run the MCP server (the arguments after it are its own; "
                                     "see dream-memory mcp --help)", add_help=False)
    mcp.add_argument("mcp_args", nargs=argparse.REMAINDER)


def run(args: argparse.Namespace) -> int | None:
    """Run the subcommand in ``args``; ``None`` if it is not one of this module's."""
    handlers: dict[str, Callable[[argparse.Namespace], int]] = {
        "pending": _pending, "snapshot": _snapshot, "search": _search, "doctor": _doctor,
        "mcp": _mcp, "system": _system,
    }
    from . import cli_owner

    handler = handlers.get(args.command)
    try:
        if handler is None:
            return cli_owner.run(args, _emit, _with_engine)
        return handler(args)
    except DreamMemoryError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def _emit(args: argparse.Namespace, data: Any, text: str) -> None:
    if getattr(args, "json", False):
        json.dump(data, sys.stdout, indent=2, sort_keys=True, default=str)
        sys.stdout.write("\n")
    else:
        print(text)


def _with_engine(fn: Callable[[Any], Awaitable[Any]]) -> Any:
    from .engine import MemoryEngine

    async def go() -> Any:
        engine = await MemoryEngine.open(MemorySettings())
        try:
            return await fn(engine)
        finally:
            await engine.close()

    return asyncio.run(go())


# -- pending -----------------------------------------------------------------------


def _pending(args: argparse.Namespace) -> int:
    from .extraction.service import ExtractionService

    owner = args.owner

    async def go(engine: Any) -> Any:
        # The decisions need no extractor; the rule-based one is never called here.
        from .extraction.rules import RuleBasedExtractor

        service = ExtractionService(engine, engine.structured, RuleBasedExtractor(),
                                    engine.settings)
        if args.pending_action == "list":
            return await service.pending(owner)
        if args.pending_action == "confirm":
            return await service.confirm(owner, args.item_id, by=args.by,
                                         edited_content=args.edit)
        return await service.reject(owner, args.item_id, by=args.by)

    result = cli_route.pending(args) if args.system else _with_engine(go)
    if args.pending_action == "list":
        items = list(result)
        lines = [f"{len(items)} pending item(s) for {owner}"]
        for p in items:
            expires = f", expires {p.expires_at:%Y-%m-%d %H:%M}" if p.expires_at else ""
            lines.append(f"  {p.id}  {p.describe()}{expires}")
            if p.evidence:
                lines.append(f"      evidence: {p.evidence!r}")
        _emit(args, [p.model_dump(mode="json") for p in items], "\n".join(lines))
        return 0
    entry = result.entry
    how = "" if result.applied else " (decided before; nothing changed)"
    text = f"{entry.action} {entry.pending_id} by {entry.by}{how}: {entry.item.describe()}"
    if entry.action == "confirmed" and entry.written is not None:
        text += f"\n  written: {entry.written}"
    if result.memory_id:
        text += f"\n  memory id: {result.memory_id}"
    _emit(args, result.model_dump(mode="json"), text)
    return 0


# -- snapshot and search ---------------------------------------------------------------


def _snapshot(args: argparse.Namespace) -> int:
    snap = (cli_route.owner_handle(args).snapshot() if args.system
            else _with_engine(lambda engine: engine.snapshot(args.owner)))
    prompt = snap.to_prompt().strip() or "(no rules, facts or status)"
    text = f"owner {args.owner}, version {snap.version}\n{prompt}"
    if snap.pending:
        text += f"\n{len(snap.pending)} pending item(s):"
        text += "".join(f"\n  {p.id}  {p.describe()}" for p in snap.pending)
    _emit(args, snap.model_dump(mode="json"), text)
    return 0


def _search(args: argparse.Namespace) -> int:
    hits = _with_engine(lambda engine: engine.search(args.owner, args.query, limit=args.limit))
    lines = [f"{len(hits)} hit(s) for {args.query!r}"]
    for h in hits:
        vec = "n/a" if h.vector_score is None else f"{h.vector_score:.3f}"
        lines.append(f"  {h.score:.3f}  {h.memory.content}")
        lines.append(f"         id {h.memory.id}; vector {vec}, keyword "
                     f"{h.keyword_score:.2f}, time {h.time_score:.2f}")
    _emit(args, [h.model_dump(mode="json") for h in hits], "\n".join(lines))
    return 0


# -- system ----------------------------------------------------------------------------


def _system(args: argparse.Namespace) -> int:
    """``start`` is idempotent (a running system is left alone), for deployment scripts."""
    from .runtime import MemorySystem, RuntimeUnavailable

    name, address = args.name, args.ray_address
    try:
        system = MemorySystem.connect(name, ray_address=address)
    except RuntimeUnavailable:
        if args.system_action != "start":
            print(f"memory system {name!r} is not running")
            return 0 if args.system_action == "stop" else 1
        MemorySystem.start(name=name, ray_address=address)  # detached: outlives this process
        print(f"memory system {name!r} started")
        return 0
    if args.system_action == "stop":
        system.shutdown()
        print(f"memory system {name!r} stopped")
    else:
        print(f"memory system {name!r} is running")
    return 0


# -- mcp -------------------------------------------------------------------------------


def _mcp(args: argparse.Namespace) -> int:
    return run_mcp([a for a in args.mcp_args if a != "--"])


def run_mcp(argv: list[str]) -> int:
    """``dream_memory_actor.mcp.main(argv)``, or a clear message when it is not installed."""
    main: Any = None
    if importlib.util.find_spec("dream_memory_actor.mcp") is not None:
        mod = importlib.import_module("dream_memory_actor.mcp")
        main = getattr(mod, "main", None)
        if not callable(main):
            try:
                main = importlib.import_module("dream_memory_actor.mcp.main").main
            except (ModuleNotFoundError, AttributeError):
                main = None
    if main is None:
        print("error: the MCP server is not part of this installation "
              "(no dream_memory_actor.mcp.main); install 'dream-memory-actor[mcp]' "
              "of a version that ships it", file=sys.stderr)
        return 1
    result = main(argv) if inspect.signature(main).parameters else main()
    return int(result or 0)


def _doctor(args: argparse.Namespace) -> int:
    ok, data, text = doctor(args.skip)
    _emit(args, data, text)
    return 0 if ok else 1
