"""LangGraph's own store tests, run against DreamMemoryStore and against InMemoryStore.

``python -m benchmarks langgraph-conformance --langgraph PATH --json``: PATH is a
checkout (or the git directory) of the langgraph repository. Its store test files are
copied into a temporary directory and run with pytest, once with LangGraph's
``InMemoryStore`` and once with ``DreamMemoryStore`` in place of the store each file
builds, by one swap:

* ``libs/checkpoint/tests/test_store.py`` builds ``InMemoryStore(index=...)``;
* the SQLite and PostgreSQL files build ``SqliteStore`` / ``AsyncSqliteStore`` /
  ``PostgresStore`` / ``AsyncPostgresStore`` ``.from_conn_string(conn, index=..., ttl=...)``:
  the swap keeps the ``index`` (SQLite's ``text_fields`` read as ``fields``) and drops
  what is the SQL store's own (the connection, the pool, the pipeline, the TTL
  configuration, which ``InMemoryStore`` does not take either); ``setup`` and the TTL
  sweeper are no-ops; the PostgreSQL files' ``CREATE DATABASE`` connections and the
  cursor their fixtures drop the migration table with do nothing.

Tests of the SQL backends' private helpers (their LIKE/GLOB escaping, the namespace
patterns of their SQL, their migrations) test no store, so they are left out. The
result gives, per file, how many tests each store passes, and the tests InMemoryStore
passes that DreamMemoryStore does not.

The SQL files import their stores' modules (and private helpers of them), so the
suites run with the checkout's own ``langgraph.store.sqlite`` and
``langgraph.store.postgres`` (with ``langgraph.checkpoint.postgres``) on the path,
whichever version is installed; what those modules and the test files import is in
``benchmarks/requirements.txt`` (pytest-mock, aiosqlite, sqlite-vec, psycopg).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

#: Suite -> the files it copies (repository path -> name under the suite's tests/).
SUITES = {
    "checkpoint": {
        "libs/checkpoint/tests/test_store.py": "test_store.py",
        "libs/checkpoint/tests/embed_test_utils.py": "embed_test_utils.py",
    },
    "checkpoint-sqlite": {
        "libs/checkpoint-sqlite/tests/test_store.py": "test_store.py",
        "libs/checkpoint-sqlite/tests/test_async_store.py": "test_async_store.py",
    },
    "checkpoint-postgres": {
        "libs/checkpoint-postgres/tests/test_store.py": "test_store.py",
        "libs/checkpoint-postgres/tests/test_async_store.py": "test_async_store.py",
        "libs/checkpoint-postgres/tests/embed_test_utils.py": "embed_test_utils.py",
    },
}

#: Suite -> the packages of the checkout its files import (copied, put on the path).
SOURCES = {
    "checkpoint": [],
    "checkpoint-sqlite": ["libs/checkpoint-sqlite/langgraph/store/sqlite"],
    "checkpoint-postgres": ["libs/checkpoint-postgres/langgraph/store/postgres",
                            "libs/checkpoint-postgres/langgraph/checkpoint/postgres"],
}

#: Tests of the SQL backends' private helpers: they build no store.
PRIVATE = {
    "test_escape_like_literal", "test_namespace_match_pattern", "test_nonnull_migrations",
    "test_escape_glob_literal", "test_list_namespaces_prefix_uses_indexable_condition",
    "test_get_text_at_path",
}

#: The PostgreSQL suite's conftest without its database: the names the test files
#: import from it, and its fixture of fake embeddings.
POSTGRES_CONFTEST = '''
import pytest
from tests.embed_test_utils import CharacterEmbeddings

DEFAULT_POSTGRES_URI = "postgres://postgres:postgres@localhost:5441/"
DEFAULT_URI = "postgres://postgres:postgres@localhost:5441/postgres?sslmode=disable"
VECTOR_TYPES = ["vector", "halfvec"]


@pytest.fixture
def fake_embeddings() -> CharacterEmbeddings:
    return CharacterEmbeddings(dims=500)
'''

#: The swap, loaded by each suite's root conftest (``LG_STORE``: inmemory or dream).
SWAP = '''
import contextlib
import os
import uuid

import pytest

STORE = os.environ["LG_STORE"]
BACKEND = os.environ.get("LG_BACKEND", "memory")
OPEN = []


def _settings():
    from dream_memory_actor import MemorySettings

    extra = {}
    if BACKEND == "postgres":
        extra["postgres_schema"] = "lg_" + uuid.uuid4().hex[:12]
    if BACKEND == "redis":
        extra["redis_prefix"] = "lg" + uuid.uuid4().hex[:12]
        extra["redis_url"] = os.environ["LG_REDIS_URL"]
    return MemorySettings(backend=BACKEND, embedding_model=None, **extra)


def _drop(store):
    """The keys of a Redis store's keyspace (the run leaves nothing behind)."""
    if BACKEND != "redis" or STORE != "dream":
        return
    import redis

    client = redis.Redis.from_url(os.environ["LG_REDIS_URL"])
    try:
        try:
            for name in client.execute_command("FT._LIST"):
                if name.decode().startswith(store.settings.redis_prefix + ":"):
                    client.execute_command("FT.DROPINDEX", name)
        except redis.exceptions.ResponseError:
            pass
        keys = list(client.scan_iter(match=store.settings.redis_prefix + ":*", count=1000))
        for i in range(0, len(keys), 500):
            client.delete(*keys[i:i + 500])
    finally:
        client.close()


