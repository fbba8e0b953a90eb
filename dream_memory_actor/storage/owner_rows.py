"""The memories of one owner as this process last read them, and a search's
candidates among them.

A backend whose server keeps a version token per owner, replaced by every write of
the owner's memories from any process, keeps the owners' rows here (``RowCache``,
each ``OwnerRows`` tagged with its token) and checks the token in a round trip it
makes anyway: Redis in the fetch of the rows, PostgreSQL with a search's term
statistics. Where the token is current, a search's candidates come from the rows in
memory (:func:`candidates`): exact cosine over one matrix and the rows by the words
of their keyword texts (``word_index.WordIndex``), the same candidates the server's
statements choose. The in-memory backend holds its owners' memories as these rows
too, with no token to check.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..models import VectorMemory
from ..scoring import Candidate, cosine_to, length
from ..text import content_hash, fold, with_context, word_starts
from .terms import TermCounts
from .unit_rows import UnitRows, best_exactly
from .versions import matches
from .word_index import WordIndex, keyword_order
from .writes import Row as Found
from .writes import Writes, searched

#: A token no owner has: what a process that never read the owner passes.
NO_TOKEN = "-"


@dataclass(frozen=True)
class Row:
    memory: VectorMemory
    vec: np.ndarray | None
    #: Its content and context as the keyword signal reads them (``text.word_starts``).
    search_text: str
    hash: str
    #: The vector's length (``scoring.length``), for its cosines to queries.
    norm: float


def make_row(memory: VectorMemory, vec: np.ndarray | None, search_text: str | None = None,
             hash: str | None = None) -> Row:
    """The row of ``memory`` with its float64 vector; its keyword text and content hash
    computed unless given (as the server keeps them)."""
    return Row(memory, vec,
               word_starts(fold(with_context(memory.content, memory.context)))
               if search_text is None else search_text,
               content_hash(memory.content) if hash is None else hash,
               0.0 if vec is None else length(vec))


class OwnerRows:
    """The rows of one owner in creation order, valid while ``token`` is the owner's."""

    def __init__(self, token: str, rows: Iterable[Row]) -> None:
        self.token = token
        self.rows: dict[str, Row] = {r.memory.id: r for r in rows}
        self._units: UnitRows | None = None  # the rows' vectors, made on the first scan
        self._df: TermCounts | None = None
        self._words: WordIndex[Row] | None = None  # made on the first keyword search

    def put(self, row: Row) -> None:
        """Insert a row, or replace one whose vector is unchanged (a merge; where it
        changed, :meth:`written` has the matrix made again first)."""
        mid = row.memory.id
        is_new = mid not in self.rows
        self.rows[mid] = row
        self._df = None
        if self._words is not None:
            self._words.add(row)
        if not is_new or row.vec is None or self._units is None:
            return
        if self._units.dim != row.vec.shape[0]:
            self._units = None  # made again by the next scan
        else:
            self._units.add(mid, row.vec)

    def remove(self, memory_id: str) -> None:
        if self.rows.pop(memory_id, None) is not None:
            self._units = None
            self._df = None
            if self._words is not None:
                self._words.remove(memory_id)

    def written(self, w: Writes, dtype: Any = np.float64) -> None:
        """Apply a write as ``writes.Writes`` describes it (the rows it drops and puts),
        its vectors as the server keeps them (``dtype``)."""
        for m in w.drops:
            self.remove(m.id)
        for p in w.puts:
            old = self.rows.get(p.memory.id)
            if p.keeps:
                self.put(make_row(p.memory, None if old is None else old.vec))
                continue
            vec = None if p.given is None else np.asarray(p.given, dtype=dtype).astype(np.float64)
            if old is not None and (old.vec is not None or vec is not None):
                self._units = None  # a vector replaced: the matrix is made again
            self.put(make_row(p.memory, vec))

    def document_frequencies(self) -> TermCounts:
        """How many of these rows have each term (counted once, then kept with the rows)."""
        if self._df is None:
            self._df = TermCounts.of(searched(r.memory) for r in self.rows.values())
        return self._df

    def words(self) -> WordIndex[Row]:
        """The rows by the words of their keyword texts (made once, then kept in step)."""
        if self._words is None:
            self._words = WordIndex(self.rows.values(), search_text=lambda r: r.search_text,
                                    updated_at=lambda r: r.memory.updated_at,
                                    ident=lambda r: r.memory.id)
        return self._words

    def read(self, *, ids: Sequence[str] | None = None, text_hash: str | None = None,
             near: tuple[list[float], int] | None = None,
             where: Mapping[str, Any] | None = None, limit: int | None = None,
             offset: int = 0, vectors: bool = False) -> list[Found]:
        """What ``VectorStore._rows`` reads, taken from these rows: those of ``ids``; or
        those whose content has ``text_hash``; or the ``k`` of ``near = (vector, k)``
        nearest, best first, with their cosine; or every one whose metadata ``matches``
        ``where``, newest first, ``offset`` and ``limit`` applied."""

        def found(r: Row, sim: float | None = None) -> Found:
            vec = None if not vectors or r.vec is None else [float(x) for x in r.vec]
            return Found(r.memory, vec, sim)

        if ids is not None:
            return [found(self.rows[i]) for i in ids if i in self.rows]
        if text_hash is not None:
            return [found(r) for r in self.rows.values() if r.hash == text_hash]
        if near is not None:
            return [found(self.rows[mid], sim) for mid, sim in nearest(self, *near)]
        kept = sorted((r for r in self.rows.values() if matches(r.memory.metadata, where)),
                      key=lambda r: (-r.memory.updated_at.timestamp(), r.memory.id))
        end = None if limit is None else offset + limit
        return [found(r) for r in kept[offset:end]]

    def _vectors(self) -> UnitRows:
        if self._units is None:
            self._units = UnitRows.of((mid, r.vec) for mid, r in self.rows.items()
                                      if r.vec is not None)
        return self._units

    def similarities(self, query: np.ndarray) -> tuple[list[str], np.ndarray]:
        """Ids of the rows with a vector and their cosine to ``query`` (approximately:
        the order is right; report :func:`scoring.cosine` of the chosen ones)."""
        units = self._vectors()
        if not units.keys or units.dim != query.shape[0]:
            return [], np.empty(0)
        return units.keys, units.similarities(query)


