"""The history of L1 on Redis: superseded items and status changes.

Keys of owner ``o`` (prefix ``p``), beside those of ``structured``::

    p:{o}:l1:hx          list    JSON of the closed rules and facts, oldest closed first
    p:{o}:l1:sh:<key>    list    JSON of the last changes of status <key>, oldest first
    p:{o}:l1:shk         set     the status keys that have a history

None is read by the snapshot load. They are written in the MULTI/EXEC of the write
that makes them (``structured._apply``, from the ``HistoryLog`` of ``apply_ops``),
so they change only with the owner's document, which that transaction watches.
"""

from __future__ import annotations

from typing import Any

from ...history import HistoryLog, ItemVersion, StatusChange
from .common import Keys, translate

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


def closed_key(keys: Keys, owner: str) -> str:
    return keys.owner(owner) + "l1:hx"


def status_key(keys: Keys, owner: str, key: str) -> str:
    return keys.owner(owner) + "l1:sh:" + key


def status_keys_key(keys: Keys, owner: str) -> str:
    return keys.owner(owner) + "l1:shk"


def queue_history(pipe: Any, keys: Keys, owner: str, log: HistoryLog, keep: int) -> None:
    """Queue the writes of ``log`` in the transaction ``pipe``."""
    if log.closed:
        pipe.rpush(closed_key(keys, owner), *(v.model_dump_json() for v in log.closed))
    touched: list[str] = []
    for c in log.status:
        pipe.rpush(status_key(keys, owner, c.key), c.model_dump_json())
        if c.key not in touched:
            touched.append(c.key)
    for key in touched:
        pipe.ltrim(status_key(keys, owner, key), -keep, -1)
    if touched:
        pipe.sadd(status_keys_key(keys, owner), *touched)


class RedisHistory:
    """The two history reads of one Redis structured store."""

    def __init__(self, client: Any, keys: Keys) -> None:
        self._r = client
        self._keys = keys
        self._all_status = client.register_script(_ALL_STATUS)

    async def closed(self, owner: str) -> list[ItemVersion]:
        raw = await self._r.lrange(closed_key(self._keys, owner), 0, -1)
        return [ItemVersion.model_validate_json(r) for r in raw]

    async def status(self, owner: str, key: str | None) -> list[StatusChange]:
        k = self._keys
        if key is not None:
            raw = await self._r.lrange(status_key(k, owner, key), 0, -1)
            return [StatusChange.model_validate_json(r) for r in raw]
        reply = await self._all_status([status_keys_key(k, owner)], [k.owner(owner)])
        out = [StatusChange.model_validate_json(r)
               for i in range(1, len(reply), 2) for r in reply[i]]
        return sorted(out, key=lambda c: c.at)


class RedisHistoryReads:
    """The two history primitives of ``RedisStructuredStore`` (mixed into it)."""

    _history: RedisHistory

    async def _item_history(self, owner: str) -> list[ItemVersion]:
        with translate("history"):
            return await self._history.closed(owner)

    async def _status_history(self, owner: str, key: str | None) -> list[StatusChange]:
        with translate("status_history"):
            return await self._history.status(owner, key)
