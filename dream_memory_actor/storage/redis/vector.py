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
exactly as ``memory.py`` does: a merge, a supersession or an insert, MULTI/EXEC with
the document frequencies and the closed version); writers
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
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, NamedTuple

import numpy as np

from ...errors import BackendError, MemoryNotFound
from ...models import EmbeddingModel, MemoryVersion, StoreResult, VectorMemory
from ...scoring import cosine
from ...text import content_hash, fold
from ..base import VectorStore
from ..dedup import Cuts, Neighbour, Write, decide, df_delta, outcome_of
from ..vector_l2 import BatchItem
from ..versions import closed, matches, successor, updated
from . import df
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
from .versions import Planned, as_vector, live_memory


def _token() -> str:
    return uuid.uuid4().hex


class Decided(NamedTuple):
    """What a store writes (``RedisVectorStore._decide``): the judged write, the row to
    write (a merge keeps the old row's vector), and how the owner's document
    frequencies and count of memories move."""

    write: Write
    row: Row
    df: dict[str, int]
    docs: int


#: Rows whose approximate cosine is this close to the k-th best are re-ranked exactly.
_TIE = 1e-9


def neighbours(rows: OwnerRows, content: str, query: np.ndarray | None,
               nearest: int) -> list[Neighbour]:
    """The ``nearest`` rows most similar to ``query``, best first (the oldest among
    equals, by :func:`scoring.cosine`, as the in-memory backend ranks them), then the
    oldest row of the same text if it is not among them (its similarity ``None``)."""
    found: list[Neighbour] = []
    if query is not None and nearest > 0:
        ids, sims = rows.similarities(query)
        if ids:
            if len(ids) > nearest:  # one matrix product, then only the best few exactly
                kth = np.partition(sims, len(ids) - nearest)[len(ids) - nearest]
                picked = [int(i) for i in np.flatnonzero(sims >= kth - _TIE)]
            else:
                picked = list(range(len(ids)))
            exact = []
            for i in picked:
                vec = rows.rows[ids[i]].vec
                assert vec is not None
                exact.append((cosine(query, vec), i))
            exact.sort(key=lambda x: (-x[0], x[1]))
            found = [Neighbour(ids[i], rows.rows[ids[i]].memory.content, sim)
                     for sim, i in exact[:nearest]]
    same = rows.with_hash(content_hash(content))
    if same is not None and all(n.id != same for n in found):
        found.append(Neighbour(same, rows.rows[same].memory.content, None))
    return found


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

    # -- the embedding model ----------------------------------------------------------

    async def _recorded(self) -> EmbeddingModel | None:
        with translate("embedding model"):
            raw = await self._r.get(self._keys.embedding_model())
        return None if raw is None else EmbeddingModel.model_validate_json(raw)

    async def _record(self, model: EmbeddingModel) -> None:
        with translate("embedding model"):
            await self._r.set(self._keys.embedding_model(), model.model_dump_json(), nx=True)

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
                     metadata: dict[str, Any], *, cuts: Cuts, now: datetime,
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
                        d = await self._decide(rows, owner, content, query, metadata, cuts,
                                               now)
                        result = d.write.result
                        token = _token()
                        pipe.multi()
                        self._queue_closed(pipe, owner, d.write)
                        if d.write.removes is not None:
                            self._queue_remove(pipe, owner, d.write.removes)
                        self._queue_write(pipe, d.row, is_new=d.write.inserts)
                        self._queue_df(pipe, owner, d.df, d.docs, None if counted else rows)
                        pipe.set(k.l2_version(owner), token)
                        if op_id is not None:
                            pipe.set(k.l2_op(owner, op_id), result.model_dump_json(),
                                     ex=OP_ID_RETENTION_S)
                        if await committed(pipe) is None:
                            continue  # another writer came first: again
                    rows.token = token
                    if d.write.removes is not None:
                        rows.remove(d.write.removes)
                    rows.put(d.row)
                    self._cache.put(owner, rows)
                    return result
        raise BackendError(f"owner {owner!r}: too many concurrent writers, store gave up")

    # -- versioned writes: one optimistic transaction each, history beside the rows --

    def _history_key(self, owner: str, memory_id: str) -> str:
        return self._keys.owner(owner) + "l2:hv:" + memory_id

    def _successor_key(self, owner: str, memory_id: str) -> str:
        return self._keys.owner(owner) + "l2:sb:" + memory_id

    async def _transact(
        self,
        owner: str,
        what: str,
        op_id: str | None,
        plan: Callable[[OwnerRows, bool], Awaitable[Planned]],
    ) -> str:
        """Run ``plan`` on the owner's rows (awaited: a store's judgement may ask a model)
        and commit what it queued, retried while another writer comes first; the recorded
        result of ``op_id`` if it was applied already."""
        from redis.exceptions import WatchError

        k = self._keys
        async with self._locks.hold(owner):
            with translate(what):
                for _ in range(MAX_TX_ATTEMPTS):
                    async with self._r.pipeline(transaction=True) as pipe:
                        try:
                            await pipe.watch(k.l2_version(owner))
                            done = None if op_id is None else await pipe.get(k.l2_op(owner, op_id))
                            rows = await self._rows(pipe, owner)
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
                    self._cache.put(owner, after)
                    return result
        raise BackendError(f"owner {owner!r}: too many concurrent writers, {what} gave up")

    async def _store_many(
        self,
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
                d = await self._decide(work, owner, content, as_vector(vec), meta, cuts, now)
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
                    self._queue_closed(pipe, owner, w)
                for mid in removed:  # a row of this batch never written: nothing to remove
                    if mid in rows.rows:
                        self._queue_remove(pipe, owner, mid)
                for mid, new in is_new.items():
                    if mid in work.rows:  # not superseded later in the batch
                        self._queue_write(pipe, work.rows[mid], is_new=new)
                self._queue_df(
                    pipe,
                    owner,
                    {t: n for t, n in delta.items() if n},
                    len(work.rows) - len(rows.rows),
                    None if counted else rows,
                )

            return json.dumps([r.model_dump(mode="json") for r in results]), queue, work

        got = await self._transact(owner, "store_many", op_id, plan)
        return [StoreResult.model_validate(r) for r in json.loads(got)]

    async def _update(
        self,
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
            old = live_memory(rows, owner, memory_id)
            new = updated(old, content, metadata, embedding is not None, now)
            row = make_row(new, as_vector(embedding))
            version = closed(old, now, "update")
            # The same order as a fresh read (creation order), with the new vector.
            after = OwnerRows(
                rows.token, [row if r.memory.id == memory_id else r for r in rows.rows.values()]
            )

            def queue(pipe: Any) -> None:
                doc = self._keys.l2_doc(owner, memory_id)
                pipe.rpush(self._history_key(owner, memory_id), version.model_dump_json())
                self._queue_write(pipe, row, is_new=False)
                if row.vec is None:
                    pipe.hdel(doc, "vec")
                else:
                    pipe.hset(doc, "vec", vec_bytes(row.vec))
                self._queue_df(
                    pipe, owner, df_delta(old.content, new.content), 0, None if counted else rows
                )

            return new.model_dump_json(), queue, after

        return VectorMemory.model_validate_json(await self._transact(owner, "update", op_id, plan))

    async def _supersede(
        self,
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
            old = live_memory(rows, owner, memory_id)
            new = successor(old, content, metadata, embedding is not None, now)
            row: Row = make_row(new, as_vector(embedding))
            version = closed(old, now, "supersede", superseded_by=new.id, by=by, reason=reason)
            after = OwnerRows(
                rows.token, [*(r for r in rows.rows.values() if r.memory.id != memory_id), row]
            )

            def queue(pipe: Any) -> None:
                k = self._keys
                encoded = version.model_dump_json()
                pipe.rpush(self._history_key(owner, memory_id), encoded)
                pipe.set(self._successor_key(owner, new.id), encoded)
                pipe.delete(k.l2_doc(owner, memory_id))
                pipe.zrem(k.l2_ids(owner), memory_id)
                self._queue_write(pipe, row, is_new=True)
                self._queue_df(
                    pipe, owner, df_delta(old.content, new.content), 0, None if counted else rows
                )

            return new.model_dump_json(), queue, after

        return VectorMemory.model_validate_json(
            await self._transact(owner, "supersede", op_id, plan))

    async def _history(self, owner: str, memory_id: str) -> list[MemoryVersion]:
        with translate("history"):
            async with self._r.pipeline(transaction=False) as pipe:
                pipe.lrange(self._history_key(owner, memory_id), 0, -1)
                pipe.get(self._successor_key(owner, memory_id))
                own, before = await pipe.execute()
        found = [MemoryVersion.model_validate_json(v) for v in own]
        if before is not None:
            found.append(MemoryVersion.model_validate_json(before))
        return found

    async def _all_versions(self, owner: str) -> list[MemoryVersion]:
        """Every closed version of the owner's memories (for export): the histories'
        lists (a successor link repeats a version that is in its memory's list)."""
        from .erase import glob_escaped

        start = self._history_key(owner, "")
        node = await self._r.node_for(start) if hasattr(self._r, "node_for") else self._r
        found: dict[str, MemoryVersion] = {}
        with translate("export"):
            async for key in node.scan_iter(match=glob_escaped(start) + "*", count=1000):
                for raw in await node.lrange(key, 0, -1):
                    v = MemoryVersion.model_validate_json(raw)
                    found[v.id] = v
        return sorted(found.values(), key=lambda v: (v.valid_to or v.valid_from, v.valid_from))

    async def _restore_versions(self, owner: str, found: Sequence[MemoryVersion]) -> None:
        """Write exported closed versions as they were (an import), in one transaction."""
        with translate("import"):
            async with self._r.pipeline(transaction=True) as pipe:
                await pipe.watch(self._keys.l2_version(owner))  # on a cluster: the owner's master
                pipe.multi()
                for v in found:
                    encoded = v.model_dump_json()
                    pipe.rpush(self._history_key(owner, v.memory_id), encoded)
                    if v.change == "supersede" and v.superseded_by is not None:
                        pipe.set(self._successor_key(owner, v.superseded_by), encoded)
                await pipe.execute()

    async def _decide(self, rows: OwnerRows, owner: str, content: str,
                      query: np.ndarray | None, metadata: dict[str, Any], cuts: Cuts,
                      now: datetime) -> Decided:
        """Judge ``content`` against the owner's nearest rows (``dedup.decide``, which may
        ask ``cuts.ask``) and decide the write (``dedup.outcome_of``), exactly as the
        in-memory reference backend does."""
        found = neighbours(rows, content, query, cuts.nearest)
        j = await decide(content, found, cuts)
        near = None if j is None or j.memory_id is None else rows.rows[j.memory_id]
        w = outcome_of(j, None if near is None else near.memory, owner, content, metadata,
                       query is not None, now, self.limits)
        if not w.inserts:  # a merge: the old row's vector stays
            assert near is not None
            return Decided(w, make_row(w.memory, near.vec),
                           df_delta(near.memory.content, w.memory.content), 0)
        row = make_row(w.memory, query)
        if w.removes is not None:  # a supersession: one memory for another
            assert near is not None
            return Decided(w, row, df_delta(near.memory.content, w.memory.content), 0)
        return Decided(w, row, df_delta(None, w.memory.content), 1)

    def _queue_closed(self, pipe: Any, owner: str, w: Write) -> None:
        """Queue the version a write closes into its memory's history (a supersession's
        also linked from the successor), as ``versions.update`` / ``supersede`` do."""
        if w.version is None:
            return
        encoded = w.version.model_dump_json()
        pipe.rpush(self._history_key(owner, w.version.memory_id), encoded)
        if w.removes is not None:
            pipe.set(self._successor_key(owner, w.memory.id), encoded)

    def _queue_remove(self, pipe: Any, owner: str, memory_id: str) -> None:
        """Queue the removal of a live memory's row (its history stays)."""
        pipe.delete(self._keys.l2_doc(owner, memory_id))
        pipe.zrem(self._keys.l2_ids(owner), memory_id)

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

    async def _forget(self, owner: str) -> int:
        from .erase import erase

        k = self._keys
        async with self._locks.hold(owner):
            with translate("forget"):
                gone = int(await self._r.zcard(k.l2_ids(owner)))
                await erase(self._r, k.l2_doc_prefix(owner), k.owner(owner) + "l2:")
            self._cache.drop(owner)
        return gone
