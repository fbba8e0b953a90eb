"""Erasing an owner from a key prefix, and the tombstones erasures leave.

Every key of an owner starts with ``<prefix>:{<owner>}:`` (``common.Keys``), so an
erasure is a SCAN of that pattern and an UNLINK of what it finds; with the search
module, an unlinked hash leaves the index with it. All of one owner's keys share a
hash slot, so each UNLINK of a batch is a single-slot command on a cluster too.
Tombstones live in one hash under a tag no owner id can take (owner ids start with
a letter or digit).
"""

from __future__ import annotations

import re
from typing import Any

from ...models import Tombstone

#: Keys unlinked per command.
BATCH = 500


def glob_escaped(text: str) -> str:
    """``text`` matched literally in a SCAN pattern."""
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)


async def erase(client: Any, *starts: str) -> int:
    """Unlink every key beginning with one of ``starts`` (each within one owner's hash
    tag); how many went. On a cluster the SCAN runs on the master of that slot."""
    gone = 0
    for start in starts:
        node = await client.node_for(start) if hasattr(client, "node_for") else client
        batch: list[bytes] = []
        async for key in node.scan_iter(match=glob_escaped(start) + "*", count=1000):
            batch.append(key)
            if len(batch) >= BATCH:
                gone += int(await node.unlink(*batch))
                batch = []
        if batch:
            gone += int(await node.unlink(*batch))
    return gone


def tombstones_key(prefix: str) -> str:
    return f"{prefix}:{{~tombstones}}"


async def record(client: Any, prefix: str, tombstone: Tombstone, op_key: str | None
                 ) -> Tombstone:
    """Record ``tombstone`` unless one is recorded under ``op_key``; return the recorded one."""
    key, field = tombstones_key(prefix), op_key or tombstone.id
    if await client.hsetnx(key, field, tombstone.model_dump_json()):
        return tombstone
    return Tombstone.model_validate_json(await client.hget(key, field))


async def recorded(client: Any, prefix: str, limit: int) -> list[Tombstone]:
    """Recorded tombstones, newest first."""
    found = [Tombstone.model_validate_json(v)
             for v in (await client.hgetall(tombstones_key(prefix))).values()]
    return sorted(found, key=lambda t: t.at, reverse=True)[:limit]
