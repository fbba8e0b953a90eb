"""Session-wide fixtures: one PostgreSQL server per test session, fresh schema per test."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import pytest

from dream_memory_actor.config import MemorySettings
from dream_memory_actor.storage.base import StructuredStore, VectorStore
from tests.support.servers import embedded_postgres

#: Test embeddings are small; dimension 8 keeps hand-made vectors readable.
DIM = 8

BACKENDS = ["memory", "postgres", "redis", "redis-stack", "redis-cluster"]
#: The backends the store contract runs on: every backend, and "primitives", the
#: in-memory one searching only through the primitives of the storage seam (what a new
#: backend must write), with the composed ``_term_stats`` and ``_candidates``.
STORE_BACKENDS = [*BACKENDS, "primitives"]


#: Contract modules of L1 alone: the "primitives" stores differ from the in-memory ones
#: only in how the vector store searches, so these run on "memory" and not again.
L1_MODULES = {"test_chat_audit", "test_structured", "test_history"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        params = getattr(item, "callspec", None)
        copy = (params is not None and "primitives" in params.params.values()
                and item.path.stem in L1_MODULES)
        (dropped if copy else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@pytest.fixture(scope="session")
def ray_runtime() -> Iterator[None]:
    """The test session's one Ray runtime (start-up takes 7-12 s, so once)."""
    import logging

    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False,
             object_store_memory=150 * 1024 * 1024, logging_level=logging.WARNING)
    try:
        yield
    finally:
        ray.shutdown()


@pytest.fixture(scope="session")
def pg_dsn() -> Iterator[str]:
    with embedded_postgres() as dsn:
        yield dsn


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A Redis server without modules (Debian's redis-server, started for the session)."""
    from tests.support.redis_servers import plain_redis

    with plain_redis() as url:
        yield url


@pytest.fixture(scope="session")
def redis_stack_url() -> Iterator[str]:
    """A Redis server with the search module (Redis Stack, started for the session)."""
    from tests.support.redis_servers import redis_stack

    with redis_stack() as url:
        yield url


@pytest.fixture(scope="session")
def redis_cluster_url() -> Iterator[str]:
    """A Redis Cluster of three masters and three replicas (started for the session)."""
    from tests.support.redis_cluster import redis_cluster_url

    with redis_cluster_url() as url:
        yield url


def fresh_schema() -> str:
    return f"t_{uuid.uuid4().hex[:12]}"


@dataclass
class Stores:
    backend: str
    structured: StructuredStore
    vector: VectorStore


def backend_settings(backend: str, request: pytest.FixtureRequest) -> MemorySettings:
    """Settings of ``backend`` on fresh storage (a new schema, database or key prefix)."""
    from dream_memory_actor.config import MemorySettings

    if backend == "memory":
        settings = MemorySettings(backend="memory")
    elif backend == "postgres":
        dsn = request.getfixturevalue("pg_dsn")
        settings = MemorySettings(backend="postgres", postgres_dsn=dsn,
                                  postgres_schema=fresh_schema(), postgres_pool_max=4)
    elif backend in ("redis", "redis-stack"):
        from tests.support.redis_servers import drop_prefix

        url = request.getfixturevalue("redis_url" if backend == "redis" else "redis_stack_url")
        prefix = fresh_schema()
        settings = MemorySettings(backend="redis", redis_url=url, redis_prefix=prefix)
        request.addfinalizer(lambda: drop_prefix(url, prefix))
    elif backend == "redis-cluster":
        from tests.support.redis_cluster import drop_cluster_prefix

        url = request.getfixturevalue("redis_cluster_url")
        prefix = fresh_schema()
        settings = MemorySettings(backend="redis", redis_url=url, redis_prefix=prefix)
        request.addfinalizer(lambda: drop_cluster_prefix(url, prefix))
    else:
        raise AssertionError(f"no fixture for backend {backend}")
    return settings


async def make_stores(backend: str, request: pytest.FixtureRequest, dim: int | None = DIM
                      ) -> Stores:
    """Stores of ``backend`` on fresh storage (a new schema, database or key prefix)."""
    from dream_memory_actor.storage import open_stores

    if backend == "primitives":
        from tests.support.primitives import open_primitives

        structured, vector = await open_primitives(backend_settings("memory", request), dim)
    else:
        structured, vector = await open_stores(backend_settings(backend, request), dim)
    await structured.setup()
    await vector.setup()
    return Stores(backend, structured, vector)


@pytest.fixture(params=STORE_BACKENDS)
async def stores(request: pytest.FixtureRequest) -> AsyncIterator[Stores]:
    s = await make_stores(request.param, request)
    try:
        yield s
    finally:
        await s.structured.close()
        await s.vector.close()


@pytest.fixture(params=STORE_BACKENDS)
async def keyword_stores(request: pytest.FixtureRequest) -> AsyncIterator[Stores]:
    """Stores without an embedding dimension: the keyword-only mode (no embedding model)."""
    s = await make_stores(request.param, request, dim=None)
    try:
        yield s
    finally:
        await s.structured.close()
        await s.vector.close()