def _index(index):
    if index is None:
        return None
    index = dict(index)
    if "text_fields" in index:
        index["fields"] = index.pop("text_fields")
    return index


if STORE == "inmemory":
    from langgraph.store.memory import InMemoryStore as Base

    def _base_args(index):
        return {"index": _index(index)}
else:
    from dream_memory_actor.integrations.langgraph import DreamMemoryStore as Base

    def _base_args(index):
        return {"settings": _settings(), "index": _index(index)}


class Swapped(Base):
    MIGRATIONS = []

    def __init__(self, *, index=None, ttl=None, **_):
        super().__init__(**_base_args(index))
        OPEN.append(self)

    def setup(self):
        return None

    def start_ttl_sweeper(self):
        return None

    def stop_ttl_sweeper(self, *a, **k):
        return True

    @contextlib.contextmanager
    def _cursor(self, *a, **k):
        yield _Connection()


class AsyncSwapped(Swapped):
    async def setup(self):
        return None

    async def start_ttl_sweeper(self):
        return None

    async def stop_ttl_sweeper(self, *a, **k):
        return True

    @contextlib.asynccontextmanager
    async def _cursor(self, *a, **k):
        yield _AsyncConnection()


class SqlStore:
    @classmethod
    @contextlib.contextmanager
    def from_conn_string(cls, conn_string, *, index=None, ttl=None, **_):
        yield Swapped(index=index, ttl=ttl)


class AsyncSqlStore:
    @classmethod
    @contextlib.asynccontextmanager
    async def from_conn_string(cls, conn_string, *, index=None, ttl=None, **_):
        yield AsyncSwapped(index=index, ttl=ttl)


class _Connection:
    def __init__(self, *a, **k):
        pass

    @classmethod
    def connect(cls, *a, **k):
        return cls()

    def execute(self, *a, **k):
        return None

    def fetchone(self):
        return None

    def fetchall(self):
        return []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class _AsyncConnection(_Connection):
    @classmethod
    async def connect(cls, *a, **k):
        return cls()

    async def execute(self, *a, **k):
        return None

    async def fetchone(self):
        return None

    async def fetchall(self):
        return []

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        return False


NAMES = {
    "InMemoryStore": Swapped, "SqliteStore": SqlStore, "PostgresStore": SqlStore,
    "AsyncSqliteStore": AsyncSqlStore, "AsyncPostgresStore": AsyncSqlStore,
    "Connection": _Connection, "AsyncConnection": _AsyncConnection,
}


def pytest_collection_modifyitems(items):
    for item in items:
        module = item.module
        for name, swap in NAMES.items():
            if name in vars(module):
                setattr(module, name, swap)


@pytest.fixture(autouse=True)
def _close_stores():
    yield
    while OPEN:
        store = OPEN.pop()
        close = getattr(store, "close", None)
        if close is not None:
            close()
        _drop(store)


def pytest_runtest_logreport(report):
    out = os.environ["LG_OUT"]
    if report.when == "call" or report.outcome != "passed":
        with open(out, "a") as f:
            f.write(json.dumps({"id": report.nodeid, "when": report.when,
                                "outcome": report.outcome}) + "\\n")


