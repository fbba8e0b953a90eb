"""L2 on Redis: semantic memories with dedup-merge and hybrid search candidates.

Keys of owner ``o`` (prefix ``p``)::

    p:{o}:m:<id>    hash    owner, content, folded, meta (JSON), created, updated,
                            vec (float64 bytes; absent without an embedding)
    p:{o}:l2:ids    zset    memory ids, scored by creation time
    p:{o}:l2:ver    string  a random token, replaced by every write of the owner
    p:{o}:l2:df     hash    memories per term, moved by every write (see ``df``)
    p:{o}:l2:hv:*   list    earlier versions of a memory; ``l2:sb:*`` (see ``versions``)
    p:{o}:l2:terms  zset    the terms of that hash, in code point order (see ``df``)

The token lets each process cache an owner's rows (``rows.RowCache``): one
round trip checks it and, only when it changed, returns the rows. A store is an
optimistic transaction (WATCH the token, read the rows, decide insert or merge
exactly as ``memory.py`` does, MULTI/EXEC with the document frequencies); writers
of one owner in this process also queue on a lock, so they do not make each other
retry. A store with an ``op_id`` records its result in ``p:{o}:l2:op:<op_id>`` in
the same transaction (kept for ``OP_ID_RETENTION_S``); a retry returns that result
and writes nothing.

Search candidates are gathered in ``search``: with the search module, vector
candidates come from an HNSW index (see ``search_module``); without it, from exact
cosine over the cached rows.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import numpy as np

from ...errors import BackendError, MemoryNotFound
from ...models import MemoryVersion, StoreResult, VectorMemory
from ...scoring import cosine
from ...text import content_hash, fold
from ..base import VectorStore
from ..dedup import df_delta, merge_target, merged
from ..versions import matches
from . import df, versions
from . import search_module as fts
from .common import (
    MAX_TX_ATTEMPTS,
    OP_ID_RETENTION_S,
    Keys,
    OwnerLocks,
    close_client,
    committed,
    text,
    translate,
)
from .rows import (
    FETCH_ROWS,
    NO_TOKEN,
    ROW_FIELDS,
    OwnerRows,
    Row,
    RowCache,
    make_row,
    row_from_fields,
    vec_bytes,
)
from .search import RedisSearch


def _token() -> str:
    return uuid.uuid4().hex


class RedisVectorStore(RedisSearch, VectorStore):
    """L2 on a Redis server; HNSW search when the server has the search module."""

    def __init__(self, client: Any, prefix: str, dim: int | None, *,
                 max_content_bytes: int = 32 * 1024, ef_search: int = 100,
                 use_search_module: bool | None = None, cache_owners: int = 1024) -> None:
        self.dim = dim
        self.max_content_bytes = max_content_bytes
        self._r = client
        self._keys = Keys(prefix)
        self._ef = ef_search
        self._locks = OwnerLocks()
        self._cache = RowCache(cache_owners)
        self._want_module = use_search_module
        self._module: bool | None = None
        self._closed = False
        self._fetch = client.register_script(FETCH_ROWS)
        self._read_df = client.register_script(df.READ)

    @property
    def search_module(self) -> bool | None:
        """Whether KNN runs on RediSearch (``None`` until ``setup`` or the first search)."""
        return self._module

    async def setup(self) -> None:
        with translate("setup"):
            await self._ensure_setup(force=True)

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            await close_client(self._r)

    async def _ensure_setup(self, *, force: bool = False) -> bool:
        if self._module is None or force:
            found = await fts.has_search_module(self._r)
            if self._want_module and not found:
                raise BackendError("use_search_module=True but the Redis server has no "
                                   "search module (FT.* commands)")
            module = found if self._want_module is None else self._want_module
            if module:
                await fts.create_index(self._r, self._keys, self.dim)
            self._module = module
        return self._module

    # -- rows ------------------------------------------------------------------------

    def _fetch_args(self, owner: str, token: str) -> tuple[list[str], list[str]]:
        k = self._keys
        return [k.l2_version(owner), k.l2_ids(owner)], [token, k.l2_doc_prefix(owner)]

    async def _rows(self, client: Any, owner: str) -> OwnerRows:
        """The owner's rows via ``client`` (a watched pipeline in a transaction)."""
        token = self._cache.token(owner)
        for _ in range(2):
            keys, args = self._fetch_args(owner, token)
            reply = await self._fetch(keys, args, client=client)
            rows = self._cache.resolve(owner, reply)
            if rows is not None:
                return rows
            token = NO_TOKEN
        raise BackendError(f"owner {owner!r}: could not read a consistent set of memories")

    # -- writes -----------------------------------------------------------------------

    async def _store(self, owner: str, content: str, embedding: list[float] | None,
                     metadata: dict[str, Any], *, threshold: float, now: datetime,
                     op_id: str | None) -> StoreResult:
        from redis.exceptions import WatchError

        k = self._keys
        query = None if embedding is None else np.asarray(embedding, dtype=np.float64)
        async with self._locks.hold(owner):
            with translate("store"):
                for _ in range(MAX_TX_ATTEMPTS):
                    async with self._r.pipeline(transaction=True) as pipe:
                        try:
                            await pipe.watch(k.l2_version(owner))
                            done = None if op_id is None else await pipe.get(
                                k.l2_op(owner, op_id))
                            rows = await self._rows(pipe, owner)
                            counted = bool(await pipe.hexists(k.l2_df(owner), df.COMPLETE))
                        except WatchError:
                            continue  # the connection dropped before any write: again
                        if done is not None:  # a retry of a recorded store
                            return StoreResult.model_validate_json(done)
                        result, row = self._decide(rows, owner, content, query, metadata,
                                                   threshold, now)
                        old = rows.rows.get(row.memory.id)
                        delta = df_delta(None if old is None else old.memory.content, content)
                        token = _token()
                        pipe.multi()
                        self._queue_write(pipe, row, is_new=not result.merged)
                        self._queue_df(pipe, owner, delta, 0 if result.merged else 1,
                                       None if counted else rows)
                        pipe.set(k.l2_version(owner), token)
                        if op_id is not None:
                            pipe.set(k.l2_op(owner, op_id), result.model_dump_json(),
                                     ex=OP_ID_RETENTION_S)
                        if await committed(pipe) is None:
                            continue  # another writer came first: again
                    rows.token = token
                    rows.put(row)
                    self._cache.put(owner, rows)
                    return result
        raise BackendError(f"owner {owner!r}: too many concurrent writers, store gave up")

    # The versioned writes: each is its backend's ``versions`` function, whose first
    # argument is the store.
    _store_many = versions.store_many
    _update = versions.update
    _supersede = versions.supersede
    _history = versions.history

    def _decide(self, rows: OwnerRows, owner: str, content: str, query: np.ndarray | None,
                metadata: dict[str, Any], threshold: float,
                now: datetime) -> tuple[StoreResult, Row]:
        """Insert or merge, exactly as the in-memory reference backend decides."""
        nearest: tuple[str, float] | None = None
        if query is not None:
            best = rows.nearest(query)
            if best is not None:
                vec = rows.rows[best].vec
                assert vec is not None
                nearest = (best, cosine(query, vec))
        target = merge_target(nearest, threshold, lambda: rows.with_hash(content_hash(content)))
        if target is not None:
            old = rows.rows[target[0]]
            new = merged(old.memory, content, metadata, now, self.limits)
            return StoreResult(memory=new, merged=True, similarity=target[1]), \
                make_row(new, old.vec)
        mem = VectorMemory(owner=owner, content=content, metadata=metadata, created_at=now,
                           updated_at=now, has_embedding=query is not None)
        return StoreResult(memory=mem, merged=False), make_row(mem, query)

    def _queue_df(self, pipe: Any, owner: str, delta: Mapping[str, int], docs_delta: int,
                  uncounted: OwnerRows | None) -> None:
        """Queue the write's change of the owner's document frequencies; ``uncounted``:
        the owner's rows before the write, when its frequencies were never counted."""
        key, terms_key = self._keys.l2_df(owner), self._keys.l2_terms(owner)
        if uncounted is None:
            df.queue_delta(pipe, key, terms_key, delta, docs_delta)
        else:
            counts = df.apply(uncounted.document_frequencies().counts, delta)
            df.queue_rebuild(pipe, key, terms_key, counts, len(uncounted.rows) + docs_delta)

    def _queue_write(self, pipe: Any, row: Row, *, is_new: bool) -> None:
        mem = row.memory
        k = self._keys
        fields: dict[str, Any] = {
            "content": mem.content,
            "folded": fold(mem.content),
            "meta": json.dumps(mem.metadata, ensure_ascii=False),
            "updated": mem.updated_at.isoformat(),
        }
        if is_new:
            fields.update(owner=mem.owner, created=mem.created_at.isoformat())
            if row.vec is not None:
                fields["vec"] = vec_bytes(row.vec)
            pipe.zadd(k.l2_ids(mem.owner), {mem.id: mem.created_at.timestamp()})
        pipe.hset(k.l2_doc(mem.owner, mem.id), mapping=fields)

    async def _delete(self, owner: str, memory_id: str) -> bool:
        from redis.exceptions import WatchError

        k = self._keys
        async with self._locks.hold(owner):
            with translate("delete"):
                for _ in range(MAX_TX_ATTEMPTS):
                    async with self._r.pipeline(transaction=True) as pipe:
                        try:
                            await pipe.watch(k.l2_version(owner))
                            content = text(await pipe.hget(k.l2_doc(owner, memory_id), "content"))
                            counted = bool(await pipe.hexists(k.l2_df(owner), df.COMPLETE))
                            rows = None if counted or content is None else await self._rows(
                                pipe, owner)
                        except WatchError:
                            continue
                        if content is None:
                            return False
                        pipe.multi()
                        pipe.delete(k.l2_doc(owner, memory_id))
                        pipe.zrem(k.l2_ids(owner), memory_id)
                        pipe.set(k.l2_version(owner), _token())
                        self._queue_df(pipe, owner, df_delta(content, None), -1, rows)
                        if await committed(pipe) is None:
                            continue
                    self._cache.drop(owner)
                    return True
        raise BackendError(f"owner {owner!r}: too many concurrent writers, delete gave up")

    # -- reads ------------------------------------------------------------------------

    async def _get(self, owner: str, memory_id: str) -> VectorMemory:
        with translate("get"):
            fields = await self._r.hmget(self._keys.l2_doc(owner, memory_id), list(ROW_FIELDS))
        row = row_from_fields(owner, memory_id, fields)
        if row is None:
            raise MemoryNotFound(f"owner {owner!r} has no memory {memory_id!r}")
        return row.memory

    async def _list(self, owner: str, limit: int, offset: int,
                    where: Mapping[str, Any] | None = None) -> list[VectorMemory]:
        with translate("list"):
            rows = await self._rows(self._r, owner)
        mems = sorted((r.memory for r in rows.rows.values()
                       if matches(r.memory.metadata, where)),
                      key=lambda m: (-m.updated_at.timestamp(), m.id))
        return mems[offset:offset + limit]

    async def count(self, owner: str) -> int:
        with translate("count"):
            return int(await self._r.zcard(self._keys.l2_ids(owner)))

    async def _dump(self, owner: str) -> list[tuple[VectorMemory, list[float] | None]]:
        with translate("export"):
            rows = await self._rows(self._r, owner)
        return [(r.memory, None if r.vec is None else [float(x) for x in r.vec])
                for r in rows.rows.values()]

    async def _restore(self, owner: str,
                       items: Sequence[tuple[VectorMemory, list[float] | None]]) -> None:
        from collections import Counter

        from redis.exceptions import WatchError

        k = self._keys
        counts: Counter[str] = Counter()
        for mem, _ in items:
            counts.update(df_delta(None, mem.content))
        async with self._locks.hold(owner):
            with translate("import"):
                for _ in range(MAX_TX_ATTEMPTS):
                    async with self._r.pipeline(transaction=True) as pipe:
                        try:
                            await pipe.watch(k.l2_version(owner))
                        except WatchError:
                            continue
                        pipe.multi()
                        for mem, vec in items:
                            self._queue_write(pipe, make_row(
                                mem, None if vec is None else np.asarray(vec, dtype=np.float64)),
                                is_new=True)
                        df.queue_rebuild(pipe, k.l2_df(owner), k.l2_terms(owner), counts,
                                         len(items))
                        pipe.set(k.l2_version(owner), _token())
                        if await committed(pipe) is None:
                            continue
                    self._cache.drop(owner)
                    return
        raise BackendError(f"owner {owner!r}: too many concurrent writers, import gave up")

    async def _all_versions(self, owner: str) -> list[MemoryVersion]:
        return await versions.all_versions(self, owner)

    async def _restore_versions(self, owner: str, found: Sequence[MemoryVersion]) -> None:
        await versions.restore_versions(self, owner, list(found))

    async def _forget(self, owner: str) -> int:
        from .erase import erase

        k = self._keys
        async with self._locks.hold(owner):
            with translate("forget"):
                gone = int(await self._r.zcard(k.l2_ids(owner)))
                await erase(self._r, k.l2_doc_prefix(owner), k.owner(owner) + "l2:")
            self._cache.drop(owner)
        return gone
