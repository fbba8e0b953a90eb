"""L1 on Redis: rules, facts, status and the pending queue of each owner; the audit
trail of HITL decisions and the L3 chat windows beside them.

Keys of owner ``o`` (prefix ``p``)::

    p:{o}:l1            string  JSON: version, updated_at, rules, facts
    p:{o}:l1:sk         set     the status keys
    p:{o}:l1:st:<key>   string  JSON {"v": value, "x": expires_at}; PXAT when it has a TTL
    p:{o}:l1:pq         list    the pending item ids, oldest first
    p:{o}:l1:pd:<id>    string  JSON of the pending item; PXAT when it expires
    p:{o}:l1:au         list    the slots of the audit entries, newest first
    p:{o}:l1:ad:<slot>  string  JSON of the audit entry in <slot>: the decision on
                                pending item <pid> in slot <pid>, the undo of its
                                proposal in slot <pid> NUL "undone" (no id holds a NUL)
    p:{o}:l3:w:<conv>   list    JSON of the messages in the window of <conv>, oldest first
    p:{o}:l1:hx         list    JSON of the closed rules and facts, oldest closed first
    p:{o}:l1:sh:<key>   list    JSON of the last changes of status <key>, oldest first
    p:{o}:l1:shk        set     the status keys that have a history

None of these is a hash: the search module indexes every hash under ``p:{``. The
history is not read by the snapshot load; it is written in the MULTI/EXEC of the
write that makes it, so it changes only with the owner's document.

Status entries and pending items with an expiry are deleted by the server
when they expire; reads also drop whatever expired by the caller's ``now`` (a
test may look into the future), so a snapshot never shows an expired entry.

``_apply`` is an optimistic transaction: WATCH the owner's document, read the
snapshot, compute :func:`apply_ops` (the reference semantics; an error raises
here, before anything is written), then write the difference in MULTI/EXEC,
with ``p:{o}:l1:op:<op_id>`` when the call has an operation id (kept for
``OP_ID_RETENTION_S``; a retry within that time finds it and writes nothing),
and the announcement of the change (``PUBLISH``, see ``feed``).
Every write rewrites the document (its version), so a concurrent writer in any
process makes EXEC fail and the transaction runs again.

``AddAudit`` entries (only a decision or an undo makes them) are written in the
same MULTI/EXEC. Which slots already hold an entry is read under the same WATCH
(audit entries are only written by ``_apply``, which always rewrites the
document), so a new entry replaces what it replaces (``decisions.replaces``) in the
list too, as on the other backends.

A chat window is a list: a write is RPUSH, LRANGE of what falls out, LTRIM (DEL
when nothing is kept) and LRANGE of what is kept in one MULTI/EXEC. It WATCHes the
list first, only so that a connection lost during EXEC is an error
(``BackendUnavailable``) rather than a silent resend by redis-py's retry, which
would append the messages twice or return an empty window.
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any

from ...errors import BackendError, OwnerNotEmpty
from ...history import HistoryLog, ItemVersion, StatusChange
from ...models import (
    AuditEntry,
    ChatMessage,
    FrozenMap,
    MemoryFact,
    MemoryPendingItem,
    MemoryRule,
    MemorySnapshot,
    Tombstone,
    utcnow,
)
from ..base import StructuredStore, VectorStore
from ..changes import Change, ChangeCallback, Feeds, Unwatch
from ..ops import AddAudit, L1Op, apply_ops
from ..tombstones import forgotten
from . import erase
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
from .feed import RedisChangeFeed, channel_name

# KEYS: document, status key set, pending id list. ARGV[1]: the owner's key prefix.
# Reply: {doc or false, n_status, key1, entry1, ..., id1, item1, ...}. The entry
# keys are not in KEYS, but they share the owner's hash tag, hence the slot.
_LOAD = (
    """#!lua flags=no-writes