import json  # noqa: E402
'''


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--langgraph", required=True,
                   help="a checkout of the langgraph repository, or its git directory")
    p.add_argument("--backend", default="memory", choices=("memory", "postgres", "redis"),
                   help="the backend DreamMemoryStore runs on (default: memory)")
    p.add_argument("--redis-url", default=None,
                   help="with --backend redis: the server (each store a prefix of its own, "
                        "dropped after its test)")
    p.add_argument("--stores", default="inmemory,dream",
                   help="which stores to run, of inmemory,dream")
    p.add_argument("--suites", default=",".join(SUITES), help="which suites to run")
    p.add_argument("-k", dest="keyword", default=None, help="pytest -k expression")
    p.add_argument("--timeout", type=float, default=1800.0,
                   help="seconds one pytest run may take")


def _read(root: Path, path: str) -> str:
    if (root / path).is_file():
        return (root / path).read_text()
    return subprocess.run(["git", "--git-dir", str(root), "show", f"HEAD:{path}"],
                          check=True, capture_output=True, text=True).stdout


def _files(root: Path, folder: str) -> list[str]:
    """The repository paths of the files under ``folder``."""
    if (root / folder).is_dir():
        return sorted(str(f.relative_to(root)) for f in (root / folder).rglob("*")
                      if f.is_file())
    return subprocess.run(["git", "--git-dir", str(root), "ls-tree", "-r", "--name-only",
                           "HEAD", folder + "/"], check=True, capture_output=True,
                          text=True).stdout.split()


def _commit(root: Path) -> str | None:
    args = ["git", "-C", str(root)] if (root / "libs").is_dir() else ["git", "--git-dir",
                                                                      str(root)]
    done = subprocess.run([*args, "rev-parse", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() or None


def _suite_dir(work: Path, root: Path, suite: str) -> Path:
    base = work / suite
    tests = base / "tests"
    tests.mkdir(parents=True)
    (tests / "__init__.py").write_text("")
    for src, name in SUITES[suite].items():
        (tests / name).write_text(_read(root, src))
    (tests / "conftest.py").write_text(POSTGRES_CONFTEST if suite == "checkpoint-postgres"
                                       else "")
    for folder in SOURCES[suite]:
        for path in _files(root, folder):
            if path.endswith(".py"):
                dest = base / "src" / path.split("/", 2)[2]  # from langgraph/...
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_text(_read(root, path))
    (base / "conftest.py").write_text(SWAP)
    (base / "pytest.ini").write_text("[pytest]\nasyncio_mode = auto\n"
                                     "asyncio_default_fixture_loop_scope = function\n")
    return base


def _run_suite(base: Path, store: str, args: argparse.Namespace) -> dict[str, str]:
    out = base / f"{store}.jsonl"
    path = os.pathsep.join(p for p in (str(base / "src"), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "LG_STORE": store, "LG_BACKEND": args.backend, "LG_OUT": str(out),
           "LG_REDIS_URL": args.redis_url or "", "PYTHONPATH": path}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c",
           str(base / "pytest.ini"), "--rootdir", str(base), str(base / "tests")]
    if args.keyword:
        cmd += ["-k", args.keyword]
    subprocess.run(cmd, cwd=base, env=env, capture_output=True, text=True,
                   timeout=args.timeout)
    outcomes: dict[str, str] = {}
    if out.exists():
        for line in out.read_text().splitlines():
            r = json.loads(line)
            if outcomes.get(r["id"]) in ("failed", "error"):
                continue
            failed = r["outcome"] == "failed"
            outcomes[r["id"]] = ("error" if failed and r["when"] != "call" else r["outcome"])
    return outcomes


def _name(nodeid: str) -> str:
    return nodeid.split("::")[-1].split("[")[0]


async def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.backend == "redis" and not args.redis_url:
        raise SystemExit("--backend redis needs --redis-url")
    root = Path(args.langgraph)
    stores = [s for s in args.stores.split(",") if s]
    result: dict[str, Any] = {"benchmark": "langgraph-conformance", "backend": args.backend,
                              "langgraph_commit": _commit(root), "suites": {},
                              "load_average": list(os.getloadavg())}
    work = Path(tempfile.mkdtemp(prefix="lg-conformance-"))
    try:
        totals = {s: {"passed": 0, "of": 0} for s in stores}
        behind: list[str] = []
        for suite in [s for s in args.suites.split(",") if s]:
            base = _suite_dir(work, root, suite)
            runs = {}
            for store in stores:
                started = time.perf_counter()
                outcomes = {k: v for k, v in _run_suite(base, store, args).items()
                            if _name(k) not in PRIVATE}
                runs[store] = outcomes
                passed = sum(v == "passed" for v in outcomes.values())
                result["suites"].setdefault(suite, {})[store] = {
                    "passed": passed, "of": len(outcomes),
                    "seconds": round(time.perf_counter() - started, 1),
                    "not_passed": sorted(k for k, v in outcomes.items() if v != "passed")}
                totals[store]["passed"] += passed
                totals[store]["of"] += len(outcomes)
            if {"inmemory", "dream"} <= set(runs):
                behind += sorted(f"{suite}/{k}" for k, v in runs["inmemory"].items()
                                 if v == "passed" and runs["dream"].get(k) != "passed")
        result["totals"] = totals
        if {"inmemory", "dream"} <= set(stores):
            result["passed_by_inmemory_not_dream"] = behind
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return result
