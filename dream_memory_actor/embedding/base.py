"""The embedder protocol and a content-hash cache in front of any embedder.

An embedder turns texts into vectors of a fixed dimension. Two ship with the
library: :class:`~dream_memory_actor.embedding.litellm.LiteLLMEmbedder` (any
provider litellm supports) and
:class:`~dream_memory_actor.embedding.local.LocalEmbedder` (sentence-transformers,
offline). Anything with ``model``, ``dim`` and ``async embed(texts)`` works.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from .. import validation as check
from ..errors import EmbeddingError


def texts_of(texts: Sequence[str]) -> list[str]:
    """``texts`` as a list, or ``TypeError`` for a lone string or a non-string item."""
    if isinstance(texts, str):
        raise TypeError("embed() takes a sequence of texts, not a single string")
    batch = list(texts)
    for i, text in enumerate(batch):
        if not isinstance(text, str):
            raise TypeError(f"text #{i} is a {type(text).__name__}, not a str")
    return batch


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors of ``dim`` floats."""

    model: str
    dim: int

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order. Raises ``EmbeddingError`` on failure."""
        ...


class CachedEmbedder:
    """An LRU cache keyed by (model, sha256 of the text) in front of an embedder.

    Every vector leaving it is checked (dimension, finite), so a provider that
    returns garbage raises ``EmbeddingError`` instead of polluting the index.
    """

    def __init__(self, inner: Embedder, max_entries: int = 10_000) -> None:
        self.inner = inner
        self.model = inner.model
        self.dim = inner.dim
        self.max_entries = max_entries
        self._cache: OrderedDict[str, list[float]] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def _key(self, text: str) -> str:
        return hashlib.sha256(f"{self.model}\x00{text}".encode()).hexdigest()

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        keys = [self._key(t) for t in texts]
        missing = list(dict.fromkeys(k for k in keys if k not in self._cache))
        self.hits += len(keys) - len(missing)
        self.misses += len(missing)
        if missing:
            by_key = {k: t for k, t in zip(keys, texts, strict=True)}
            vectors = await self.inner.embed([by_key[k] for k in missing])
            if len(vectors) != len(missing):
                raise EmbeddingError(
                    f"embedder {self.model!r} returned {len(vectors)} vectors for "
                    f"{len(missing)} texts"
                )
            for k, v in zip(missing, vectors, strict=True):
                try:
                    self._cache[k] = check.embedding(v, self.dim)
                except ValueError as exc:
                    raise EmbeddingError(f"embedder {self.model!r}: {exc}") from exc
        out = []
        for k in keys:
            self._cache.move_to_end(k)
            out.append(self._cache[k])
        while len(self._cache) > self.max_entries:
            self._cache.popitem(last=False)
        return out

    async def embed_one(self, text: str) -> list[float]:
        return (await self.embed([text]))[0]
