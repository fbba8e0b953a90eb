"""Redis backend for both storage interfaces (redis-py asyncio).

``backend: redis`` plus ``redis_url`` is the whole switch. Any Redis >= 7.0
works; when the server has the search module (Redis Stack, Redis 8) semantic
search runs on an HNSW index, otherwise on exact cosine over each owner's
vectors cached in this process. On a Redis Cluster (``redis_cluster`` or a
``redis+cluster://`` URL) each owner's calls go to the master of its slot, and
vector search runs on the cached vectors. ``redis_prefix`` separates deployments (and
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
    from .cluster import ClusterClient

    limit = settings.max_content_bytes
    structured = RedisStructuredStore(connect(settings), settings.redis_prefix,
                                      max_content_bytes=limit)
    vector_client = connect(settings)
    # On a cluster the search module would see one shard only (see ``cluster``).
    module = False if isinstance(vector_client, ClusterClient) else None
    vector = RedisVectorStore(vector_client, settings.redis_prefix, embedding_dim,
                              max_content_bytes=limit, ef_search=settings.hnsw_ef_search,
                              use_search_module=module)
    return structured, vector
