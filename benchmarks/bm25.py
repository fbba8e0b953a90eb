"""BM25 (Okapi, k1=1.2, b=0.75): a reference keyword baseline for the retrieval benchmark.

Not part of the library's search: it ranks the same texts the memories hold, with
the library's own tokenization (``text.terms``, stopwords removed, CJK bigrams),
so "keyword only" and BM25 differ in scoring, not in what counts as a word.
Term frequencies count repeats: each whitespace-separated chunk is tokenized on
its own and the results are concatenated.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

from dream_memory_actor.text import terms


def tokens(text: str) -> list[str]:
    """``text.terms`` per chunk, repeats kept (BM25 needs term frequencies)."""
    return [t for chunk in text.split() for t in terms(chunk)]


class BM25:
    """An index over ``docs``; :meth:`top` returns document positions, best first."""

    def __init__(self, docs: Sequence[str], *, k1: float = 1.2, b: float = 0.75) -> None:
        self.k1 = k1
        self.b = b
        self._tf = [Counter(tokens(d)) for d in docs]
        self._len = [sum(tf.values()) for tf in self._tf]
        self.avgdl = (sum(self._len) / len(docs)) if docs else 0.0
        df: Counter[str] = Counter()
        for tf in self._tf:
            df.update(tf.keys())
        n = len(docs)
        # The Lucene form of IDF: always positive.
        self.idf = {t: math.log(1 + (n - f + 0.5) / (f + 0.5)) for t, f in df.items()}

    def scores(self, query: str) -> list[float]:
        q = terms(query)
        out = []
        for tf, dl in zip(self._tf, self._len, strict=True):
            s = 0.0
            norm = self.k1 * (1 - self.b + self.b * dl / self.avgdl) if self.avgdl else self.k1
            for t in q:
                f = tf.get(t)
                if f:
                    s += self.idf[t] * f * (self.k1 + 1) / (f + norm)
            out.append(s)
        return out

    def top(self, query: str, k: int) -> list[int]:
        """Positions of the ``k`` best documents with a positive score (ties: earlier first)."""
        s = self.scores(query)
        order = sorted((i for i, v in enumerate(s) if v > 0), key=lambda i: (-s[i], i))
        return order[:k]
