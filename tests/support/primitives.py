"""A backend made of the storage seam's primitives alone: the in-memory stores, with the
vector store's search read through ``VectorStore``'s composed ``_term_stats`` and
``_candidates`` (every row read through ``_rows``) instead of its own counts, word index
and matrix. The store contract runs on it, so what the seam asks of a new backend is
shown to be enough."""

from __future__ import annotations

from dream_memory_actor.config import MemorySettings
from dream_memory_actor.storage import open_stores
from dream_memory_actor.storage.base import StructuredStore, VectorStore
from dream_memory_actor.storage.memory import InMemoryVectorStore


class PrimitivesVectorStore(InMemoryVectorStore):
    """The in-memory vector store searching as a backend with only the primitives does."""

    _term_stats = VectorStore._term_stats
    _candidates = VectorStore._candidates


async def open_primitives(settings: MemorySettings, dim: int | None
                          ) -> tuple[StructuredStore, VectorStore]:
    """The stores of ``settings`` (an in-memory backend's) made of the primitives."""
    structured, vector = await open_stores(settings, dim)
    primitives = PrimitivesVectorStore(dim, max_content_bytes=vector.max_content_bytes)
    primitives.limits = vector.limits
    return structured, primitives
