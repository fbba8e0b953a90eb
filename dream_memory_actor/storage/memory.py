"""In-process backend: the reference implementation and the test double.

Everything lives in dictionaries of this process; nothing survives it. An
``asyncio.Lock`` per owner makes dedup-then-write atomic, as a transaction
does on PostgreSQL.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, NamedTuple

import numpy as np

from ..errors import MemoryNotFound
from ..history import HistoryLog, ItemVersion, StatusChange, trim_status
from ..models import (
    AuditEntry,
    ChatMessage,
    EmbeddingModel,
    MemorySnapshot,
    MemoryVersion,
    StoreResult,
    Tombstone,
    VectorMemory,
    utcnow,
)
from ..scoring import Candidate, TermStats, cosine, keyword_order
from ..text import content_hash, fold
from .base import StructuredStore, VectorStore
from .dedup import Cuts, Neighbour, decide, df_delta, outcome_of
from .ops import AddAudit, L1Op, apply_ops
from .terms import TermCounts, prefix_df, summed
from .vector_l2 import BatchItem
from .versions import closed, matches, successor, updated


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

    def owner_unit(self, owner: str) -> asyncio.Lock:
        """Units of one owner take turns (two imports: the second finds it not empty).
        Other writes are not held, and nothing is undone: see ``StructuredStore``."""
        return self._units[owner]

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
            for op in ops:  # a decision replaces an earlier entry of its pending id
                if isinstance(op, AddAudit):
                    audit[:] = [e for e in audit if e.pending_id != op.entry.pending_id]
                    audit.append(op.entry)
            return new

    async def _item_history(self, owner: str) -> list[ItemVersion]:
        return list(self._closed.get(owner, ()))

    async def _status_history(self, owner: str, key: str | None) -> list[StatusChange]:
        return [c for c in self._status_log.get(owner, ()) if key is None or c.key == key]

    # No await between reading and writing a window: each method is atomic in the loop.

    async def _append_messages(self, owner: str, conversation: str,
                               messages: Sequence[ChatMessage], window: int,
                               op_id: str | None
                               ) -> tuple[list[ChatMessage], list[ChatMessage]]:
        if op_id is not None:  # one op id space per owner, shared with _apply's
            if (owner, op_id) in self._ops:
                return list(self._windows.get((owner, conversation), [])), []
            self._ops.add((owner, op_id))
        msgs = self._windows.get((owner, conversation), []) + list(messages)
        cut = max(0, len(msgs) - window)
        self._windows[(owner, conversation)] = msgs[cut:]
        return msgs[cut:], msgs[:cut]

    async def _load_window(self, owner: str, conversation: str) -> list[ChatMessage]:
        return list(self._windows.get((owner, conversation), []))

    async def _end_conversation(self, owner: str, conversation: str) -> list[ChatMessage]:
        return self._windows.pop((owner, conversation), [])

    async def _audit(self, owner: str, limit: int, pending_id: str | None
                     ) -> list[AuditEntry]:
        entries = [e for e in reversed(self._audit_log.get(owner, []))
                   if pending_id is None or e.pending_id == pending_id]
        return entries[:limit]

    async def _forget(self, owner: str, tombstone: Tombstone, op_key: str | None
                      ) -> Tombstone:
        async with self._locks[owner]:
            self._snapshots.pop(owner, None)
            self._ops = {k for k in self._ops if k[0] != owner}
            for key in [k for k in self._windows if k[0] == owner]:
                del self._windows[key]
            self._audit_log.pop(owner, None)
            self._closed.pop(owner, None)
            self._status_log.pop(owner, None)
            return self._erased.setdefault(op_key or tombstone.id, tombstone)

    async def _tombstones(self, limit: int) -> list[Tombstone]:
        return sorted(self._erased.values(), key=lambda t: t.at, reverse=True)[:limit]


class _Row(NamedTuple):
    memory: VectorMemory
    vec: np.ndarray | None
    folded: str


class InMemoryVectorStore(VectorStore):
    """L2 in a dictionary per owner, with exact (brute-force) cosine search.

    Each owner's term counts (memories per term, ``terms.TermCounts``) are kept beside
    its rows, moved by every write (``dedup.df_delta``).
    """

    def __init__(self, dim: int | None = None, *, max_content_bytes: int = 32 * 1024) -> None:
        self.dim = dim
        self.max_content_bytes = max_content_bytes
        self._rows: defaultdict[str, dict[str, _Row]] = defaultdict(dict)
        self._df: defaultdict[str, TermCounts] = defaultdict(TermCounts)
        self._locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._ops: dict[tuple[str, str], Any] = {}
        self._versions: defaultdict[str, list[MemoryVersion]] = defaultdict(list)
        self._model: EmbeddingModel | None = None

    async def _recorded(self) -> EmbeddingModel | None:
        return self._model

    async def _record(self, model: EmbeddingModel) -> None:
        if self._model is None:
            self._model = model

    async def _store(self, owner: str, content: str, embedding: list[float] | None,
                     metadata: dict[str, Any], *, cuts: Cuts,
                     now: datetime, op_id: str | None) -> StoreResult:
        async with self._locks[owner]:
            if op_id is not None and (owner, op_id) in self._ops:
                done: StoreResult = self._ops[(owner, op_id)]
                return done
            result = await self._store_locked(owner, content, embedding, metadata, cuts, now)
            if op_id is not None:
                self._ops[(owner, op_id)] = result
            return result

    async def _store_locked(self, owner: str, content: str, embedding: list[float] | None,
                            metadata: dict[str, Any], cuts: Cuts, now: datetime
                            ) -> StoreResult:
        rows = self._rows[owner]
        found: list[Neighbour] = []
        if embedding is not None:
            sims = [(cosine(embedding, row.vec), mid) for mid, row in rows.items()
                    if row.vec is not None]
            sims.sort(key=lambda x: -x[0])
            found = [Neighbour(mid, rows[mid].memory.content, sim)
                     for sim, mid in sims[:cuts.nearest]]
        h = content_hash(content)
        same = next((m for m, row in rows.items() if content_hash(row.memory.content) == h),
                    None)
        if same is not None and all(n.id != same for n in found):
            found.append(Neighbour(same, rows[same].memory.content, None))
        j = await decide(content, found, cuts)
        near = None if j is None or j.memory_id is None else rows[j.memory_id]
        w = outcome_of(j, None if near is None else near.memory, owner, content, metadata,
                       embedding is not None, now, self.limits)
        new = w.memory
        if w.version is not None:
            self._versions[owner].append(w.version)
        if w.removes is not None:
            del rows[w.removes]
        if w.inserts:
            vec = None if embedding is None else np.asarray(embedding)
            rows[new.id] = _Row(new, vec, fold(new.content))
            self._df[owner].apply(df_delta(None if near is None or w.removes is None
                                           else near.memory.content, new.content))
        else:
            assert near is not None
            rows[new.id] = _Row(new, near.vec, fold(new.content))
            self._df[owner].apply(df_delta(near.memory.content, new.content))
        return w.result

    async def _store_many(self, owner: str, items: Sequence[BatchItem], *, cuts: Cuts,
                          now: datetime, op_id: str | None) -> list[StoreResult]:
        async with self._locks[owner]:
            if op_id is not None and (owner, op_id) in self._ops:
                return list(self._ops[(owner, op_id)])
            results = [await self._store_locked(owner, text, vec, meta, cuts, now)
                       for text, vec, meta in items]
            if op_id is not None:
                self._ops[(owner, op_id)] = results
            return results

    async def _update(self, owner: str, memory_id: str, content: str,
                      embedding: list[float] | None, metadata: dict[str, Any] | None, *,
                      now: datetime, op_id: str | None) -> VectorMemory:
        async with self._locks[owner]:
            if op_id is not None and (owner, op_id) in self._ops:
                done: VectorMemory = self._ops[(owner, op_id)]
                return done
            old = await self._get(owner, memory_id)
            new = updated(old, content, metadata, embedding is not None, now)
            self._versions[owner].append(closed(old, now, "update"))
            vec = None if embedding is None else np.asarray(embedding)
            self._rows[owner][memory_id] = _Row(new, vec, fold(new.content))
            self._df[owner].apply(df_delta(old.content, new.content))
            if op_id is not None:
                self._ops[(owner, op_id)] = new
            return new

    async def _supersede(self, owner: str, memory_id: str, content: str,
                         embedding: list[float] | None, metadata: dict[str, Any] | None, *,
                         by: str | None, reason: str | None, now: datetime,
                         op_id: str | None) -> VectorMemory:
        async with self._locks[owner]:
            if op_id is not None and (owner, op_id) in self._ops:
                done: VectorMemory = self._ops[(owner, op_id)]
                return done
            old = await self._get(owner, memory_id)
            new = successor(old, content, metadata, embedding is not None, now)
            self._versions[owner].append(
                closed(old, now, "supersede", superseded_by=new.id, by=by, reason=reason))
            rows = self._rows[owner]
            del rows[memory_id]
            vec = None if embedding is None else np.asarray(embedding)
            rows[new.id] = _Row(new, vec, fold(new.content))
            self._df[owner].apply(df_delta(old.content, new.content))
            if op_id is not None:
                self._ops[(owner, op_id)] = new
            return new

    async def _history(self, owner: str, memory_id: str) -> list[MemoryVersion]:
        return [v for v in self._versions.get(owner, [])
                if memory_id in (v.memory_id, v.superseded_by)]

    async def _term_stats(self, owners: Sequence[str], terms: Sequence[str]) -> TermStats:
        docs = sum(len(self._rows.get(o, {})) for o in owners)
        per_owner = [prefix_df(self._df[o], len(self._rows.get(o, {})), terms)
                     for o in owners if o in self._df]
        return TermStats(docs, dict(zip(terms, summed(per_owner, len(terms)), strict=True)))

    async def _candidates(self, owners: Sequence[str], terms: Sequence[str],
                          embedding: list[float] | None, *, vector_k: int,
                          keyword_k: int, weights: Sequence[float],
                          stats: TermStats, where: Mapping[str, Any] | None = None
                          ) -> list[Candidate]:
        rows = [r for o in owners for r in self._rows.get(o, {}).values()
                if matches(r.memory.metadata, where)]

        def candidate(row: _Row) -> Candidate:
            m = row.memory
            sim = (cosine(embedding, row.vec)
                   if embedding is not None and row.vec is not None else None)
            return Candidate(m.id, m.content, m.updated_at, sim, m, row.folded)

        out: dict[str, Candidate] = {}
        if embedding is not None:
            with_vec = [candidate(r) for r in rows if r.vec is not None]
            with_vec.sort(key=lambda c: -(c.similarity or 0.0))
            for c in with_vec[:vector_k]:
                out[c.id] = c
        for r in keyword_order(rows, terms, weights, keyword_k, folded=lambda r: r.folded,
                               updated_at=lambda r: r.memory.updated_at,
                               ident=lambda r: r.memory.id):
            if r.memory.id not in out:
                out[r.memory.id] = candidate(r)
        return list(out.values())

    async def _get(self, owner: str, memory_id: str) -> VectorMemory:
        row = self._rows.get(owner, {}).get(memory_id)
        if row is None:
            raise MemoryNotFound(f"owner {owner!r} has no memory {memory_id!r}")
        return row.memory

    async def _delete(self, owner: str, memory_id: str) -> bool:
        async with self._locks[owner]:
            row = self._rows.get(owner, {}).pop(memory_id, None)
            if row is None:
                return False
            self._df[owner].apply(df_delta(row.memory.content, None))
            return True

    async def _list(self, owner: str, limit: int, offset: int,
                    where: Mapping[str, Any] | None = None) -> list[VectorMemory]:
        mems = sorted((r.memory for r in self._rows.get(owner, {}).values()
                       if matches(r.memory.metadata, where)),
                      key=lambda m: (-m.updated_at.timestamp(), m.id))
        return mems[offset:offset + limit]

    async def count(self, owner: str) -> int:
        return len(self._rows.get(owner, {}))

    async def _dump(self, owner: str) -> list[tuple[VectorMemory, list[float] | None]]:
        return [(r.memory, None if r.vec is None else [float(x) for x in r.vec])
                for r in self._rows.get(owner, {}).values()]

    async def _restore(self, owner: str,
                       items: Sequence[tuple[VectorMemory, list[float] | None]]) -> None:
        async with self._locks[owner]:
            rows = self._rows[owner]
            for mem, vec in items:
                rows[mem.id] = _Row(mem, None if vec is None else np.asarray(vec),
                                    fold(mem.content))
                self._df[owner].apply(df_delta(None, mem.content))

    async def _all_versions(self, owner: str) -> list[MemoryVersion]:
        return list(self._versions.get(owner, []))

    async def _restore_versions(self, owner: str, versions: Sequence[MemoryVersion]) -> None:
        async with self._locks[owner]:
            self._versions[owner].extend(versions)

    async def _forget(self, owner: str) -> int:
        async with self._locks[owner]:
            gone = len(self._rows.pop(owner, {}))
            self._df.pop(owner, None)
            self._versions.pop(owner, None)
            for key in [k for k in self._ops if k[0] == owner]:
                del self._ops[key]
            return gone


