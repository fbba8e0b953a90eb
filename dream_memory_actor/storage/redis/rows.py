"""The memories of one owner as this process last read them, and the scans over them.

Dedup needs the owner's vectors and content hashes; keyword candidates need the
places words start in the owner's folded texts (``text.word_starts``: a term is found
where a word starts, which no server-side tokenizer reproduces exactly), and the rows
by those words (``word_index.WordIndex``). They are kept here, per owner, tagged with
the owner's version token: the token changes on every write from any process, and
each read checks it in the same round trip that would fetch the rows.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

from ...models import VectorMemory
from ...scoring import length
from ...text import content_hash, fold, with_context, word_starts
from ..terms import TermCounts
from ..unit_rows import UnitRows
from ..word_index import WordIndex
from .common import text

#: The fields of a memory hash that rows are built from, in this order.
ROW_FIELDS = ("content", "meta", "created", "updated", "vec", "ctx")

#: Fetch the owner's rows unless the caller's token is current. KEYS: version token,
#: id set. ARGV: the caller's token, the key prefix of the owner's memory hashes.
#: Reply: {token, 0} when current, else {token, 1, id1, fields1, id2, fields2, ...}.
FETCH_ROWS = """#!lua flags=no-writes
local v = redis.call('GET', KEYS[1]) or ''
if v == ARGV[1] then return {v, 0} end
local ids = redis.call('ZRANGE', KEYS[2], 0, -1)
local out = {v, 1}
for _, id in ipairs(ids) do
  out[#out + 1] = id
  out[#out + 1] = redis.call('HMGET', ARGV[2] .. id,
                             'content', 'meta', 'created', 'updated', 'vec', 'ctx')
end
return out
"""

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


def vec_bytes(embedding: Sequence[float] | np.ndarray) -> bytes:
    """How an embedding is stored: little-endian float64 (exact, and RediSearch's FLOAT64)."""
    return np.asarray(embedding, dtype="<f8").tobytes()


def row_from_fields(owner: str, memory_id: str, fields: Sequence[Any]) -> Row | None:
    """A row from the HMGET reply of :data:`ROW_FIELDS`; ``None`` if the hash is gone."""
    content, meta, created, updated = (text(f) for f in fields[:4])
    if content is None or created is None or updated is None:
        return None
    raw_vec = fields[4]
    vec = None if raw_vec is None else np.frombuffer(raw_vec, dtype="<f8").astype(np.float64)
    mem = VectorMemory.model_construct(
        id=memory_id, owner=owner, content=content,
        metadata=json.loads(meta) if meta else {},
        context=text(fields[5]) if len(fields) > 5 else None,
        created_at=datetime.fromisoformat(created),
        updated_at=datetime.fromisoformat(updated),
        has_embedding=vec is not None,
    )
    return make_row(mem, vec)


def make_row(memory: VectorMemory, vec: np.ndarray | None) -> Row:
    return Row(memory, vec, word_starts(fold(with_context(memory.content, memory.context))),
               content_hash(memory.content), 0.0 if vec is None else length(vec))


class OwnerRows:
    """The rows of one owner in creation order, valid while ``token`` is the owner's."""

    def __init__(self, token: str, rows: Iterable[Row]) -> None:
        self.token = token
        self.rows: dict[str, Row] = {r.memory.id: r for r in rows}
        self._units: UnitRows | None = None  # the rows' vectors, made on the first scan
        self._df: TermCounts | None = None
        self._words: WordIndex[Row] | None = None  # made on the first keyword search

    @classmethod
    def from_reply(cls, owner: str, reply: Sequence[Any]) -> OwnerRows:
        token = text(reply[0]) or ""
        rows = []
        for i in range(2, len(reply), 2):
            row = row_from_fields(owner, text(reply[i]) or "", reply[i + 1])
            if row is not None:
                rows.append(row)
        return cls(token, rows)

    def put(self, row: Row) -> None:
        """Insert a row, or replace one whose vector is unchanged (a merge)."""
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

    def document_frequencies(self) -> TermCounts:
        """How many of these rows have each term (counted once, then kept with the rows)."""
        if self._df is None:
            self._df = TermCounts.of(with_context(r.memory.content, r.memory.context)
                                     for r in self.rows.values())
        return self._df

    def words(self) -> WordIndex[Row]:
        """The rows by the words of their keyword texts (made once, then kept in step)."""
        if self._words is None:
            self._words = WordIndex(self.rows.values(), search_text=lambda r: r.search_text,
                                    updated_at=lambda r: r.memory.updated_at,
                                    ident=lambda r: r.memory.id)
        return self._words

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

    def nearest(self, query: np.ndarray) -> str | None:
        """The id of the row most similar to ``query`` (the oldest among equals)."""
        ids, sims = self.similarities(query)
        return ids[int(np.argmax(sims))] if ids else None


class RowCache:
    """Rows of the most recently used owners (a bounded LRU)."""

    def __init__(self, max_owners: int = 1024) -> None:
        self.max_owners = max_owners
        self._owners: OrderedDict[str, OwnerRows] = OrderedDict()

    def token(self, owner: str) -> str:
        rows = self._owners.get(owner)
        return NO_TOKEN if rows is None else rows.token

    def get(self, owner: str) -> OwnerRows | None:
        rows = self._owners.get(owner)
        if rows is not None:
            self._owners.move_to_end(owner)
        return rows

    def put(self, owner: str, rows: OwnerRows) -> None:
        self._owners[owner] = rows
        self._owners.move_to_end(owner)
        while len(self._owners) > self.max_owners:
            self._owners.popitem(last=False)

    def drop(self, owner: str) -> None:
        self._owners.pop(owner, None)

    def resolve(self, owner: str, reply: Sequence[Any]) -> OwnerRows | None:
        """The owner's rows after a :data:`FETCH_ROWS` reply, cached or freshly read;
        ``None`` if the reply said "current" but this cache no longer holds that token."""
        if int(reply[1]) == 0:
            cached = self._owners.get(owner)
            if cached is None or cached.token != (text(reply[0]) or ""):
                return None
            self._owners.move_to_end(owner)
            return cached
        rows = OwnerRows.from_reply(owner, reply)
        self.put(owner, rows)
        return rows
