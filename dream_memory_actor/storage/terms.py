"""An owner's term counts, sorted, so that a term's document frequency can follow the
matching rule: a term is found where a word starts, so "deploy" is found in memories
with "deploy", "deployed" and "deployment".

The document frequency of a query term is the sum of the counts of the terms that start
with it, at most the owner's number of memories: one memory with both "deploy" and
"deployment" counts twice, the price of keeping one count per whole term (which every
write moves cheaply). A CJK bigram starts no other term, so its count is its own. Every
backend sums the same way (PostgreSQL over ``term_df`` with a range condition on the
term, Redis over a lexicographic sorted set of the owner's terms).
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from ..scoring import TermStats
from ..text import PREFIX_END
from ..text import terms as terms_of


class TermCounts:
    """How many memories have each term (whole terms), with the terms kept sorted."""

    def __init__(self, counts: Mapping[str, int] | None = None) -> None:
        self.counts: Counter[str] = Counter({t: n for t, n in (counts or {}).items() if n > 0})
        self._sorted: list[str] | None = None

    @classmethod
    def of(cls, texts: Iterable[str]) -> TermCounts:
        """How many of ``texts`` have each term (``text.terms``: each counted once a text)."""
        return cls(Counter(t for text in texts for t in terms_of(text)))

    def apply(self, delta: Mapping[str, int]) -> None:
        """Apply a ``dedup.df_delta``; a term no memory has any more is dropped."""
        for t, d in delta.items():
            n = self.counts[t] + d
            if n > 0:
                if t not in self.counts and self._sorted is not None:
                    bisect.insort(self._sorted, t)
                self.counts[t] = n
            else:
                if t in self.counts and self._sorted is not None:
                    i = bisect.bisect_left(self._sorted, t)
                    if i < len(self._sorted) and self._sorted[i] == t:
                        del self._sorted[i]
                self.counts.pop(t, None)

    def starting_with(self, term: str) -> int:
        """Sum of the counts of the terms that start with ``term`` (uncapped)."""
        if self._sorted is None:
            self._sorted = sorted(self.counts)
        keys = self._sorted
        lo = bisect.bisect_left(keys, term)
        hi = bisect.bisect_left(keys, term + PREFIX_END, lo)
        get = self.counts.__getitem__
        return sum(get(keys[i]) for i in range(lo, hi))


def prefix_df(counts: TermCounts, docs: int, terms: Iterable[str]) -> list[int]:
    """Each term's document frequency among one owner's ``docs`` memories (module doc)."""
    return [min(docs, counts.starting_with(t)) for t in terms]


def summed(terms: Sequence[str], docs: int, per_owner: Iterable[Sequence[int]]) -> TermStats:
    """The statistics of ``docs`` memories of several owners: per term, the sum over the
    owners of its document frequencies (``per_owner``: each owner's :func:`prefix_df`)."""
    out = [0] * len(terms)
    for row in per_owner:
        out = [a + b for a, b in zip(out, row, strict=True)]
    return TermStats(docs, dict(zip(terms, out, strict=True)))
