"""The PostgreSQL tests' store on a fresh schema, and a quick way to fill it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import numpy as np
import pytest

from dream_memory_actor.config import MemorySettings
from dream_memory_actor.models import utcnow
from dream_memory_actor.storage import open_stores
from dream_memory_actor.storage.postgres import PostgresVectorStore
from tests.conftest import DIM, fresh_schema


@pytest.fixture
async def pg(pg_dsn: str) -> AsyncIterator[tuple[MemorySettings, PostgresVectorStore]]:
    settings = MemorySettings(backend="postgres", postgres_dsn=pg_dsn,
                              postgres_schema=fresh_schema())
    structured, vector = await open_stores(settings, DIM)
    await vector.setup()
    assert isinstance(vector, PostgresVectorStore)
    yield settings, vector
    await structured.close()
    await vector.close()


async def bulk(vector: PostgresVectorStore, owner: str, n: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    now = utcnow()
    await vector.bulk_insert(owner, [(f"memory {i} of {owner}", list(rng.normal(size=DIM)), now)
                                     for i in range(n)])
    async with vector.backend.connection() as conn:
        await conn.execute(f"ANALYZE {vector.backend.schema}.memories")
        await conn.execute(f"ANALYZE {vector.backend.schema}.memory_text")
