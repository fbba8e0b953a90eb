"""Everything a storage holds, as text, to look for what an erasure must have removed."""

from __future__ import annotations

from typing import Any


async def stored_texts(stores: Any) -> list[str]:
    """One string per stored record (row, key with its value, in-process entry)."""
    if stores.backend == "postgres":
        return await _postgres(stores.structured.backend)
    if stores.backend.startswith("redis"):
        return await _redis(stores.structured._r, stores.structured._keys.prefix)
    return _memory(stores.structured, stores.vector)


async def _postgres(backend: Any) -> list[str]:
    out = []
    async with backend.connection() as conn:
        tables = await conn.fetch(
            "SELECT tablename FROM pg_tables WHERE schemaname = $1", backend.schema)
        for t in tables:
            name = t["tablename"]
            rows = await conn.fetch(f'SELECT t::text AS r FROM {backend.schema}."{name}" t')
            out += [f"{name}: {r['r']}" for r in rows]
    return out


async def _redis(client: Any, prefix: str) -> list[str]:
    out: list[str] = []
    if hasattr(client, "masters"):  # a cluster: every master's keys
        for addr in await client.masters():
            out += await _redis(client.node(addr), prefix)
        return out
    async for key in client.scan_iter(match=f"{prefix}:*", count=1000):
        kind = (await client.type(key)).decode()
        value: Any
        if kind == "string":
            value = await client.get(key)
        elif kind == "hash":
            value = await client.hgetall(key)
        elif kind == "list":
            value = await client.lrange(key, 0, -1)
        elif kind == "set":
            value = await client.smembers(key)
        elif kind == "zset":
            value = await client.zrange(key, 0, -1, withscores=True)
        else:
            value = await client.dump(key)
        out.append(f"{key.decode()} {kind}: {value!r}")
    return out


def _memory(structured: Any, vector: Any) -> list[str]:
    # Every attribute but the per-owner locks (process state, not stored data).
    return [f"{name}: {value!r}" for store in (structured, vector)
            for name, value in vars(store).items() if name != "_locks"]