class RowCache:
    """Rows of the most recently used owners: at most ``max_owners`` of them and, where
    ``max_rows`` is given, at most that many rows in all (the least recently used
    owners leave first)."""

    def __init__(self, max_owners: int = 1024, max_rows: int | None = None) -> None:
        self.max_owners = max_owners
        self.max_rows = max_rows
        self._owners: OrderedDict[str, OwnerRows] = OrderedDict()

    def token(self, owner: str) -> str:
        rows = self._owners.get(owner)
        return NO_TOKEN if rows is None else rows.token

    def get(self, owner: str) -> OwnerRows | None:
        rows = self._owners.get(owner)
        if rows is not None:
            self._owners.move_to_end(owner)
        return rows

    def current(self, owner: str, token: str) -> OwnerRows | None:
        """The owner's rows if they are those of ``token``."""
        rows = self._owners.get(owner)
        if rows is None or rows.token != token:
            return None
        self._owners.move_to_end(owner)
        return rows

    def put(self, owner: str, rows: OwnerRows) -> None:
        self._owners[owner] = rows
        self._owners.move_to_end(owner)
        held = sum(len(r.rows) for r in self._owners.values()) if self.max_rows else 0
        while len(self._owners) > self.max_owners or (
                self.max_rows is not None and held > self.max_rows and len(self._owners) > 1):
            _, gone = self._owners.popitem(last=False)
            held -= len(gone.rows)

    def drop(self, owner: str) -> None:
        self._owners.pop(owner, None)

    def sizes(self) -> dict[str, int]:
        """The owners held, least recently used first, and their rows."""
        return {o: len(rows.rows) for o, rows in self._owners.items()}


