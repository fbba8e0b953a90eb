"""Vectors as the unit rows of one matrix: their cosines to a query in one product."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

import numpy as np

_K = TypeVar("_K")

#: Rows whose approximate cosine is this close to the k-th best are measured exactly.
TIE = 1e-9


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

    @classmethod
    def of(cls, vectors: Iterable[tuple[str, np.ndarray]], dim: int = 0) -> UnitRows:
        """The rows of ``(key, vector)`` pairs in their order (of ``dim`` when none)."""
        pairs = list(vectors)
        units = cls(pairs[0][1].shape[0] if pairs else dim)
        for key, vec in pairs:
            units.add(key, vec)
        return units

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


def best_exactly(parts: Sequence[tuple[Sequence[_K], np.ndarray]], k: int,
                 exact: Callable[[int, _K], float]) -> list[tuple[float, int, _K]]:
    """The ``k`` best rows of ``parts`` (each: keys and their approximate cosines, from
    :meth:`UnitRows.similarities`, ``-inf`` for a row left out) by exact cosine: every row
    within :data:`TIE` of the k-th best is measured with ``exact(part, key)`` (its
    ``scoring.cosine``), then the k best by that, best first, the earlier row (parts in
    order) among equals. Triples ``(cosine, part, key)``."""
    if k <= 0 or not parts:
        return []
    sims = np.concatenate([s for _, s in parts])
    n = len(sims)
    kept = sims > -np.inf
    if n > k:
        kept &= sims >= np.partition(sims, n - k)[n - k] - TIE
    picked = np.flatnonzero(kept)
    starts = np.cumsum([0, *(len(keys) for keys, _ in parts)])
    at = np.searchsorted(starts, picked, side="right") - 1
    measured = []
    for i, j in zip(picked.tolist(), at.tolist(), strict=True):
        key = parts[j][0][i - int(starts[j])]
        measured.append((exact(j, key), i, j, key))
    measured.sort(key=lambda m: (-m[0], m[1]))
    return [(cosine, j, key) for cosine, _, j, key in measured[:k]]
