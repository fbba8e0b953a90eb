"""Batches, updates and supersessions of L2 memories on Redis, with their history.

Keys of owner ``o`` besides those of ``vector``::

    p:{o}:l2:hv:<id>   list    the closed versions of memory <id> (JSON), oldest first
    p:{o}:l2:sb:<id>   string  the last version of the memory <id> superseded (JSON)

Histories are neither hashes nor under the memory prefix, so neither the search
module's index nor the owner's row fetch sees them. Each write is one optimistic
transaction, as ``store`` is (WATCH the owner's token, decide on the rows read,
MULTI/EXEC with the document frequencies and the ``op_id`` record).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import numpy as np

from ...errors import BackendError, MemoryNotFound
from ...models import MemoryVersion, StoreResult, VectorMemory
from ..dedup import Cuts, Write, df_delta
from ..vector_l2 import BatchItem
from ..versions import closed, matches, successor, updated
from . import df
from .common import (
    MAX_TX_ATTEMPTS,
    OP_ID_RETENTION_S,
    committed,
    text,
)
from .common import translate as translate_errors
from .rows import OwnerRows, Row, make_row, vec_bytes

if TYPE_CHECKING:
    from .vector import RedisVectorStore

#: What a write decided: its result (JSON), the commands to queue, the rows after it.
Planned = tuple[str, Callable[[Any], None], OwnerRows]


def history_key(store: RedisVectorStore, owner: str, memory_id: str) -> str:
    return store._keys.owner(owner) + "l2:hv:" + memory_id


def successor_key(store: RedisVectorStore, owner: str, memory_id: str) -> str:
    return store._keys.owner(owner) + "l2:sb:" + memory_id


def filtered(rows: OwnerRows, where: Mapping[str, Any] | None) -> OwnerRows:
    """The rows whose metadata matches ``where`` (all of them without a filter)."""
    if not where:
        return rows
    return OwnerRows(
        rows.token, [r for r in rows.rows.values() if matches(r.memory.metadata, where)]
    )


async def _transact(
    store: RedisVectorStore,
    owner: str,
    what: str,
    op_id: str | None,
    plan: Callable[[OwnerRows, bool], Awaitable[Planned]],
) -> str:
    """Run ``plan`` on the owner's rows (awaited: a store's judgement may ask a model)
    and commit what it queued, retried while another writer comes first; the recorded
    result of ``op_id`` if it was applied already."""
    from redis.exceptions import WatchError

    from .vector import _token

    k = store._keys
    async with store._locks.hold(owner):
        with translate_errors(what):
            for _ in range(MAX_TX_ATTEMPTS):
                async with store._r.pipeline(transaction=True) as pipe:
                    try:
                        await pipe.watch(k.l2_version(owner))
                        done = None if op_id is None else await pipe.get(k.l2_op(owner, op_id))
                        rows = await store._rows(pipe, owner)
                        counted = bool(await pipe.hexists(k.l2_df(owner), df.DOCS))
                    except WatchError:
                        continue
                    if done is not None:
                        return text(done) or ""
                    result, queue, after = await plan(rows, counted)
                    token = _token()
                    pipe.multi()
                    queue(pipe)
                    pipe.set(k.l2_version(owner), token)
                    if op_id is not None:
                        pipe.set(k.l2_op(owner, op_id), result, ex=OP_ID_RETENTION_S)
                    if await committed(pipe) is None:
                        continue
                after.token = token
                store._cache.put(owner, after)
                return result
    raise BackendError(f"owner {owner!r}: too many concurrent writers, {what} gave up")


def _vec(embedding: list[float] | None) -> np.ndarray | None:
    return None if embedding is None else np.asarray(embedding, dtype=np.float64)


async def store_many(
    store: RedisVectorStore,
    owner: str,
    items: Sequence[BatchItem],
    *,
    cuts: Cuts,
    now: datetime,
    op_id: str | None,
) -> list[StoreResult]:
    """Every item as ``store`` decides it, against the rows as the earlier items left
    them (merged into, superseded, inserted), committed in one transaction."""

    async def plan(rows: OwnerRows, counted: bool) -> Planned:
        work = OwnerRows(rows.token, rows.rows.values())
        results: list[StoreResult] = []
        is_new: dict[str, bool] = {}  # each row written once, as it ends the batch
        removed: list[str] = []
        closing: list[Write] = []
        delta: Counter[str] = Counter()
        for content, vec, meta in items:
            d = await store._decide(work, owner, content, _vec(vec), meta, cuts, now)
            delta.update(d.df)
            if d.write.version is not None:
                closing.append(d.write)
            if d.write.removes is not None:
                work.remove(d.write.removes)
                removed.append(d.write.removes)
            is_new.setdefault(d.row.memory.id, d.write.inserts)
            work.put(d.row)
            results.append(d.write.result)

        def queue(pipe: Any) -> None:
            for w in closing:
                store._queue_closed(pipe, owner, w)
            for mid in removed:  # a row of this batch never written: nothing to remove
                if mid in rows.rows:
                    store._queue_remove(pipe, owner, mid)
            for mid, new in is_new.items():
                if mid in work.rows:  # not superseded later in the batch
                    store._queue_write(pipe, work.rows[mid], is_new=new)
            store._queue_df(
                pipe,
                owner,
                {t: n for t, n in delta.items() if n},
                len(work.rows) - len(rows.rows),
                None if counted else rows,
            )

        return json.dumps([r.model_dump(mode="json") for r in results]), queue, work

    got = await _transact(store, owner, "store_many", op_id, plan)
    return [StoreResult.model_validate(r) for r in json.loads(got)]


def _live(rows: OwnerRows, owner: str, memory_id: str) -> VectorMemory:
    row = rows.rows.get(memory_id)
    if row is None:
        raise MemoryNotFound(f"owner {owner!r} has no memory {memory_id!r}")
    return row.memory


async def update(
    store: RedisVectorStore,
    owner: str,
    memory_id: str,
    content: str,
    embedding: list[float] | None,
    metadata: dict[str, Any] | None,
    *,
    now: datetime,
    op_id: str | None,
) -> VectorMemory:
    async def plan(rows: OwnerRows, counted: bool) -> Planned:
        old = _live(rows, owner, memory_id)
        new = updated(old, content, metadata, embedding is not None, now)
        row = make_row(new, _vec(embedding))
        version = closed(old, now, "update")
        # The same order as a fresh read (creation order), with the new vector.
        after = OwnerRows(
            rows.token, [row if r.memory.id == memory_id else r for r in rows.rows.values()]
        )

        def queue(pipe: Any) -> None:
            doc = store._keys.l2_doc(owner, memory_id)
            pipe.rpush(history_key(store, owner, memory_id), version.model_dump_json())
            store._queue_write(pipe, row, is_new=False)
            if row.vec is None:
                pipe.hdel(doc, "vec")
            else:
                pipe.hset(doc, "vec", vec_bytes(row.vec))
            store._queue_df(
                pipe, owner, df_delta(old.content, new.content), 0, None if counted else rows
            )

        return new.model_dump_json(), queue, after

    return VectorMemory.model_validate_json(await _transact(store, owner, "update", op_id, plan))


async def supersede(
    store: RedisVectorStore,
    owner: str,
    memory_id: str,
    content: str,
    embedding: list[float] | None,
    metadata: dict[str, Any] | None,
    *,
    by: str | None,
    reason: str | None,
    now: datetime,
    op_id: str | None,
) -> VectorMemory:
    async def plan(rows: OwnerRows, counted: bool) -> Planned:
        old = _live(rows, owner, memory_id)
        new = successor(old, content, metadata, embedding is not None, now)
        row: Row = make_row(new, _vec(embedding))
        version = closed(old, now, "supersede", superseded_by=new.id, by=by, reason=reason)
        after = OwnerRows(
            rows.token, [*(r for r in rows.rows.values() if r.memory.id != memory_id), row]
        )

        def queue(pipe: Any) -> None:
            k = store._keys
            encoded = version.model_dump_json()
            pipe.rpush(history_key(store, owner, memory_id), encoded)
            pipe.set(successor_key(store, owner, new.id), encoded)
            pipe.delete(k.l2_doc(owner, memory_id))
            pipe.zrem(k.l2_ids(owner), memory_id)
            store._queue_write(pipe, row, is_new=True)
            store._queue_df(
                pipe, owner, df_delta(old.content, new.content), 0, None if counted else rows
            )

        return new.model_dump_json(), queue, after

    return VectorMemory.model_validate_json(await _transact(store, owner, "supersede", op_id, plan))


async def history(store: RedisVectorStore, owner: str, memory_id: str) -> list[MemoryVersion]:
    with translate_errors("history"):
        async with store._r.pipeline(transaction=False) as pipe:
            pipe.lrange(history_key(store, owner, memory_id), 0, -1)
            pipe.get(successor_key(store, owner, memory_id))
            own, before = await pipe.execute()
    found = [MemoryVersion.model_validate_json(v) for v in own]
    if before is not None:
        found.append(MemoryVersion.model_validate_json(before))
    return found


async def all_versions(store: RedisVectorStore, owner: str) -> list[MemoryVersion]:
    """Every closed version of the owner's memories (for export): the histories'
    lists (a successor link repeats a version that is in its memory's list)."""
    from .erase import glob_escaped

    start = history_key(store, owner, "")
    node = await store._r.node_for(start) if hasattr(store._r, "node_for") else store._r
    found: dict[str, MemoryVersion] = {}
    with translate_errors("export"):
        async for key in node.scan_iter(match=glob_escaped(start) + "*", count=1000):
            for raw in await node.lrange(key, 0, -1):
                v = MemoryVersion.model_validate_json(raw)
                found[v.id] = v
    return sorted(found.values(), key=lambda v: (v.valid_to or v.valid_from, v.valid_from))


async def restore_versions(store: RedisVectorStore, owner: str,
                           versions: list[MemoryVersion]) -> None:
    """Write exported closed versions as they were (an import), in one transaction."""
    with translate_errors("import"):
        async with store._r.pipeline(transaction=True) as pipe:
            await pipe.watch(store._keys.l2_version(owner))  # on a cluster: the owner's master
            pipe.multi()
            for v in versions:
                encoded = v.model_dump_json()
                pipe.rpush(history_key(store, owner, v.memory_id), encoded)
                if v.change == "supersede" and v.superseded_by is not None:
                    pipe.set(successor_key(store, owner, v.superseded_by), encoded)
            await pipe.execute()
