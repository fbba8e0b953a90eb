"""In-process backend: the reference implementation and the test double.

Everything lives in dictionaries of this process; nothing survives it. An
``asyncio.Lock`` per owner makes dedup-then-write atomic, as a transaction
does on PostgreSQL.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import numpy as np

from ..errors import MemoryNotFound
from ..models import AuditEntry, ChatMessage, MemorySnapshot, StoreResult, VectorMemory, utcnow
from ..scoring import Candidate, cosine
from ..text import content_hash, fold
from .base import StructuredStore, VectorStore
from .dedup import merged
from .ops import AddAudit, L1Op, apply_ops


class InMemoryStructuredStore(StructuredStore):
    """L1 in a dictionary of snapshots; chat windows and audit trails in lists beside it."""

    def __init__(self, *, max_content_bytes: int = 32 * 1024) -> None:
        self.max_content_bytes = max_content_bytes
        self._snapshots: dict[str, MemorySnapshot] = {}
        self._ops: set[tuple[str, str]] = set()
        self._locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._windows: dict[tuple[str, str], list[ChatMessage]] = {}
        self._audit_log: defaultdict[str, list[AuditEntry]] = defaultdict(list)

    async def load(self, owner: str, *, now: datetime | None = None) -> MemorySnapshot:
        snap = self._snapshots.get(owner) or MemorySnapshot(owner=owner)
        return snap.live(now or utcnow())

    async def _apply(self, owner: str, ops: Sequence[L1Op], now: datetime,
                     op_id: str | None) -> MemorySnapshot:
        async with self._locks[owner]:
            current = self._snapshots.get(owner) or MemorySnapshot(owner=owner)
            if op_id is not None and (owner, op_id) in self._ops:
                return current.live(now)
            new = apply_ops(current, ops, now)
            self._snapshots[owner] = new
            if op_id is not None:
                self._ops.add((owner, op_id))
            log = self._audit_log[owner]
            for op in ops:  # a decision replaces an earlier entry of its pending id
                if isinstance(op, AddAudit):
                    log[:] = [e for e in log if e.pending_id != op.entry.pending_id]
                    log.append(op.entry)
            return new

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


class InMemoryVectorStore(VectorStore):
    """L2 in a dictionary per owner, with exact (brute-force) cosine search."""

    def __init__(self, dim: int | None = None, *, max_content_bytes: int = 32 * 1024) -> None:
        self.dim = dim
        self.max_content_bytes = max_content_bytes
        self._rows: defaultdict[str, dict[str, tuple[VectorMemory, np.ndarray | None]]] = (
            defaultdict(dict)
        )
        self._locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._ops: dict[tuple[str, str], StoreResult] = {}

    async def _store(self, owner: str, content: str, embedding: list[float] | None,
                     metadata: dict[str, Any], *, threshold: float,
                     now: datetime, op_id: str | None) -> StoreResult:
        async with self._locks[owner]:
            if op_id is not None and (owner, op_id) in self._ops:
                return self._ops[(owner, op_id)]
            result = self._store_locked(owner, content, embedding, metadata, threshold, now)
            if op_id is not None:
                self._ops[(owner, op_id)] = result
            return result

    def _store_locked(self, owner: str, content: str, embedding: list[float] | None,
                      metadata: dict[str, Any], threshold: float, now: datetime) -> StoreResult:
        rows = self._rows[owner]
        best: tuple[float, str] | None = None
        if embedding is not None:
            for mid, (_, vec) in rows.items():
                if vec is not None:
                    sim = cosine(embedding, vec)
                    if best is None or sim > best[0]:
                        best = (sim, mid)
        target: str | None = None
        similarity: float | None = None
        if best is not None and best[0] > threshold:
            similarity, target = best
        else:
            h = content_hash(content)
            target = next((m for m, (mem, _) in rows.items()
                           if content_hash(mem.content) == h), None)
        if target is not None:
            old, vec = rows[target]
            new = merged(old, content, metadata, now)
            rows[target] = (new, vec)
            return StoreResult(memory=new, merged=True, similarity=similarity)
        mem = VectorMemory(owner=owner, content=content, metadata=metadata,
                           created_at=now, updated_at=now,
                           has_embedding=embedding is not None)
        rows[mem.id] = (mem, None if embedding is None else np.asarray(embedding))
        return StoreResult(memory=mem, merged=False)

    async def _candidates(self, owners: Sequence[str], terms: Sequence[str],
                          embedding: list[float] | None, *, vector_k: int,
                          keyword_k: int) -> list[Candidate]:
        rows = [r for o in owners for r in self._rows.get(o, {}).values()]
        sims = {m.id: (cosine(embedding, v) if embedding is not None and v is not None else None)
                for m, v in rows}
        out: dict[str, Candidate] = {}
        if embedding is not None:
            with_vec = [m for m, v in rows if v is not None]
            with_vec.sort(key=lambda m: -(sims[m.id] or 0.0))
            for m in with_vec[:vector_k]:
                out[m.id] = Candidate.of(m, sims[m.id])
        if terms:
            counted = [(sum(t in fold(m.content) for t in terms), m) for m, _ in rows]
            counted = [(n, m) for n, m in counted if n > 0]
            counted.sort(key=lambda nm: (-nm[0], -nm[1].updated_at.timestamp()))
            for _, m in counted[:keyword_k]:
                out.setdefault(m.id, Candidate.of(m, sims[m.id]))
        return list(out.values())

    async def get(self, owner: str, memory_id: str) -> VectorMemory:
        row = self._rows.get(owner, {}).get(memory_id)
        if row is None:
            raise MemoryNotFound(f"owner {owner!r} has no memory {memory_id!r}")
        return row[0]

    async def _delete(self, owner: str, memory_id: str) -> bool:
        async with self._locks[owner]:
            return self._rows.get(owner, {}).pop(memory_id, None) is not None

    async def _list(self, owner: str, limit: int, offset: int) -> list[VectorMemory]:
        mems = sorted((m for m, _ in self._rows.get(owner, {}).values()),
                      key=lambda m: (-m.updated_at.timestamp(), m.id))
        return mems[offset:offset + limit]

    async def count(self, owner: str) -> int:
        return len(self._rows.get(owner, {}))
