"""What a reranker's reply must be: one finite score per document (the check every
reranker of :mod:`dream_memory_actor.rerank` applies to what it is given)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..errors import RerankError


def checked_scores(scores: object, count: int, model: str) -> list[float]:
    """``scores`` as ``count`` finite floats, or ``RerankError`` saying what is wrong."""
    if isinstance(scores, (str, bytes)) or not isinstance(scores, Sequence):
        raise RerankError(f"reranker {model!r} returned {type(scores).__name__}, "
                          "not a list of scores")
    if len(scores) != count:
        raise RerankError(f"reranker {model!r} returned {len(scores)} scores for "
                          f"{count} documents")
    out = []
    for i, value in enumerate(scores):
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not math.isfinite(float(value)):
            raise RerankError(f"reranker {model!r} returned an unusable score for "
                              f"document #{i}: {value!r}")
        out.append(float(value))
    return out
