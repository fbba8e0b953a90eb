"""Vectors as the unit rows of one matrix, and the exact pick of the nearest from it."""

from __future__ import annotations

import random

import numpy as np

from dream_memory_actor.scoring import cosine
from dream_memory_actor.storage.unit_rows import UnitRows, best_exactly


def test_best_exactly_is_the_exact_order_of_every_row() -> None:
    """Picked from the product, measured exactly: the k best by ``scoring.cosine`` over
    several parts, the earlier row among equals (repeated vectors tie exactly), rows
    left out with ``-inf`` never picked."""
    rng = random.Random(2)
    base = [np.array([rng.gauss(0, 1) for _ in range(8)]) for _ in range(12)]
    parts_vecs = [[base[rng.randrange(12)] * rng.choice([1.0, 3.0]) for _ in range(n)]
                  for n in (15, 0, 9)]
    units = [UnitRows.of((f"p{j}-{i}", v) for i, v in enumerate(vs)) for j, vs in
             enumerate(parts_vecs)]
    for _ in range(20):
        q = base[rng.randrange(12)] + np.array([rng.gauss(0, 0.3) for _ in range(8)])
        left_out = {f"p0-{i}" for i in range(0, 15, 4)}
        parts = [(u.keys, np.where([key in left_out for key in u.keys], -np.inf,
                                   u.similarities(q)) if u.keys else np.empty(0))
                 for u in units]

        def exact(j: int, key: str, q: np.ndarray = q) -> float:
            return cosine(q, parts_vecs[j][int(key.split("-")[1])])

        every = [(exact(j, key), n, j, key)
                 for n, (j, key) in enumerate((j, key) for j, (keys, _) in enumerate(parts)
                                              for key in keys) if key not in left_out]
        every.sort(key=lambda e: (-e[0], e[1]))
        for k in (1, 3, 7, 40):
            assert best_exactly(parts, k, exact) == [(c, j, key) for c, _, j, key in every[:k]]
    assert best_exactly([], 3, lambda j, key: 0.0) == []
    assert best_exactly(parts, 0, lambda j, key: 0.0) == []


def test_of_keeps_the_order_and_a_dimension_when_empty() -> None:
    units = UnitRows.of([("a", np.array([3.0, 4.0])), ("b", np.array([0.0, 0.0]))])
    assert units.keys == ["a", "b"] and units.dim == 2
    assert np.allclose(units.similarities(np.array([3.0, 4.0])), [1.0, 0.0])
    assert UnitRows.of([], 5).dim == 5
