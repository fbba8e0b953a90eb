"""What an L2 write changes, as data: the one shape every backend applies.

Every write of semantic memories (a store, a batch, an update, a supersession, a
delete, an import, a consolidation proposal and its undoing) is planned once, above
the backends, as :class:`Writes`: the memories it puts (new rows, or new contents of
live rows), the live memories it drops, and the closed versions it adds to (or takes
out of) their histories. A backend applies a
plan's writes atomically under the owner's writer (``VectorStore._write``), and
keeps its own counts (memories per owner, documents per term) from them.

:class:`Plan` is the owner as a plan sees it: the backend's rows with the plan's
own writes laid over them, so the tenth item of a batch is judged against the
nine before it exactly as ten stores in turn would be, and nothing is written
until the whole batch is decided.
"""

from __future__ import annotations

import builtins
import itertools
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, NamedTuple, cast

import numpy as np

from ..limits import Limits
from ..models import MemoryVersion, StoreResult, VectorMemory
from ..scoring import cosine, keyword_score
from ..text import content_hash, query_terms, with_context
from .dedup import Cuts, Neighbour, decide, df_delta, outcome_of
from .unit_rows import UnitRows


class _Keep:
    def __repr__(self) -> str:
        return "KEEP"


#: The vector of a put that keeps the stored one (a merge keeps the original embedding).
KEEP: Final = _Keep()

Vector = list[float] | None

#: The operation id of applying consolidation proposal ``<id>``: its record holds what
#: the change replaced, which undoing it reads back (kept as long as the owner's data).
PROPOSAL_OP: Final = "proposal:"
#: The operation id of undoing proposal ``<id>``.
UNDO_OP: Final = "undo:"


class Row(NamedTuple):
    """A live memory as a backend reads it: the memory, its vector (when asked for) and
    its cosine to the vector it was found near (``None`` otherwise)."""

    memory: VectorMemory
    vector: Vector = None
    similarity: float | None = None


@dataclass(frozen=True)
class Put:
    """Write ``memory``: a new row (``before`` ``None``), or the new content of the live
    row ``before`` (same id). ``vector``: the embedding, or :data:`KEEP` the stored one."""

    memory: VectorMemory
    vector: Vector | _Keep
    before: VectorMemory | None = None

    @property
    def keeps(self) -> bool:
        """Whether the stored vector stays (:data:`KEEP`)."""
        return isinstance(self.vector, _Keep)

    @property
    def given(self) -> Vector:
        """The vector this put writes (``None``: none); not for one that keeps the stored."""
        assert not isinstance(self.vector, _Keep), "a put that keeps its vector writes none"
        return self.vector


@dataclass
class Writes:
    """The writes of one plan, in the order a backend applies them: reopened, versions,
    drops, puts. ``reopened`` are closed versions taken out of the histories again (an
    undone change removes the versions it closed)."""

    reopened: list[MemoryVersion] = field(default_factory=list)
    versions: list[MemoryVersion] = field(default_factory=list)
    drops: list[VectorMemory] = field(default_factory=list)
    puts: list[Put] = field(default_factory=list)

    def term_delta(self) -> dict[str, int]:
        """How the owner's document frequencies move (``dedup.df_delta`` of each change,
        on the text a memory is searched as: :func:`searched`)."""
        delta: Counter[str] = Counter()
        for m in self.drops:
            delta.update(df_delta(searched(m), None))
        for p in self.puts:
            delta.update(df_delta(None if p.before is None else searched(p.before),
                                  searched(p.memory)))
        return {t: n for t, n in delta.items() if n}

    def count_delta(self) -> int:
        """How the owner's number of memories moves."""
        return sum(p.before is None for p in self.puts) - len(self.drops)


def searched(memory: VectorMemory) -> str:
    """The text the keyword signal searches a memory as: its content, then its context
    (``text.with_context``)."""
    return with_context(memory.content, memory.context)


