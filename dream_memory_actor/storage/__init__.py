"""Storage: two interfaces (``base``) and one module (or package) per backend.

``open_stores(settings)`` picks the backend named in the settings; the driver of
a backend is imported only when that backend is used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import UnsupportedBackend
from .base import StructuredStore, VectorStore

if TYPE_CHECKING:
    from ..config import MemorySettings
    from ..models import EmbeddingModel

__all__ = ["StructuredStore", "VectorStore", "open_stores", "recorded_model"]


async def open_stores(
    settings: MemorySettings, embedding_dim: int | None
) -> tuple[StructuredStore, VectorStore]:
    """The configured backend's structured and vector stores (not yet set up), with the
    size caps of the settings."""
    stores = await _open(settings, embedding_dim)
    for store in stores:
        store.limits = settings.limits
    return stores


async def recorded_model(settings: MemorySettings) -> EmbeddingModel | None:
    """The embedding model recorded with the configured store's data (``None``: none, or
    a store not set up yet), read before the embedder is chosen."""
    structured, vector = await _open(settings, None)
    try:
        return await vector.recorded_model()
    finally:
        await vector.close()
        await structured.close()


async def _open(settings: MemorySettings, embedding_dim: int | None
                ) -> tuple[StructuredStore, VectorStore]:
    limit = settings.max_content_bytes
    if settings.backend == "memory":
        from .memory import InMemoryStructuredStore, InMemoryVectorStore

        return (InMemoryStructuredStore(max_content_bytes=limit),
                InMemoryVectorStore(embedding_dim, max_content_bytes=limit))
    if settings.backend == "postgres":
        from .postgres import open_postgres

        return await open_postgres(settings, embedding_dim)
    if settings.backend == "redis":
        from .redis import open_redis

        return await open_redis(settings, embedding_dim)
    raise UnsupportedBackend(f"unsupported backend {settings.backend!r}")
