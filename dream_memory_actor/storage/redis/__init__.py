"""Redis backend for both storage interfaces (redis-py asyncio).

``backend: redis`` plus ``redis_url`` is the whole switch. Any Redis >= 7.0
works; when the server has the search module (Redis Stack, Redis 8) semantic
search runs on an HNSW index, otherwise on exact cosine over each owner's
vectors cached in this process. ``redis_prefix`` separates deployments (and
tests) sharing one server: every key starts with ``<prefix>:``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .common import connect
from .structured import RedisStructuredStore
from .vector import RedisVectorStore

if TYPE_CHECKING:
    from ...config import MemorySettings

__all__ = ["RedisStructuredStore", "RedisVectorStore", "open_redis"]


async def open_redis(
    settings: MemorySettings, embedding_dim: int | None
) -> tuple[RedisStructuredStore, RedisVectorStore]:
    """The structured and vector stores on ``settings.redis_url`` (not yet set up).

    Each store has its own connection pool, so closing one leaves the other usable.
    """
    limit = settings.max_content_bytes
    structured = RedisStructuredStore(connect(settings), settings.redis_prefix,
                                      max_content_bytes=limit)
    vector = RedisVectorStore(connect(settings), settings.redis_prefix, embedding_dim,
                              max_content_bytes=limit, ef_search=settings.hnsw_ef_search)
    return structured, vector
