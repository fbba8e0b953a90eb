"""A deterministic embedder with no model: feature hashing of keyword terms.

It is the test double that ships with the library (as httpx ships
``MockTransport``): fast, offline, and the same text always gives the same
vector. It knows no synonyms, so it is *not* a semantic model: texts sharing
terms are close, "K8s" and "Kubernetes" are not.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

from ..text import terms


class HashingEmbedder:
    """Bag of hashed terms (signed), L2-normalized, ``dim`` dimensions."""

    def __init__(self, dim: int = 64, model: str = "hashing") -> None:
        self.dim = dim
        self.model = f"{model}-{dim}"
        self.calls = 0

    def vector(self, text: str) -> list[float]:
        v = np.zeros(self.dim)
        for t in terms(text, stopwords=frozenset()) or [text]:
            h = int.from_bytes(hashlib.blake2b(t.encode(), digest_size=8).digest(), "little")
            v[h % self.dim] += 1.0 if (h >> 32) & 1 else -1.0
        if not v.any():
            v[0] = 1.0
        return [float(x) for x in v / np.linalg.norm(v)]

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls += 1
        return [self.vector(t) for t in texts]