local doc = redis.call('GET', KEYS[1])
local sk = redis.call('SMEMBERS', KEYS[2])
local pq = redis.call('LRANGE', KEYS[3], 0, -1)
local out = {doc or false, #sk}
for _, k in ipairs(sk) do
  out[#out + 1] = k
  out[#out + 1] = redis.call('GET', ARGV[1] .. 'l1:st:' .. k) or false
end
for _, id in ipairs(pq) do
  out[#out + 1] = id
  out[#out + 1] = redis.call('GET', ARGV[1] .. 'l1:pd:' .. id) or false
end
return out
"""
)


# KEYS: the set of status keys with a history. ARGV[1]: the owner's key prefix.
# Reply: {key1, {change, ...}, key2, ...}.
_ALL_STATUS = (
    """#!lua flags=no-writes
local out = {}
for _, k in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  out[#out + 1] = k
  out[#out + 1] = redis.call('LRANGE', ARGV[1] .. 'l1:sh:' .. k, 0, -1)
end
return out
"""
)


# KEYS: the audit slot list. ARGV: how many entries, the key prefix of the entries
# (they share the owner's hash tag).
# Reply: the JSON of the newest entries, newest first.
_AUDIT = (
    """#!lua flags=no-writes
local ids = redis.call('LRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)
local out = {}
for _, id in ipairs(ids) do
  out[#out + 1] = redis.call('GET', ARGV[2] .. id) or false
end
return out
"""
)


#: What a unit's staging prefix adds to the store's (no owner id, hash tag or prefix
#: continues so: a prefix is a name of letters, digits and ``_``).
_UNIT = "~unit~"


#: What follows a pending id in the slot of its undo (a NUL: no id holds one).
_UNDO_SLOT = "\x00undone"


def _slot(entry: AuditEntry) -> str:
    """The slot that holds ``entry``."""
    return entry.pending_id + (_UNDO_SLOT if entry.action == "undone" else "")


def _replaced(entry: AuditEntry) -> tuple[str, ...]:
    """The slots whose entries ``entry`` replaces (``decisions.replaces``)."""
    if entry.action == "undone":
        return (_slot(entry),)
    return (entry.pending_id, entry.pending_id + _UNDO_SLOT)


def _ms(t: datetime) -> int:
    """Unix milliseconds, rounded up: the server never drops an entry before it expired."""
    return max(1, math.ceil(t.timestamp() * 1000))


class RedisStructuredStore(StructuredStore):
    """L1 on a Redis server (any Redis >= 7.0; no module needed)."""

    supports_change_feed = True
    atomic_units = True

    def __init__(self, client: Any, prefix: str, *, max_content_bytes: int = 32 * 1024) -> None:
        self.max_content_bytes = max_content_bytes
        self._r = client
        self._keys = Keys(prefix)
        self._locks = OwnerLocks()
        self._window_locks = OwnerLocks()  # by window key: appends of this process queue
        self._units = OwnerLocks()  # an owner's units (imports) of this process take turns
        self._closed = False
        self._load_script = client.register_script(_LOAD)
        self._audit_script = client.register_script(_AUDIT)
        self._channel = channel_name(prefix)
        self._feeds = Feeds()
        self._all_status = client.register_script(_ALL_STATUS)

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            await self._feeds.close()
            await close_client(self._r)

    async def watch(self, callback: ChangeCallback) -> Unwatch:
        """Subscribe to the L1 writes under this prefix (see ``feed``)."""
        return await self._feeds.add(RedisChangeFeed(self._r, self._keys.prefix, callback))

    async def setup(self) -> None:
        with translate("setup"):
            await self._r.ping()

    # -- reading -----------------------------------------------------------------------

    async def _read(self, client: Any, owner: str) -> MemorySnapshot:
        k = self._keys
        keys = [k.l1_doc(owner), k.l1_status_keys(owner), k.l1_pending_ids(owner)]
        reply = await self._load_script(keys, [k.owner(owner)], client=client)
        return _snapshot(owner, reply)

    async def load(self, owner: str, *, now: datetime | None = None) -> MemorySnapshot:
        with translate("load"):
            snap = await self._read(self._r, owner)
        return snap.live(now or utcnow())

    # -- writing -----------------------------------------------------------------------

    async def _apply(self, owner: str, ops: Sequence[L1Op], now: datetime,
                     op_id: str | None) -> MemorySnapshot:
        from redis.exceptions import WatchError

        k = self._keys
        audits = [op.entry for op in ops if isinstance(op, AddAudit)]
        async with self._locks.hold(owner):
            with translate("apply"):
                for _ in range(MAX_TX_ATTEMPTS):
                    async with self._r.pipeline(transaction=True) as pipe:
                        try:
                            await pipe.watch(k.l1_doc(owner))
                            current = await self._read(pipe, owner)
                            seen = op_id is not None and await pipe.exists(k.l1_op(owner, op_id))
                            audited = await self._audited(pipe, owner, audits)
                        except WatchError:
                            continue  # the connection dropped before any write: again
                        if seen:
                            return current.live(now)  # a retry of an applied operation
                        log = HistoryLog()
                        new = apply_ops(current, ops, now, self.limits.status_keys,
                                        log)  # raises first
                        pipe.multi()
                        self._write(pipe, owner, current, new)
                        self._queue_history(pipe, owner, log)
                        self._write_audit(pipe, owner, audits, audited)
                        if op_id is not None:
                            pipe.set(k.l1_op(owner, op_id), _ms(now), ex=OP_ID_RETENTION_S)
                        pipe.publish(self._channel,
                                     Change(owner, new.version, new.epoch).encode())
                        if await committed(pipe) is None:
                            continue  # another writer came first: again
                        return new
        raise BackendError(f"owner {owner!r}: too many concurrent writers, apply gave up")

    async def _audited(self, pipe: Any, owner: str, entries: Sequence[AuditEntry]) -> set[str]:
        """Those slots that ``entries`` replace which hold an entry (read under WATCH)."""
        if not entries:
            return set()
        slots = list(dict.fromkeys(s for e in entries for s in _replaced(e)))
        found = await pipe.mget([self._keys.l1_audit(owner, s) for s in slots])
        return {s for s, raw in zip(slots, found, strict=True) if raw is not None}

    def _write_audit(self, pipe: Any, owner: str, entries: Sequence[AuditEntry],
                     audited: set[str]) -> None:
        """Queue the audit entries; a new entry replaces what it replaces, and moves to the
        front of the newest-first list."""
        k = self._keys
        for e in entries:
            for slot in _replaced(e):
                if slot in audited:
                    pipe.lrem(k.l1_audit_ids(owner), 0, slot)
                    pipe.delete(k.l1_audit(owner, slot))
                    audited.discard(slot)
            slot = _slot(e)
            audited.add(slot)
            pipe.set(k.l1_audit(owner, slot), e.model_dump_json())
            pipe.lpush(k.l1_audit_ids(owner), slot)

    def _write(self, pipe: Any, owner: str, old: MemorySnapshot, new: MemorySnapshot) -> None:
        """Queue the commands that turn ``old`` (as stored) into ``new``."""
        k = self._keys
        doc = {
            "version": new.version,
            "epoch": new.epoch,
            "updated_at": new.updated_at.isoformat() if new.updated_at else None,
            "rules": [r.model_dump(mode="json") for r in new.rules],
            "facts": [f.model_dump(mode="json") for f in new.facts],
        }
        pipe.set(k.l1_doc(owner), json.dumps(doc, ensure_ascii=False))

        for key in old.status:
            if key not in new.status:
                pipe.delete(k.l1_status(owner, key))
        for key, value in new.status.items():
            exp = new.status_expires_at.get(key)
            if old.status.get(key) == value and old.status_expires_at.get(key) == exp:
                continue
            entry = json.dumps({"v": value, "x": exp.isoformat() if exp else None},
                               ensure_ascii=False)
            if exp is None:
                pipe.set(k.l1_status(owner, key), entry)
            else:
                pipe.set(k.l1_status(owner, key), entry, pxat=_ms(exp))
        pipe.delete(k.l1_status_keys(owner))
        if new.status:
            pipe.sadd(k.l1_status_keys(owner), *new.status)

        new_ids = {p.id for p in new.pending}
        old_ids = {p.id for p in old.pending}
        for item_id in old_ids - new_ids:
            pipe.delete(k.l1_pending(owner, item_id))
        for item in new.pending:
            if item.id in old_ids:
                continue
            body = item.model_dump_json()
            if item.expires_at is None:
                pipe.set(k.l1_pending(owner, item.id), body)
            else:
                pipe.set(k.l1_pending(owner, item.id), body, pxat=_ms(item.expires_at))
        pipe.delete(k.l1_pending_ids(owner))
        if new.pending:
            pipe.rpush(k.l1_pending_ids(owner), *(p.id for p in new.pending))

    # -- history ----------------------------------------------------------------------

    def _history_keys(self, owner: str) -> tuple[str, str, str]:
        """The closed items' list, the prefix of a status key's changes, the set of keys."""
        o = self._keys.owner(owner)
        return o + "l1:hx", o + "l1:sh:", o + "l1:shk"

    def _queue_history(self, pipe: Any, owner: str, log: HistoryLog) -> None:
        """Queue the writes of ``log`` in the transaction ``pipe``."""
        closed, changes, keys = self._history_keys(owner)
        if log.closed:
            pipe.rpush(closed, *(v.model_dump_json() for v in log.closed))
        touched = list(dict.fromkeys(c.key for c in log.status))
        for c in log.status:
            pipe.rpush(changes + c.key, c.model_dump_json())
        for key in touched:
            pipe.ltrim(changes + key, -self.limits.status_history, -1)
        if touched:
            pipe.sadd(keys, *touched)

    async def _history(self, owner: str) -> tuple[list[ItemVersion], list[StatusChange]]:
        closed, _, keys = self._history_keys(owner)
        with translate("history"):
            raw = await self._r.lrange(closed, 0, -1)
            reply = await self._all_status([keys], [self._keys.owner(owner)])
        changes = [StatusChange.model_validate_json(r)
                   for i in range(1, len(reply), 2) for r in reply[i]]
        return ([ItemVersion.model_validate_json(r) for r in raw],
                sorted(changes, key=lambda c: c.at))

    # -- L3 chat windows ----------------------------------------------------------------

    async def _window(self, owner: str, conversation: str, messages: Sequence[ChatMessage],
                      keep: int | None, op_id: str | None
                      ) -> tuple[list[ChatMessage], list[ChatMessage]]:
        from redis.exceptions import WatchError

        key = self._keys.l3_window(owner, conversation)
        if not messages and keep is None and op_id is None:  # a read
            with translate("load_window"):
                return _chat(await self._r.lrange(key, 0, -1)), []
        op_key = None if op_id is None else self._keys.l1_op(owner, op_id)
        async with self._window_locks.hold(key):
            with translate("chat window"):
                for _ in range(MAX_TX_ATTEMPTS):
                    async with self._r.pipeline(transaction=True) as pipe:
                        try:
                            await pipe.watch(key, *([] if op_key is None else [op_key]))
                            if op_key is not None and await pipe.exists(op_key):
                                return _chat(await pipe.lrange(key, 0, -1)), []
                        except WatchError:
                            continue  # the connection dropped before any write: again
                        pipe.multi()
                        if op_key is not None:
                            pipe.set(op_key, 1, ex=OP_ID_RETENTION_S)
                        if messages:
                            pipe.rpush(key, *(m.model_dump_json() for m in messages))
                        if keep is not None:  # what falls out, oldest first
                            pipe.lrange(key, 0, -(keep + 1))
                            if keep:
                                pipe.ltrim(key, -keep, -1)
                            else:
                                pipe.delete(key)
                        pipe.lrange(key, 0, -1)
                        replies = await committed(
                            pipe, unsure="the chat window may or may not have changed")
                        if replies is None:
                            continue  # another process wrote the window: again
                    removed = [] if keep is None else replies[-3]
                    return _chat(replies[-1]), _chat(removed)
        raise BackendError(f"owner {owner!r}: too many concurrent writers of a chat window "
                           "gave up")

    async def _conversations(self, owner: str) -> list[str]:
        """The window keys under the owner's prefix (one slot: one node's SCAN on a
        cluster)."""
        start = self._keys.l3_window(owner, "")
        found = []
        with translate("conversations"):
            node = await self._r.node_for(start) if hasattr(self._r, "node_for") else self._r
            async for key in node.scan_iter(match=erase.glob_escaped(start) + "*", count=1000):
                name = key.decode() if isinstance(key, bytes) else key
                found.append(name[len(start):])
        return found

    # -- an owner's unit: staged apart, moved in at once ------------------------------

    @asynccontextmanager
    async def owner_unit(self, owner: str, vector: VectorStore
                         ) -> AsyncIterator[tuple[StructuredStore, VectorStore]]:
        """Stores that write the owner's keys under a staging prefix of their own
        (``<prefix>~unit~<id>``: the same hash tag, so the same slot), then one
        MULTI/EXEC that renames every staged key to its place, refused
        (``OwnerNotEmpty``) if the owner was written meanwhile or any place is taken.
        A unit that raises, or whose process dies, leaves the owner as it was; what a
        dead one staged goes when the next unit of the owner starts. Units of one owner
        in this process take turns."""
        from .vector import RedisVectorStore

        if not isinstance(vector, RedisVectorStore):
            raise TypeError("a Redis unit writes through a Redis vector store")
        stage = Keys(f"{self._keys.prefix}{_UNIT}{uuid.uuid4().hex}")
        staged = RedisStructuredStore(self._r, stage.prefix,
                                      max_content_bytes=self.max_content_bytes)
        staged_vec = RedisVectorStore(vector._r, stage.prefix, vector.dim,
                                      max_content_bytes=vector.max_content_bytes,
                                      use_search_module=False)
        staged.limits, staged_vec.limits = self.limits, vector.limits
        staged_vec.embedding_model = vector.embedding_model
        staged_vec._model_recorded = True  # the model is recorded with the real data
        async with self._units.hold(owner):
            with translate("import"):
                await self._drop_staged(owner)
            try:
                yield staged, staged_vec
                with translate("import"):
                    await self._move_in(owner, stage)
            finally:
                with translate("import"):
                    await erase.erase(self._r, stage.owner(owner))
        vector._cache.drop(owner)

    async def _drop_staged(self, owner: str) -> None:
        """Unlink what units of ``owner`` that died before moving in left staged."""
        mine = self._keys.owner(owner)
        pattern = (erase.glob_escaped(self._keys.prefix + _UNIT) + "*"
                   + erase.glob_escaped(mine[len(self._keys.prefix):]) + "*")
        node = await self._r.node_for(mine) if hasattr(self._r, "node_for") else self._r
        stale = [key async for key in node.scan_iter(match=pattern, count=1000)]
        for start in range(0, len(stale), erase.BATCH):
            await node.unlink(*stale[start:start + erase.BATCH])

    async def _move_in(self, owner: str, stage: Keys) -> None:
        from redis.exceptions import WatchError

        start, mine = stage.owner(owner), self._keys.owner(owner)
        node = await self._r.node_for(mine) if hasattr(self._r, "node_for") else self._r
        staged = [k.decode() if isinstance(k, bytes) else k async for k in
                  node.scan_iter(match=erase.glob_escaped(start) + "*", count=1000)]
        places = [mine + k[len(start):] for k in staged]
        guard = [self._keys.l1_doc(owner), self._keys.l2_version(owner)]
        async with self._r.pipeline(transaction=True) as pipe:
            try:
                await pipe.watch(*guard, *places)
                taken = await pipe.exists(*guard, *places)
            except WatchError:
                taken = 1
            if taken:
                raise OwnerNotEmpty(f"owner {owner!r} was written while it was imported")
            pipe.multi()
            for key, place in zip(staged, places, strict=True):
                pipe.rename(key, place)
            pipe.publish(self._channel, forgotten(owner).encode())  # reload: a new lineage
            if await committed(pipe) is None:
                raise OwnerNotEmpty(f"owner {owner!r} was written while it was imported")

    # -- audit trail ------------------------------------------------------------------

    async def _audit(self, owner: str, limit: int, pending_id: str | None
                     ) -> list[AuditEntry]:
        k = self._keys
        with translate("audit"):
            if pending_id is not None:
                raw = await self._r.mget([k.l1_audit(owner, pending_id),
                                          k.l1_audit(owner, pending_id + _UNDO_SLOT)])
                found = sorted((AuditEntry.model_validate_json(r) for r in raw if r is not None),
                               key=lambda e: e.at, reverse=True)
                return found[:limit]
            raw = await self._audit_script([k.l1_audit_ids(owner)],
                                           [limit, k.l1_audit_prefix(owner)])
        return [AuditEntry.model_validate_json(r) for r in raw if r is not None]

    async def _forget(self, owner: str, tombstone: Tombstone | None, op_key: str | None
                      ) -> Tombstone | None:
        async with self._locks.hold(owner):
            with translate("forget"):
                await erase.erase(self._r, self._keys.owner(owner))
                recorded = None if tombstone is None else await erase.record(
                    self._r, self._keys.prefix, tombstone, op_key)
                await self._r.publish(self._channel, forgotten(owner).encode())
                return recorded

    async def _tombstones(self, limit: int) -> list[Tombstone]:
        with translate("tombstones"):
            return await erase.recorded(self._r, self._keys.prefix, limit)


def _snapshot(owner: str, reply: list[Any]) -> MemorySnapshot:
    """The snapshot stored in Redis (entries the server already expired are absent)."""
    doc_raw = text(reply[0])
    if doc_raw is None:
        return MemorySnapshot(owner=owner)
    doc = json.loads(doc_raw)
    n_status = int(reply[1])
    status: dict[str, str] = {}
    expires: dict[str, datetime] = {}
    pos = 2
    for _ in range(n_status):
        key, raw = text(reply[pos]), text(reply[pos + 1])
        pos += 2
        if key is None or raw is None:
            continue  # expired on the server
        entry = json.loads(raw)
        status[key] = entry["v"]
        if entry.get("x"):
            expires[key] = datetime.fromisoformat(entry["x"])
    pending: list[MemoryPendingItem] = []
    while pos < len(reply):
        raw = text(reply[pos + 1])
        pos += 2
        if raw is not None:
            pending.append(MemoryPendingItem.model_validate_json(raw))
    updated = doc.get("updated_at")
    return MemorySnapshot(
        owner=owner,
        rules=tuple(MemoryRule.model_validate(r) for r in doc.get("rules", ())),
        facts=tuple(MemoryFact.model_validate(f) for f in doc.get("facts", ())),
        status=FrozenMap(status),
        status_expires_at=expires,
        pending=tuple(pending),
        version=int(doc.get("version", 0)),
        epoch=str(doc.get("epoch", "")),
        updated_at=datetime.fromisoformat(updated) if updated else None,
    )


def _chat(raw: Sequence[bytes]) -> list[ChatMessage]:
    return [ChatMessage.model_validate_json(r) for r in raw]


__all__ = ["RedisStructuredStore"]