def exact_in(parts: Sequence[OwnerRows], query: np.ndarray) -> Callable[[int, str], float]:
    """``scoring.cosine`` of ``query`` and the row ``mid`` (with a vector) of ``parts[j]``,
    as ``unit_rows.best_exactly`` measures a row."""
    to = cosine_to(query)

    def exact(j: int, mid: str) -> float:
        row = parts[j].rows[mid]
        assert row.vec is not None  # a row of the matrix has a vector
        return to(row.vec, row.norm)

    return exact


def nearest(rows: OwnerRows, query: Sequence[float], k: int) -> list[tuple[str, float]]:
    """The ``k`` rows most similar to ``query`` with their cosine, best first (the oldest
    among equals, by :func:`scoring.cosine`)."""
    return [(mid, cosine) for cosine, _, mid in _nearest_in([rows], query, k)]


def _nearest_in(parts: Sequence[OwnerRows], query: Sequence[float], k: int,
                only: Collection[str] | None = None) -> list[tuple[float, int, str]]:
    """The ``k`` rows of ``parts`` (those of ids in ``only``, if given) most similar to
    ``query``, ``(cosine, part, id)``: picked by one product a part, then measured as
    ``scoring.cosine`` measures them (``unit_rows.best_exactly``). Against a cosine
    measured a row, ``python -m benchmarks search-latency --backend memory`` took p50
    0.61 ms against 1.62 ms at 1,000 memories and 1.98 ms against 17.8 ms at 10,000."""
    # Pairs are made for the rows picked only: a list of one tuple per row, alive
    # through the search, made the garbage collector run full passes over the
    # row cache every few searches (p95 ~110 ms at 10k rows).
    q = np.asarray(query, dtype=np.float64)
    found = []
    for part in parts:
        ids, sims = part.similarities(q)
        if only is not None and ids:
            sims = np.where([i in only for i in ids], sims, -np.inf)
        found.append((ids, sims))
    return best_exactly(found, k, exact_in(parts, q))


def candidates(by_owner: Mapping[str, OwnerRows], terms: Sequence[str],
               weights: Sequence[float], embedding: Sequence[float] | None, *,
               vector_k: int, keyword_k: int, where: Mapping[str, Any] | None = None,
               hits: Sequence[tuple[str, str]] | None = None) -> list[Candidate]:
    """A search's candidates among the owners' rows: the ``vector_k`` nearest (or the
    ``(owner, id)`` pairs of ``hits``, where an index found them) and the ``keyword_k``
    with the highest sum of the ``weights`` of the ``terms`` found in them (then newest,
    then smallest id), each with its exact cosine; only rows whose metadata matches
    ``where``."""
    words = {o: rows.words() for o, rows in by_owner.items() if rows.rows}
    sums = {o: ix.sums(terms, weights) for o, ix in words.items()}
    only = {mid for rows in by_owner.values() for mid, r in rows.rows.items()
            if matches(r.memory.metadata, where)} if where else None
    to = None if embedding is None else cosine_to(embedding)

    def candidate(row: Row, sim: float | None = None) -> Candidate:
        m = row.memory
        if sim is None and to is not None and row.vec is not None:
            sim = to(row.vec, row.norm)
        return Candidate(m.id, m.content, m.updated_at, sim, m, row.search_text,
                         words[m.owner].found(sums[m.owner], m.id))

    out: dict[str, Candidate] = {}
    if embedding is not None:
        if hits is None:  # measured already: their cosines come with them
            owners = list(by_owner)
            for cosine, j, mid in _nearest_in([by_owner[o] for o in owners], embedding,
                                              vector_k, only):
                out[mid] = candidate(by_owner[owners[j]].rows[mid], cosine)
        for owner, mid in (hits or [])[:vector_k]:
            row = by_owner[owner].rows.get(mid)
            if row is not None and row.vec is not None and (only is None or mid in only):
                out.setdefault(mid, candidate(row))
    for row in keyword_order(list(words.values()), list(sums.values()), keyword_k, only):
        out.setdefault(row.memory.id, candidate(row))
    return list(out.values())
