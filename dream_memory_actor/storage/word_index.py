"""Keyword candidates of the backends that search their rows in this process (in-memory
and Redis); PostgreSQL computes the same order in SQL.

The order every backend proposes (``VectorStore._candidates``): the rows in which at
least one query term is found (``text.occurs``), by the sum of the weights of the
terms found, then newest, then smallest id.
"""

from __future__ import annotations

import bisect
import heapq
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Sequence
from datetime import datetime
from typing import Generic, TypeVar

import numpy as np

from ..text import PREFIX_END, is_cjk

_T = TypeVar("_T")


class WordIndex(Generic[_T]):
    """The rows of one owner by the words of their search texts: each word's rows.

    ``search_text`` gives a row's ``text.word_starts`` (of its folded text): its words
    are the places a term can be found, so a term is found in a row when one of its
    words starts with the term (a CJK term: when one of its CJK runs holds the term).
    A term's rows are then read from the words that start with it (a range of the
    sorted words) and scored for all rows at once, so a search costs what its terms
    match, not the length of the owner's texts: memories kept with their context have
    about twice the text of those without (``context-latency`` benchmark, in-memory
    and Redis backends).

    Rows are added and removed as the owner's memories change (a removed row is masked
    until the index is made again, when more rows are removed than live); an added
    row with a live row's id replaces it.
    """

    def __init__(self, rows: Iterable[_T], *, search_text: Callable[[_T], str],
                 updated_at: Callable[[_T], datetime], ident: Callable[[_T], str]) -> None:
        self._text, self._updated_at, self._ident = search_text, updated_at, ident
        self._reset()
        for r in rows:
            self.add(r)

    def _reset(self) -> None:
        #: By position (the order added): each row (``None`` once removed), its id and
        #: its negated update time; whether it is live.
        self._rows: list[_T | None] = []
        self._ids: list[str] = []
        self._newest_first = np.empty(0)
        self._live = np.empty(0, dtype=bool)
        self._removed = 0
        self._at: dict[str, int] = {}  # position of each live id
        self._positions: defaultdict[str, list[int]] = defaultdict(list)  # a word's rows
        self._words: list[str] = []  # sorted
        self._cjk: defaultdict[str, set[str]] = defaultdict(set)  # CJK words by character

    def __len__(self) -> int:
        return len(self._at)

    def add(self, row: _T) -> None:
        rid = self._ident(row)
        if rid in self._at:
            self.remove(rid)
        n = len(self._rows)
        if n == self._live.shape[0]:
            size = max(16, 2 * n)
            self._live = np.resize(self._live, size)
            self._newest_first = np.resize(self._newest_first, size)
        self._live[n] = True
        self._newest_first[n] = -self._updated_at(row).timestamp()
        self._rows.append(row)
        self._ids.append(rid)
        self._at[rid] = n
        for word in self._text(row).split():  # each once (``word_starts``)
            positions = self._positions[word]
            if not positions:
                bisect.insort(self._words, word)
                if is_cjk(word[0]):
                    for ch in word:
                        self._cjk[ch].add(word)
            positions.append(n)

    def remove(self, ident: str) -> None:
        n = self._at.pop(ident, None)
        if n is None:
            return
        self._rows[n] = None
        self._live[n] = False
        self._removed += 1
        if self._removed > max(64, len(self._at)):
            live = [r for r in self._rows if r is not None]
            self._reset()
            for r in live:
                self.add(r)

    def _matching(self, term: str) -> list[int]:
        """The positions of the rows in which ``term`` is found (repeats possible)."""
        if is_cjk(term[0]):
            words: Iterable[str] = [w for w in self._cjk.get(term[0], ()) if term in w]
        else:
            lo = bisect.bisect_left(self._words, term)
            words = self._words[lo:bisect.bisect_left(self._words, term + PREFIX_END, lo)]
        return [p for w in words for p in self._positions[w]]

    def sums(self, terms: Sequence[str], weights: Sequence[float]) -> np.ndarray:
        """Each row's sum of the weights of ``terms`` found in it, by position: what
        :meth:`best` orders, and the keyword share ``scoring.rank`` gives a row
        (:meth:`found`) without looking for the terms in its text again."""
        n = len(self._rows)
        score = np.zeros(n)
        for term, w in zip(terms, weights, strict=True):
            found = np.zeros(n, dtype=bool)
            found[self._matching(term)] = True
            score[found] += w  # term by term, as a sum over the terms found is made
        return score

    def found(self, sums: np.ndarray, ident: str) -> float:
        """The sum of ``sums`` (of :meth:`sums`) for the live row ``ident``."""
        return float(sums[self._at[ident]])

    def best(self, sums: np.ndarray, limit: int, only: Collection[str] | None = None
             ) -> list[tuple[float, _T]]:
        """The best ``limit`` rows (of those whose ids are in ``only``, if given) in
        keyword order, each with its sum of ``sums`` (of :meth:`sums`)."""
        n = len(self._rows)
        if limit <= 0 or not n:
            return []
        keep = self._live[:n]
        if only is not None:
            keep = np.zeros(n, dtype=bool)
            keep[[self._at[i] for i in only if i in self._at]] = True
        hit = np.flatnonzero((sums > 0.0) & keep)
        # Best weight, then newest; rows equal in both are put in id order below.
        by = np.lexsort((self._newest_first[hit], -sums[hit]))
        if len(by) > limit:
            last = hit[by[limit - 1]]
            end = limit
            while end < len(by) and sums[hit[by[end]]] == sums[last] \
                    and self._newest_first[hit[by[end]]] == self._newest_first[last]:
                end += 1
            by = by[:end]
        chosen = sorted((-float(sums[p]), float(self._newest_first[p]), self._ids[p], p)
                        for p in hit[by].tolist())
        return [(-s, self._rows[p]) for s, _, _, p in chosen[:limit]]

    def order(self, terms: Sequence[str], weights: Sequence[float], limit: int,
              only: Collection[str] | None = None) -> list[_T]:
        """The best ``limit`` rows in keyword order."""
        return [r for _, r in self.best(self.sums(terms, weights), limit, only)]

    def tie(self, row: _T) -> tuple[float, str]:
        """``row``'s place among rows of equal weight: newest first, then smallest id."""
        return -self._updated_at(row).timestamp(), self._ident(row)


def keyword_order(indexes: Sequence[WordIndex[_T]], sums: Sequence[np.ndarray], limit: int,
                  only: Collection[str] | None = None) -> list[_T]:
    """The best ``limit`` rows of several owners' indexes in keyword order, by each
    index's :meth:`~WordIndex.sums`."""
    if len(indexes) == 1:
        return [r for _, r in indexes[0].best(sums[0], limit, only)]
    every = [((-g, *ix.tie(r)), n, r) for n, (ix, (g, r)) in enumerate(
        (ix, hit) for ix, s in zip(indexes, sums, strict=True) for hit in ix.best(s, limit, only))]
    return [r for _, _, r in heapq.nsmallest(limit, every)]
