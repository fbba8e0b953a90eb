"""PostgreSQL + pgvector backend (extra ``postgres``): the recommended production store.

L1 in plain tables, L2 in one ``memories`` table with an HNSW cosine index per
embedding dimension (built when a search first wants it: ``hnsw``) and a trigram GIN
index for keyword matching. Every value
is a bound parameter; schema names are whitelisted identifiers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .embedded import embedded_dsn, start_embedded, with_embedded_dsn
from .pool import PostgresBackend
from .structured import PostgresStructuredStore
from .vector import PostgresVectorStore

if TYPE_CHECKING:
    from ...config import MemorySettings

__all__ = [
    "PostgresBackend",
    "PostgresStructuredStore",
    "PostgresVectorStore",
    "embedded_dsn",
    "open_postgres",
    "start_embedded",
    "with_embedded_dsn",
]


async def open_postgres(
    settings: MemorySettings, embedding_dim: int | None
) -> tuple[PostgresStructuredStore, PostgresVectorStore]:
    """Both stores on one pool; without a DSN the embedded server is started first."""
    import asyncio

    dsn = await asyncio.to_thread(embedded_dsn, settings)
    backend = PostgresBackend(
        dsn, settings.postgres_schema, embedding_dim,
        min_size=settings.postgres_pool_min, max_size=settings.postgres_pool_max,
        ef_search=settings.hnsw_ef_search, max_content_bytes=settings.max_content_bytes,
        cache_rows=settings.postgres_cache_rows,
    )
    return PostgresStructuredStore(backend), PostgresVectorStore(backend)