#: A write's plan: reads the owner through the backend's primitives (they see the owner
#: as it is inside the write) and returns its result (JSON, recorded under the write's
#: ``op_id``) and its writes.
Planner = Callable[[], Awaitable["tuple[str, Writes]"]]

#: The backend's read of an owner's rows (``VectorStore._rows``), as a plan uses it.
ReadRows = Callable[..., Awaitable["builtins.list[Row]"]]
#: The owner's ``k`` memories that share the most (rarity-weighted) words with a text,
#: best first (``VectorStore._keyword_nearest``).
ReadWords = Callable[[str, str, int], Awaitable["builtins.list[VectorMemory]"]]


class Plan:
    """An owner's memories as a write plan sees them: the backend's rows (``read``)
    under the writes planned so far."""

    def __init__(self, owner: str, read: ReadRows, words: ReadWords | None = None) -> None:
        self.owner = owner
        self._read = read
        self._words = words
        self.writes = Writes()
        self._put: dict[str, Put] = {}  # the live rows this plan wrote, by id
        self._gone: set[str] = set()  # stored rows this plan dropped
        self._read_rows: dict[str, VectorMemory] = {}  # stored rows read so far, by id
        # what :meth:`prefetch` read: each vector's nearest stored rows (how many it asked
        # for), and the stored rows of each content hash
        self._near_known: dict[tuple[float, ...], builtins.list[Row]] = {}
        self._near_asked = 0
        self._same_known: dict[str, builtins.list[Row]] = {}
        # each new vector of this plan as an array, made once: a batch compares every item
        # with every earlier one (the same cosine, without converting the lists each time)
        self._arrays: dict[str, tuple[builtins.list[float], np.ndarray]] = {}
        # ... and as a unit row of one matrix (:meth:`_own_units`), for the first
        # ``_units_from`` entries of ``_put``
        self._units: UnitRows | None = None
        self._units_from = 0
        # the content hash of each row this plan wrote
        self._hashes: dict[str, str] = {}

    #: Rows :meth:`prefetch` reads past a batch's ``nearest``, for the stored rows the
    #: plan may hide by then (a merge into a memory a batch item later supersedes).
    PREFETCH_SPARE = 2

    async def prefetch(self, contents: Sequence[str], vectors: Sequence[Vector],
                       nearest: int, near_many: Callable[..., Awaitable[Any]],
                       same_many: Callable[..., Awaitable[Any]]) -> None:
        """Read a batch's neighbours before judging it: each vector's nearest stored rows
        and the stored rows of each content's hash, one backend call each
        (``VectorStore._nearest_many``, ``_same_text_many``). The owner's stored rows do
        not change under its writer, so these are the rows each item's own reads would
        find; an item that needs more (the plan hid more rows than the spare) reads.
        It pays on PostgreSQL, where each read is a round trip: a LoCoMo session a
        ``store_many``, 1.10-1.11x as fast in alternating runs, and 300 -> 454 memories/s
        in ``python -m benchmarks compare-mem0 --ingest store_many``."""
        given = [v for v in vectors if v is not None]
        if given:
            self._near_asked = nearest + self.PREFETCH_SPARE
            found = await near_many(self.owner, given, self._near_asked)
            self._near_known = {tuple(v): rows for v, rows in zip(given, found, strict=True)}
        self._same_known = await same_many(self.owner, [content_hash(c) for c in contents])

    # -- reads -----------------------------------------------------------------------

    async def live(self, memory_id: str) -> VectorMemory | None:
        """The live memory ``memory_id`` as this plan leaves it (``None``: not live)."""
        if memory_id in self._put:
            return self._put[memory_id].memory
        if memory_id in self._gone:
            return None
        if memory_id in self._read_rows:  # read in this write: the owner's writer is ours
            return self._read_rows[memory_id]
        rows = await self._read(self.owner, ids=[memory_id])
        return rows[0].memory if rows else None

    async def neighbours(self, content: str, vector: Vector, nearest: int,
                         context: str | None = None) -> builtins.list[Neighbour]:
        """The ``nearest`` memories most similar to ``vector``, best first, then the memory
        of the same text if it is not among them (its similarity ``None``); each marked
        when it or the new memory (``context``) carries a context."""
        found: builtins.list[tuple[float, Neighbour]] = []
        if vector is not None and nearest > 0:
            # Read past the stored rows this plan hides (dropped, or written with a new
            # vector), no more: a batch's own new memories are not stored yet.
            hidden = len(self._gone) + sum(1 for p in self._put.values()
                                           if p.before is not None and not p.keeps)
            need = nearest + hidden
            known = self._near_known.get(tuple(vector)) if self._near_known else None
            if known is not None and (need <= self._near_asked
                                      or len(known) < self._near_asked):
                stored = known[:need]  # the same order: the first ``need`` of them
            else:
                stored = await self._read(self.owner, near=(vector, need))
            for row in stored:
                mid = row.memory.id
                self._read_rows[mid] = row.memory
                if mid in self._gone or row.similarity is None:
                    continue
                if mid in self._put and not isinstance(self._put[mid].vector, _Keep):
                    continue  # a new vector of this plan's: scored below
                mem = self._put[mid].memory if mid in self._put else row.memory
                found.append((row.similarity, _near(mem, row.similarity, context)))
            query = np.asarray(vector, dtype=np.float64)
            found += [(sim, _near(p.memory, sim, context))
                      for sim, p in self._own_nearest(query, nearest)]
            found.sort(key=lambda f: -f[0])  # stable: the backend's order among equals
        near = [n for _, n in found[:nearest]]
        if vector is None and nearest > 0 and self._words is not None:
            # Without a vector, the memories that share the most words with it (this plan's
            # own, the newest, first): only their texts can judge them (no similarity), so
            # only an aligned text merges or updates.
            wanted = query_terms(content)
            mine = [p.memory for p in reversed(self._put.values())
                    if keyword_score(wanted, searched(p.memory)) > 0]
            worded = await self._words(self.owner, content, nearest + len(self._gone))
            self._read_rows.update((m.id, m) for m in worded)
            for mem in [*mine, *(m for m in worded if m.id not in self._put)]:
                if mem.id not in self._gone and len(near) < nearest:
                    near.append(_near(mem, None, context))
        same = await self._same_text(content)
        if same is not None and all(n.id != same.id for n in near):
            near.append(_near(same, None, context))
        return near

    def _own_nearest(self, query: np.ndarray, k: int) -> builtins.list[tuple[float, Put]]:
        """The ``k`` new vectors of this plan most similar to ``query`` (ties: the earlier
        written), in the order they were written, each with its cosine as
        ``scoring.cosine`` gives it: only they can be among the ``k`` nearest of the
        stored rows and these. One product of the matrix of their unit vectors picks
        them, and the cosine of each picked one is computed alone, so a batch judges as
        one store at a time would. A batch compares every item with every earlier one:
        with every cosine computed alone, ``python -m benchmarks locomo-ingest --batch
        conversation`` (a conversation's hundreds of turns a batch) stored 282-286
        turns/s, and 842-853 with this, in two alternating pairs."""
        units = self._own_units()
        if units is None or k <= 0:
            return []
        keys = units.keys
        approx = units.similarities(query)
        picked: Sequence[int] = range(len(keys))
        if len(keys) > k:  # the k best and anything within rounding of the k-th
            picked = np.flatnonzero(approx >= np.partition(approx, -k)[-k] - 1e-9).tolist()
        vectors = [cast(builtins.list[float], self._put[keys[i]].vector) for i in picked]
        exact = [(cosine(query, self._array(keys[i], v)), i)
                 for i, v in zip(picked, vectors, strict=True)]
        best = sorted(exact, key=lambda e: (-e[0], e[1]))[:k]
        return [(sim, self._put[keys[i]]) for sim, i in sorted(best, key=lambda e: e[1])]

    def _own_units(self) -> UnitRows | None:
        """The plan's new vectors (its puts with a vector of their own, in the order of
        ``_put``) as unit rows; ``None`` without any. A batch of new memories only adds
        puts, so only the rows of the puts since the last call are added; :meth:`put`
        and :meth:`drop` let the rows go when a put is dropped or its vector replaced."""
        if self._units is None:
            self._units_from = 0
        for p in itertools.islice(self._put.values(), self._units_from, None):
            if isinstance(p.vector, list):
                if self._units is None:
                    self._units = UnitRows(len(p.vector))
                self._units.add(p.memory.id, p.vector)
        self._units_from = len(self._put)
        return self._units

    async def _same_text(self, content: str) -> VectorMemory | None:
        h = content_hash(content)
        for mid, p in self._put.items():
            if self._hashes[mid] == h:
                return p.memory
        known = self._same_known.get(h)
        for row in (await self._read(self.owner, text_hash=h) if known is None else known):
            self._read_rows[row.memory.id] = row.memory
            if row.memory.id not in self._gone and row.memory.id not in self._put:
                return row.memory
        return None

    def _array(self, memory_id: str, vector: builtins.list[float]) -> np.ndarray:
        made = self._arrays.get(memory_id)
        if made is None or made[0] is not vector:
            made = self._arrays[memory_id] = (vector, np.asarray(vector, dtype=np.float64))
        return made[1]

    # -- writes ----------------------------------------------------------------------

    def put(self, memory: VectorMemory, vector: Vector | _Keep,
            before: VectorMemory | None = None) -> None:
        earlier = self._put.get(memory.id)
        if earlier is not None:  # written twice by this plan: one row, as it ends
            before = earlier.before
            if isinstance(vector, _Keep):
                vector = earlier.vector
            self.writes.puts.remove(earlier)
        p = Put(memory, vector, before)
        if earlier is not None and vector is not earlier.vector:
            self._units = None  # a row's vector changed: :meth:`_own_units` makes them again
        self._put[memory.id] = p
        self._hashes[memory.id] = content_hash(memory.content)
        self.writes.puts.append(p)

    def drop(self, memory: VectorMemory) -> None:
        earlier = self._put.pop(memory.id, None)
        self._hashes.pop(memory.id, None)
        if earlier is not None:
            self._units = None  # the puts after it moved up: made again when next read
            self.writes.puts.remove(earlier)
            if earlier.before is None:
                return  # written and dropped by this plan: the store never sees it
            memory = earlier.before
        self._gone.add(memory.id)
        self.writes.drops.append(memory)

    def close(self, version: MemoryVersion) -> None:
        self.writes.versions.append(version)

    def reopen(self, version: MemoryVersion) -> None:
        """Take the closed ``version`` out of its memory's history (as it was written)."""
        self.writes.reopened.append(version)

    # -- the judged store ------------------------------------------------------------

    async def store(self, content: str, vector: Vector, metadata: dict[str, Any],
                    cuts: Cuts, now: datetime, limits: Limits,
                    context: str | None = None) -> StoreResult:
        """Judge ``content`` against the owner's nearest memories (``dedup.decide`` on
        the ``cuts.nearest`` most similar above the candidate cut, and the memory of the
        same text) and plan what the judgement calls for (``dedup.outcome_of``): a merge
        (the previous content a ``"merge"`` version), a supersession, or an insert.
        ``vector`` embeds the content with its ``context``."""
        found = [] if cuts.nearest == 0 else await self.neighbours(content, vector,
                                                                    cuts.nearest, context)
        j = await decide(content, found, cuts)
        near = None if j is None or j.memory_id is None else await self.live(j.memory_id)
        w = outcome_of(j, near, self.owner, content, metadata, vector is not None, now,
                       limits, context)
        if w.version is not None:
            self.close(w.version)
        if w.removes is not None:
            assert near is not None
            self.drop(near)
        if w.inserts:
            self.put(w.memory, vector)
        else:
            self.put(w.memory, KEEP, before=near)
        return w.result


def _near(memory: VectorMemory, similarity: float | None, context: str | None) -> Neighbour:
    return Neighbour(memory.id, memory.content, similarity,
                     context=bool(context or memory.context))
