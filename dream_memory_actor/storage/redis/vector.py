"""L2 on Redis: semantic memories, their versions, and the search candidates' reads.

Keys of owner ``o`` (prefix ``p``)::

    p:{o}:m:<id>    hash    owner, content, folded, meta (JSON), created, updated,
                            vec (float64 bytes; absent without an embedding)
    p:{o}:l2:ids    zset    memory ids, scored by creation time
    p:{o}:l2:ver    string  a random token, replaced by every write of the owner
    p:{o}:l2:df     hash    memories per term, moved by every write (see ``df``)
    p:{o}:l2:terms  zset    the terms of that hash, in code point order (see ``df``)
    p:{o}:l2:hv:<id> list   the closed versions of memory <id> (JSON), oldest first
    p:{o}:l2:pb:<id> list   the last versions of the memories superseded by, or merged
                            into, memory <id> (JSON)
    p:{o}:l2:sb:<id> string as pb, one version (data written by earlier releases)
    p:{o}:l2:rd     hash    memory id -> when a search last found it (epoch ms)
    p:{o}:l2:op:<op_id>     the result of an applied write (kept ``OP_ID_RETENTION_S``; a
                            consolidation proposal's, which undoing it reads, for good)

Histories are neither hashes nor under the memory prefix, so neither the search
module's index nor the owner's row fetch sees them.

The token lets each process cache an owner's rows (``owner_rows.RowCache``): one round
trip checks it and, only when it changed, returns the rows. A write is an
optimistic transaction: WATCH the token, read the rows, run the plan on them (its
reads of :meth:`_rows` see these rows), then MULTI/EXEC its writes with the
document frequencies, a new token and the ``op_id`` record; retried when another
writer came first. Writers of one owner in this process also queue on a lock, so
they do not make each other retry.

A search reads the term statistics and the candidates: with the search module, vector
candidates come from an HNSW index (see ``search_module``); without it, from exact
cosine over the cached rows.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from datetime import datetime, timezone
from typing import Any

from ...errors import BackendError
from ...models import EmbeddingModel, MemoryVersion
from ...scoring import Candidate, TermStats
from ...text import fold
from ..owner_rows import NO_TOKEN, OwnerRows, RowCache, candidates
from ..terms import prefix_df, summed
from ..vector import VectorStore
from ..writes import PROPOSAL_OP, Planner, Writes, searched
from ..writes import Row as Found
from . import df, erase
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
from .rows import FETCH_ROWS, resolve, vec_bytes

#: KEYS[1]: an owner's reads hash. ARGV: memory id, epoch ms, ...: each noted field keeps
#: the latest time (a max here, so two processes' batches agree). Returns the noted
#: fields with their times, or the whole hash when none is noted.
_READS = """
if #ARGV == 0 then return redis.call('HGETALL', KEYS[1]) end
local out = {}
for i = 1, #ARGV, 2 do
  local had = tonumber(redis.call('HGET', KEYS[1], ARGV[i]) or '0')
  if tonumber(ARGV[i + 1]) > had then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
    had = tonumber(ARGV[i + 1])
  end
  out[#out + 1] = ARGV[i]
  out[#out + 1] = string.format('%d', had)
end
return out
"""

class RedisVectorStore(VectorStore):
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
        #: The owner and rows a write of this task is planned on (its reads see them).
        self._writing: ContextVar[tuple[str, OwnerRows] | None] = ContextVar(
            f"dream_memory_writing_{id(self)}", default=None)

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

    async def _model(self, record: EmbeddingModel | None, *, replace: bool = False
                     ) -> EmbeddingModel | None:
        key = self._keys.embedding_model()
        with translate("embedding model"):
            if record is not None:
                await self._r.set(key, record.model_dump_json(), nx=not replace)
            raw = await self._r.get(key)
        return None if raw is None else EmbeddingModel.model_validate_json(raw)

    async def _owners(self) -> list[str]:
        """The owners whose id sets exist: every master's keys on a cluster."""
        head, tail = self._keys.l2_ids("\x00").split("\x00")
        pattern = erase.glob_escaped(head) + "*" + erase.glob_escaped(tail)
        nodes = ([self._r.node(a) for a in await self._r.masters()]
                 if hasattr(self._r, "masters") else [self._r])
        found: set[str] = set()
        with translate("owners"):
            for node in nodes:
                async for key in node.scan_iter(match=pattern, count=1000):
                    name = key.decode() if isinstance(key, bytes) else key
                    found.add(name[len(head):len(name) - len(tail)])
        return list(found)

    # -- rows ------------------------------------------------------------------------

    def _fetch_args(self, owner: str, token: str) -> tuple[list[str], list[str]]:
        k = self._keys
        return [k.l2_version(owner), k.l2_ids(owner)], [token, k.l2_doc_prefix(owner)]

    async def _owner_rows(self, client: Any, owner: str) -> OwnerRows:
        """The owner's rows via ``client`` (a watched pipeline in a transaction)."""
        token = self._cache.token(owner)
        for _ in range(2):
            keys, args = self._fetch_args(owner, token)
            reply = await self._fetch(keys, args, client=client)
            rows = resolve(self._cache, owner, reply)
            if rows is not None:
                return rows
            token = NO_TOKEN
        raise BackendError(f"owner {owner!r}: could not read a consistent set of memories")

    async def _rows(self, owner: str, *, ids: Sequence[str] | None = None,
                    text_hash: str | None = None,
                    near: tuple[list[float], int] | None = None,
                    where: Mapping[str, Any] | None = None, limit: int | None = None,
                    offset: int = 0, vectors: bool = False) -> list[Found]:
        writing = self._writing.get()
        if writing is not None and writing[0] == owner:
            rows = writing[1]
        else:
            with translate("read"):
                rows = await self._owner_rows(self._r, owner)
        return rows.read(ids=ids, text_hash=text_hash, near=near, where=where, limit=limit,
                         offset=offset, vectors=vectors)

    # -- writes -----------------------------------------------------------------------

    async def _write(self, owner: str, what: str, op_id: str | None, plan: Planner) -> str:
        from redis.exceptions import WatchError

        k = self._keys
        async with self._locks.hold(owner):
            with translate(what):
                for _ in range(MAX_TX_ATTEMPTS):
                    async with self._r.pipeline(transaction=True) as pipe:
                        try:
                            await pipe.watch(k.l2_version(owner))
                            done = None if op_id is None else await pipe.get(
                                k.l2_op(owner, op_id))
                            rows = await self._owner_rows(pipe, owner)
                            counted = bool(await pipe.hexists(k.l2_df(owner), df.COMPLETE))
                        except WatchError:
                            continue  # the connection dropped before any write: again
                        if done is not None:  # a retry of a recorded write
                            return text(done) or ""
                        reading = self._writing.set((owner, rows))
                        try:
                            result, w = await plan()
                        finally:
                            self._writing.reset(reading)
                        if op_id is None and not (w.puts or w.drops or w.versions
                                                  or w.reopened):
                            return result
                        token = uuid.uuid4().hex
                        pipe.multi()
                        self._queue(pipe, owner, rows, w, counted)
                        pipe.set(k.l2_version(owner), token)
                        if op_id is not None:
                            pipe.set(k.l2_op(owner, op_id), result, ex=None if op_id.startswith(
                                PROPOSAL_OP) else OP_ID_RETENTION_S)  # undone from its record
                        if await committed(pipe) is None:
                            continue  # another writer came first: again
                    rows.written(w)
                    rows.token = token
                    self._cache.put(owner, rows)
                    return result
        raise BackendError(f"owner {owner!r}: too many concurrent writers, {what} gave up")

    def _queue(self, pipe: Any, owner: str, rows: OwnerRows, w: Writes, counted: bool) -> None:
        """Queue ``w`` in the transaction ``pipe``, as ``writes.Writes`` describes it."""
        k = self._keys
        for v in w.reopened:  # as written below: the same JSON
            encoded = v.model_dump_json()
            pipe.lrem(self._history_key(owner, v.memory_id), 0, encoded)
            if v.superseded_by is not None:
                pipe.lrem(self._predecessors_key(owner, v.superseded_by), 0, encoded)
        for v in w.versions:
            encoded = v.model_dump_json()
            pipe.rpush(self._history_key(owner, v.memory_id), encoded)
            if v.superseded_by is not None:
                pipe.rpush(self._predecessors_key(owner, v.superseded_by), encoded)
        for m in w.drops:
            pipe.delete(k.l2_doc(owner, m.id))
            pipe.zrem(k.l2_ids(owner), m.id)
        for p in w.puts:
            mem = p.memory
            fields: dict[str, Any] = {
                "content": mem.content,
                "folded": fold(searched(mem)),
                "meta": json.dumps(mem.metadata, ensure_ascii=False),
                "updated": mem.updated_at.isoformat(),
            }
            doc = k.l2_doc(owner, mem.id)
            if mem.context is not None:
                fields["ctx"] = mem.context
            elif p.before is not None and p.before.context is not None:
                pipe.hdel(doc, "ctx")
            if p.before is None:
                fields.update(owner=owner, created=mem.created_at.isoformat())
                pipe.zadd(k.l2_ids(owner), {mem.id: mem.created_at.timestamp()})
            if not p.keeps and p.given is not None:
                fields["vec"] = vec_bytes(p.given)
            elif not p.keeps and p.before is not None:
                pipe.hdel(doc, "vec")
            pipe.hset(doc, mapping=fields)
        key, terms_key = k.l2_df(owner), k.l2_terms(owner)
        if counted:
            df.queue_delta(pipe, key, terms_key, w.term_delta(), w.count_delta())
        else:  # the owner's frequencies were never counted: count them now
            counts = df.apply(rows.document_frequencies().counts, w.term_delta())
            df.queue_rebuild(pipe, key, terms_key, counts, len(rows.rows) + w.count_delta())

    # -- search candidates ----------------------------------------------------------

    async def _term_stats(self, owners: Sequence[str], terms: Sequence[str]) -> TermStats:
        k = self._keys
        per_owner: list[list[int]] = []
        docs = 0
        with translate("search"):
            if len(owners) == 1:  # one EVALSHA (a pipeline would first send SCRIPT EXISTS)
                replies = [await self._read_df(keys=[k.l2_df(owners[0]),
                                                     k.l2_terms(owners[0])], args=terms)]
            else:
                async with self._r.pipeline(transaction=False) as pipe:
                    for o in owners:
                        pipe.eval(df.READ, 2, k.l2_df(o), k.l2_terms(o), *terms)
                    replies = await pipe.execute()
            for o, reply in zip(owners, replies, strict=True):
                got = df.parse_read(reply)
                if got is None:  # never counted: count the rows this process reads
                    rows = await self._owner_rows(self._r, o)
                    n = len(rows.rows)
                    got = (n, prefix_df(rows.document_frequencies(), n, terms))
                docs += got[0]
                per_owner.append(got[1])
        return summed(terms, docs, per_owner)

    async def _candidates(self, owners: Sequence[str], terms: Sequence[str],
                          embedding: list[float] | None, *, vector_k: int,
                          keyword_k: int, weights: Sequence[float],
                          stats: TermStats, where: Mapping[str, Any] | None = None
                          ) -> list[Candidate]:
        with translate("search"):
            module = await self._ensure_setup()
            # The index holds no metadata: a filtered search ranks the matching rows
            # (read for the keyword candidates anyway) by exact cosine.
            knn = module and embedding is not None and self.dim is not None and not where
            by_owner, hits = await self._fetch_for_search(owners, embedding, vector_k, knn)
        return candidates(by_owner, terms, weights, embedding, vector_k=vector_k,
                          keyword_k=keyword_k, where=where, hits=hits if knn else None)

    async def _fetch_for_search(self, owners: Sequence[str], embedding: list[float] | None,
                                vector_k: int, knn: bool
                                ) -> tuple[dict[str, OwnerRows], list[tuple[str, str]]]:
        """Every owner's rows (cache-checked) and, with KNN, the nearest ids: one round trip."""
        from redis.exceptions import ResponseError

        if len(owners) == 1 and not knn:
            # One EVALSHA. The pipeline below would first send SCRIPT EXISTS (redis-py
            # does for every pipeline that runs a Script), a second round trip.
            return {owners[0]: await self._owner_rows(self._r, owners[0])}, []
        stale: set[str] = set()
        for attempt in range(4):
            async with self._r.pipeline(transaction=False) as pipe:
                for o in owners:
                    keys, args = self._fetch_args(
                        o, NO_TOKEN if o in stale else self._cache.token(o))
                    await self._fetch(keys, args, client=pipe)  # queued; loaded on execute
                if knn:
                    assert embedding is not None
                    pipe.execute_command(*fts.knn_command(
                        self._keys, self.dim, owners, vec_bytes(embedding), vector_k, self._ef))
                try:
                    replies = await pipe.execute()
                except ResponseError as exc:
                    if attempt < 3 and fts.is_missing_index(exc):  # the server restarted empty
                        await fts.create_index(self._r, self._keys, self.dim)
                        continue
                    raise
            by_owner: dict[str, OwnerRows] = {}
            for o, reply in zip(owners, replies[:len(owners)], strict=True):
                rows = resolve(self._cache, o, reply)
                if rows is None:
                    stale.add(o)
                else:
                    by_owner[o] = rows
            if len(by_owner) == len(owners):
                hits = fts.knn_ids(self._keys, owners, replies[-1]) if knn else []
                return by_owner, hits
        raise BackendError("could not read the owners' memories consistently")

    # -- versions ---------------------------------------------------------------------

    def _history_key(self, owner: str, memory_id: str) -> str:
        return self._keys.owner(owner) + "l2:hv:" + memory_id

    def _reads_key(self, owner: str) -> str:
        return self._keys.owner(owner) + "l2:rd"

    async def _reads(self, owner: str, noted: Mapping[str, datetime]) -> dict[str, datetime]:
        with translate("reads"):
            flat = await self._r.eval(_READS, 1, self._reads_key(owner),
                                      *(x for mid, at in noted.items()
                                        for x in (mid, str(int(at.timestamp() * 1000)))))
        return {text(k) or "": datetime.fromtimestamp(int(v) / 1000, timezone.utc)
                for k, v in zip(flat[::2], flat[1::2], strict=True)}

    def _successor_key(self, owner: str, memory_id: str) -> str:
        return self._keys.owner(owner) + "l2:sb:" + memory_id

    def _predecessors_key(self, owner: str, memory_id: str) -> str:
        return self._keys.owner(owner) + "l2:pb:" + memory_id

    async def _versions(self, owner: str, memory_id: str | None = None) -> list[MemoryVersion]:
        if memory_id is not None:
            with translate("history"):
                async with self._r.pipeline(transaction=False) as pipe:
                    pipe.lrange(self._history_key(owner, memory_id), 0, -1)
                    pipe.get(self._successor_key(owner, memory_id))
                    pipe.lrange(self._predecessors_key(owner, memory_id), 0, -1)
                    own, before, closed_into = await pipe.execute()
            found = [MemoryVersion.model_validate_json(v) for v in own]
            if before is not None:  # written before closed versions named theirs in a list
                found.append(MemoryVersion.model_validate_json(before))
            found += [MemoryVersion.model_validate_json(v) for v in closed_into]
            return found
        # Every history list (a successor link repeats a version that is in its list).
        start = self._history_key(owner, "")
        node = await self._r.node_for(start) if hasattr(self._r, "node_for") else self._r
        every: dict[str, MemoryVersion] = {}
        with translate("export"):
            async for key in node.scan_iter(match=erase.glob_escaped(start) + "*", count=1000):
                for raw in await node.lrange(key, 0, -1):
                    v = MemoryVersion.model_validate_json(raw)
                    every[v.id] = v
        return list(every.values())

    async def _forget(self, owner: str) -> int:
        k = self._keys
        async with self._locks.hold(owner):
            with translate("forget"):
                gone = int(await self._r.zcard(k.l2_ids(owner)))
                await erase.erase(self._r, k.l2_doc_prefix(owner), k.owner(owner) + "l2:")
            self._cache.drop(owner)
        return gone
