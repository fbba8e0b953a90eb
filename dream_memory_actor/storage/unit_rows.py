"""Vectors as the unit rows of one matrix: their cosines to a query in one product."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class UnitRows:
    """Vectors of one dimension kept as the unit rows of one matrix, in the order they
    were added (a zero vector as a zero row), so that their cosines to a query come
    from one product. The product orders them rightly, but its last digits may differ
    from ``scoring.cosine``'s: pick with it, and report ``scoring.cosine`` of what is
    picked. Rows are only added (the matrix grows by doubling); whoever's vectors
    change otherwise makes a new one."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        #: What each row stands for, in the order added.
        self.keys: list[str] = []
        self._matrix = np.empty((0, dim))

    def add(self, key: str, vector: Sequence[float] | np.ndarray) -> None:
        n = len(self.keys)
        if n == self._matrix.shape[0]:
            grown = np.empty((max(16, 2 * n), self.dim))
            grown[:n] = self._matrix[:n]
            self._matrix = grown
        v = np.asarray(vector, dtype=np.float64)
        size = float(np.linalg.norm(v))
        self._matrix[n] = v / size if size else 0.0
        self.keys.append(key)

    def similarities(self, query: np.ndarray) -> np.ndarray:
        """Each row's cosine to ``query`` (of this dimension), in the order added; zeros
        for a zero query."""
        size = float(np.linalg.norm(query))
        rows = self._matrix[:len(self.keys)]
        return rows @ (query / size) if size else np.zeros(len(self.keys))
