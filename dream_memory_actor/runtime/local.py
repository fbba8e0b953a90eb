"""A throwaway memory system on this machine, for scripts, tests and measurements.

::

    with local_system(backend="postgres", placement="dedicated") as system:
        system.owner("alice").add_fact("likes tea")

Starts a local Ray (2 CPUs unless told otherwise) when this process has none,
and stops everything it started on exit. With ``backend="postgres"`` and no DSN
the embedded server is used, with a fresh schema that is dropped afterwards.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import uuid
from collections.abc import Iterator
from typing import Any

import ray

from ..config import MemorySettings
from .client import MemorySystem


@contextlib.contextmanager
def local_system(*, backend: str = "memory", placement: str = "sharded",
                 postgres_dsn: str | None = None, name: str = "local", num_cpus: int = 2,
                 system_options: dict[str, Any] | None = None,
                 **settings: Any) -> Iterator[MemorySystem]:
    """A started system (see the module docstring); ``settings`` are MemorySettings fields."""
    values: dict[str, Any] = {"backend": backend, "placement": placement, **settings}
    schema = None
    if backend == "postgres":
        schema = f"local_{uuid.uuid4().hex[:10]}"
        values.update(postgres_schema=schema, postgres_dsn=postgres_dsn)
        values = {k: v for k, v in values.items() if v is not None}
    with local_ray(num_cpus):
        config = MemorySettings(**values)
        if backend == "postgres":
            from ..storage.postgres import with_embedded_dsn

            config = with_embedded_dsn(config)
        system = MemorySystem.start(config, name=name, **(system_options or {}))
        try:
            yield system
        finally:
            system.shutdown(grace_period_s=1)
            if schema is not None and config.postgres_dsn is not None:
                _drop_schema(config.postgres_dsn.get_secret_value(), schema)


@contextlib.contextmanager
def local_ray(num_cpus: int = 2) -> Iterator[None]:
    """A single-node Ray for this process, unless it has one already (then left alone)."""
    if ray.is_initialized():
        yield
        return
    ray.init(address="local", num_cpus=num_cpus, include_dashboard=False,
             object_store_memory=200 * 1024 * 1024, logging_level=logging.ERROR)
    try:
        yield
    finally:
        ray.shutdown()


def _drop_schema(dsn: str, schema: str) -> None:
    import asyncpg

    async def drop() -> None:
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")  # generated name
        finally:
            await conn.close()

    # In a thread: the caller may itself be inside a running event loop.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, drop()).result()

