"""In-process backend: the reference implementation and the test double.

Everything lives in dictionaries of this process; nothing survives it. An
``asyncio.Lock`` per owner makes dedup-then-write atomic, as a transaction
does on PostgreSQL.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any

from ..history import HistoryLog, ItemVersion, StatusChange, trim_status
from ..models import (
    AuditEntry,
    ChatMessage,
    EmbeddingModel,
    MemorySnapshot,
    MemoryVersion,
    Tombstone,
    utcnow,
)
from ..scoring import Candidate, TermStats
from .base import StructuredStore, VectorStore
from .decisions import replaces
from .ops import AddAudit, L1Op, apply_ops
from .owner_rows import OwnerRows, candidates
from .terms import TermCounts, prefix_df, summed
from .writes import Planner, Row


class InMemoryStructuredStore(StructuredStore):
    """L1 in a dictionary of snapshots; chat windows and audit trails in lists beside it.

    No change feed (``watch`` never calls back): the data lives in this object, so
    no other process, nor another store object of this one, can write behind it.
    """

    def __init__(self, *, max_content_bytes: int = 32 * 1024) -> None:
        self.max_content_bytes = max_content_bytes
        self._snapshots: dict[str, MemorySnapshot] = {}
        self._ops: set[tuple[str, str]] = set()
        self._locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._windows: dict[tuple[str, str], list[ChatMessage]] = {}
        self._audit_log: defaultdict[str, list[AuditEntry]] = defaultdict(list)
        self._erased: dict[str, Tombstone] = {}  # tombstones by op key (or own id)
        self._closed: defaultdict[str, list[ItemVersion]] = defaultdict(list)
        self._status_log: defaultdict[str, list[StatusChange]] = defaultdict(list)
        self._units: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)

    @asynccontextmanager
    async def owner_unit(self, owner: str, vector: VectorStore
                         ) -> AsyncIterator[tuple[StructuredStore, VectorStore]]:
        """Units of one owner take turns (two imports: the second finds it not empty).
        Other writes are not held, and nothing is undone: see ``StructuredStore``."""
        async with self._units[owner]:
            yield self, vector

    async def load(self, owner: str, *, now: datetime | None = None) -> MemorySnapshot:
        snap = self._snapshots.get(owner) or MemorySnapshot(owner=owner)
        return snap.live(now or utcnow())

    async def _apply(self, owner: str, ops: Sequence[L1Op], now: datetime,
                     op_id: str | None) -> MemorySnapshot:
        async with self._locks[owner]:
            current = self._snapshots.get(owner) or MemorySnapshot(owner=owner)
            if op_id is not None and (owner, op_id) in self._ops:
                return current.live(now)
            log = HistoryLog()
            new = apply_ops(current, ops, now, self.limits.status_keys, log)
            self._snapshots[owner] = new
            self._closed[owner].extend(log.closed)
            if log.status:
                self._status_log[owner] = trim_status(
                    [*self._status_log[owner], *log.status], self.limits.status_history)
            if op_id is not None:
                self._ops.add((owner, op_id))
            audit = self._audit_log[owner]
            for op in ops:
                if isinstance(op, AddAudit):
                    audit[:] = [e for e in audit if not replaces(op.entry, e)]
                    audit.append(op.entry)
            return new

    async def _history(self, owner: str) -> tuple[list[ItemVersion], list[StatusChange]]:
        return list(self._closed.get(owner, ())), list(self._status_log.get(owner, ()))

    # No await between reading and writing a window: each call is atomic in the loop.

    async def _window(self, owner: str, conversation: str, messages: Sequence[ChatMessage],
                      keep: int | None, op_id: str | None
                      ) -> tuple[list[ChatMessage], list[ChatMessage]]:
        key = (owner, conversation)
        if op_id is not None:  # one op id space per owner, shared with _apply's
            if (owner, op_id) in self._ops:
                return list(self._windows.get(key, [])), []
            self._ops.add((owner, op_id))
        msgs = self._windows.get(key, []) + list(messages)
        cut = 0 if keep is None else max(0, len(msgs) - keep)
        if msgs[cut:]:
            self._windows[key] = msgs[cut:]
        else:
            self._windows.pop(key, None)
        return msgs[cut:], msgs[:cut]

    async def _conversations(self, owner: str) -> list[str]:
        return [c for (o, c), window in self._windows.items() if o == owner and window]

    async def _audit(self, owner: str, limit: int, pending_id: str | None
                     ) -> list[AuditEntry]:
        entries = [e for e in reversed(self._audit_log.get(owner, []))
                   if pending_id is None or e.pending_id == pending_id]
        return entries[:limit]

    async def _forget(self, owner: str, tombstone: Tombstone | None, op_key: str | None
                      ) -> Tombstone | None:
        async with self._locks[owner]:
            self._snapshots.pop(owner, None)
            self._ops = {k for k in self._ops if k[0] != owner}
            for key in [k for k in self._windows if k[0] == owner]:
                del self._windows[key]
            self._audit_log.pop(owner, None)
            self._closed.pop(owner, None)
            self._status_log.pop(owner, None)
            if tombstone is None:
                return None
            return self._erased.setdefault(op_key or tombstone.id, tombstone)

    async def _tombstones(self, limit: int) -> list[Tombstone]:
        return sorted(self._erased.values(), key=lambda t: t.at, reverse=True)[:limit]


class InMemoryVectorStore(VectorStore):
    """L2 in ``owner_rows.OwnerRows`` per owner, with exact (brute-force) cosine search.

    Each owner's term counts (memories per term, ``terms.TermCounts``) are kept beside
    its rows, moved by every write (``writes.Writes.term_delta``), as a server keeps
    them; the rows keep their ``word_index.WordIndex`` and their vectors as the rows of
    one matrix (``unit_rows.UnitRows``), once a search has made them.
    """

    def __init__(self, dim: int | None = None, *, max_content_bytes: int = 32 * 1024) -> None:
        self.dim = dim
        self.max_content_bytes = max_content_bytes
        self._rows_of: defaultdict[str, OwnerRows] = defaultdict(lambda: OwnerRows("", ()))
        self._df: defaultdict[str, TermCounts] = defaultdict(TermCounts)
        self._locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._ops: dict[tuple[str, str], str] = {}
        self._closed_versions: defaultdict[str, list[MemoryVersion]] = defaultdict(list)
        self._recorded_model: EmbeddingModel | None = None
        self._read_at: defaultdict[str, dict[str, datetime]] = defaultdict(dict)

    async def _model(self, record: EmbeddingModel | None, *, replace: bool = False
                     ) -> EmbeddingModel | None:
        if self._recorded_model is None or (replace and record is not None):
            self._recorded_model = record
        return self._recorded_model

    async def _owners(self) -> list[str]:
        return [o for o, rows in self._rows_of.items() if rows.rows]

    async def _reads(self, owner: str, noted: Mapping[str, datetime]) -> dict[str, datetime]:
        seen = self._read_at[owner]
        for mid, at in noted.items():
            seen[mid] = max(at, seen.get(mid, at))
        return {mid: seen[mid] for mid in noted} if noted else dict(seen)

    async def _write(self, owner: str, what: str, op_id: str | None, plan: Planner) -> str:
        async with self._locks[owner]:
            if op_id is not None and (owner, op_id) in self._ops:
                return self._ops[(owner, op_id)]
            result, w = await plan()  # raises before anything is written
            gone = {v.id for v in w.reopened}
            kept = [v for v in self._closed_versions[owner] if v.id not in gone]
            self._closed_versions[owner] = [*kept, *w.versions]
            self._rows_of[owner].written(w)
            self._df[owner].apply(w.term_delta())
            if op_id is not None:
                self._ops[(owner, op_id)] = result
            return result

    async def _rows(self, owner: str, *, ids: Sequence[str] | None = None,
                    text_hash: str | None = None,
                    near: tuple[list[float], int] | None = None,
                    where: Mapping[str, Any] | None = None, limit: int | None = None,
                    offset: int = 0, vectors: bool = False) -> list[Row]:
        held = self._held([owner]).get(owner)
        return [] if held is None else held.read(ids=ids, text_hash=text_hash, near=near,
                                                 where=where, limit=limit, offset=offset,
                                                 vectors=vectors)

    async def _versions(self, owner: str, memory_id: str | None = None) -> list[MemoryVersion]:
        return [v for v in self._closed_versions.get(owner, [])
                if memory_id is None or memory_id in (v.memory_id, v.superseded_by)]

    async def _term_stats(self, owners: Sequence[str], terms: Sequence[str]) -> TermStats:
        held = self._held(owners)
        docs = sum(len(rows.rows) for rows in held.values())
        per_owner = [prefix_df(self._df[o], len(rows.rows), terms)
                     for o, rows in held.items() if o in self._df]
        return summed(terms, docs, per_owner)

    async def _candidates(self, owners: Sequence[str], terms: Sequence[str],
                          embedding: list[float] | None, *, vector_k: int,
                          keyword_k: int, weights: Sequence[float],
                          stats: TermStats, where: Mapping[str, Any] | None = None
                          ) -> list[Candidate]:
        return candidates(self._held(owners), terms, weights, embedding, vector_k=vector_k,
                          keyword_k=keyword_k, where=where)

    def _held(self, owners: Sequence[str]) -> dict[str, OwnerRows]:
        """The rows of those of ``owners`` that have any (reading makes no entry)."""
        return {o: self._rows_of[o] for o in owners if o in self._rows_of}

    async def _forget(self, owner: str) -> int:
        async with self._locks[owner]:
            rows = self._rows_of.pop(owner, None)
            gone = 0 if rows is None else len(rows.rows)
            self._read_at.pop(owner, None)
            self._df.pop(owner, None)
            self._closed_versions.pop(owner, None)
            for key in [k for k in self._ops if k[0] == owner]:
                del self._ops[key]
            return gone
