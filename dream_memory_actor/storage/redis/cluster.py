"""Redis Cluster: each call of an owner goes to the master serving the owner's slot.

Every key of an owner carries the hash tag ``{owner}`` (see ``common``), so an
owner lives in one slot, on one master. :class:`ClusterClient` keeps the slot map
(``CLUSTER SLOTS``) and one ordinary ``redis.asyncio.Redis`` client per master, and
hands the stores an object with the client's interface:

* a single-key command goes to the key's master (``MOVED``/``ASK``/``TRYAGAIN``/
  ``CLUSTERDOWN``: the map is read again and the command sent once more; those
  replies mean it was not executed);
* a transaction (``pipeline(transaction=True)``) binds to the master of the first
  key it WATCHes, and the whole WATCH/MULTI/EXEC, Lua scripts included, runs on
  that node's connection: every key it touches shares the owner's slot;
* a pipeline without a transaction (the reads of a search over several owners)
  is split by master, sent to each in parallel, and its replies put back in order;
* a Lua script is loaded on the node that runs it (``SCRIPT LOAD`` is not
  replicated, so a promoted replica loads it again on first use);
* the change feed subscribes on one master: classic ``PUBLISH`` is forwarded to
  every node of the cluster, so one subscription sees every owner's changes
  (sharded pub/sub, ``SPUBLISH``, would confine an announcement to its shard but
  needs one channel per slot, so a subscription per slot, and is not used).

A lost connection or a demoted master (``READONLY``) marks the map stale; the
call fails with ``BackendUnavailable`` and the next one reads the map again. While
a master is down and before its replica is promoted (``cluster-node-timeout``
plus the election, a few seconds), the owners of its slots are unavailable; those
of the other masters are not affected.

Nothing in the stores crosses owners inside one command or transaction; a search
over several owners reads each owner's keys in its own command. The search module
is not used on a cluster (see ``docs/scaling.md``): RediSearch in Redis Stack
indexes only the keys of the shard it runs on, and without the coordinator of
Redis Enterprise a query sees one shard; vector search runs on the rows each
process caches, as on a Redis without the module.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from ...errors import ConfigurationError
from .cluster_pipes import (
    ClusterPubSub,
    FanoutPipeline,
    TxPipeline,
    first_key,
    redirect_errors,
    topology_errors,
)

SLOTS = 16384


def split_cluster_url(url: str) -> tuple[Callable[[str, int], str], list[tuple[str, int]]]:
    """``(node_url(host, port), startup nodes)`` of ``redis[s][+cluster]://[auth@]h:p[,h:p...][/0]``."""
    parts = urlsplit(url)
    scheme = parts.scheme.removesuffix("+cluster")
    if scheme not in ("redis", "rediss"):
        raise ConfigurationError(f"a Redis Cluster URL starts with redis:// or rediss:// "
                                 f"(or redis+cluster://), not {parts.scheme}://")
    auth, _, hosts = parts.netloc.rpartition("@")
    if parts.path not in ("", "/", "/0"):
        raise ConfigurationError("Redis Cluster has only database 0: drop the /<db> of redis_url")
    startup: list[tuple[str, int]] = []
    for item in hosts.split(","):
        host, _, port = item.strip().rpartition(":")
        if not host:
            host, port = port, "6379"
        try:
            startup.append((host, int(port)))
        except ValueError as exc:
            raise ConfigurationError(f"{item!r} in redis_url is not host:port") from exc

    def node_url(host: str, port: int) -> str:
        netloc = f"{auth}@{host}:{port}" if auth else f"{host}:{port}"
        return urlunsplit((scheme, netloc, "/0", parts.query, ""))

    return node_url, startup


class ClusterClient:
    """The stores' client on a Redis Cluster (see the module docstring)."""

    def __init__(self, url: str, make_node: Callable[[str], Any]) -> None:
        from redis.crc import key_slot

        self._node_url, self._startup = split_cluster_url(url)
        self._make_node = make_node
        self._key_slot = key_slot
        self._slots: list[str] = []
        self._nodes: dict[str, Any] = {}
        self._stale = True
        self._lock = asyncio.Lock()
        self._scripts: dict[str, Any] = {}  # sha -> source
        self._node_scripts: dict[tuple[str, str], Any] = {}
        self._encoder_client = make_node(self._node_url(*self._startup[0]))

    # -- topology ------------------------------------------------------------------------

    def node(self, addr: str) -> Any:
        client = self._nodes.get(addr)
        if client is None:
            host, _, port = addr.rpartition(":")
            client = self._nodes[addr] = self._make_node(self._node_url(host, int(port)))
        return client

    def mark_stale(self) -> None:
        self._stale = True

    async def refresh(self) -> None:
        """Read the slot map from the first node that answers (masters, then the URL's)."""
        async with self._lock:
            if not self._stale:
                return
            from redis import exceptions as rx

            candidates = list(dict.fromkeys(
                [*self._nodes, *(f"{h}:{p}" for h, p in self._startup)]))
            errors = []
            for addr in candidates:
                try:
                    reply = await self.node(addr).execute_command("CLUSTER SLOTS")
                except (rx.RedisError, OSError) as exc:
                    errors.append(f"{addr}: {exc}")
                    continue
                table = _slot_table(reply, addr)
                if table is None:
                    errors.append(f"{addr}: not every slot is served")
                    continue
                self._slots = table
                self._stale = False
                return
            raise rx.ConnectionError("no node of the Redis Cluster gave a full slot map: "
                                     + "; ".join(errors))

    async def addr_for(self, key: Any) -> str:
        if self._stale:
            await self.refresh()
        if key is None:
            return self._slots[0]
        raw = key if isinstance(key, bytes) else str(key).encode()
        return self._slots[self._key_slot(raw)]

    async def masters(self) -> list[str]:
        if self._stale:
            await self.refresh()
        return list(dict.fromkeys(self._slots))

    async def node_for(self, key: Any) -> Any:
        return self.node(await self.addr_for(key))

    def node_script(self, addr: str, sha: str) -> Any:
        """The script ``sha`` registered on the client of node ``addr``."""
        script = self._node_scripts.get((addr, sha))
        if script is None:
            script = self._node_scripts[(addr, sha)] = self.node(addr).register_script(
                self._scripts[sha])
        return script

    # -- the client interface the stores use -----------------------------------------

    def get_encoder(self) -> Any:
        return self._encoder_client.connection_pool.get_encoder()

    def register_script(self, script: str) -> Any:
        from redis.commands.core import AsyncScript

        obj = AsyncScript(self, script)  # type: ignore[arg-type]  # duck-typed client
        self._scripts[obj.sha] = script
        return obj

    async def script_load(self, script: str) -> Any:
        sha = None
        for addr in await self.masters():
            sha = await self._call(addr, "script_load", (script,), {})
        return sha

    async def ping(self) -> bool:
        for addr in await self.masters():
            await self._call(addr, "ping", (), {})
        return True

    async def info(self, *args: Any, **kwargs: Any) -> Any:
        return await self._call(await self.addr_for(None), "info", args, kwargs)

    def pipeline(self, transaction: bool = True, shard_hint: str | None = None) -> Any:
        return TxPipeline(self) if transaction else FanoutPipeline(self)

    def pubsub(self) -> Any:
        return ClusterPubSub(self)

    async def aclose(self) -> None:
        from contextlib import suppress

        for client in [*self._nodes.values(), self._encoder_client]:
            with suppress(Exception):
                await client.aclose()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)

        async def command(*args: Any, **kwargs: Any) -> Any:
            return await self._call(await self.addr_for(first_key(name, args)), name,
                                    args, kwargs, keyed=True)

        return command

    async def _call(self, addr: str, name: str, args: Sequence[Any], kwargs: dict[str, Any],
                    *, keyed: bool = False) -> Any:
        key = first_key(name, args)
        for attempt in range(3):
            try:
                return await getattr(self.node(addr), name)(*args, **kwargs)
            except redirect_errors():
                self.mark_stale()
                if attempt == 2:
                    raise
                await asyncio.sleep(0.05 * (attempt + 1))
                addr = await self.addr_for(key) if keyed else addr
            except topology_errors():
                self.mark_stale()
                raise
        raise AssertionError("unreachable")


def _slot_table(reply: Any, queried: str) -> list[str] | None:
    """slot -> ``host:port`` of its master, from a ``CLUSTER SLOTS`` reply (raw or parsed)."""
    table: list[str | None] = [None] * SLOTS
    entries: list[tuple[int, int, Any, Any]] = []
    if isinstance(reply, dict):  # redis-py's parsed form: {(start, end): {"primary": ...}}
        for (start, end), info in reply.items():
            host, port = info["primary"][0], info["primary"][1]
            entries.append((int(start), int(end), host, port))
    else:
        for entry in reply:
            host, port = entry[2][0], entry[2][1]
            entries.append((int(entry[0]), int(entry[1]), host, port))
    for start, end, host, port in entries:
        h = host.decode() if isinstance(host, bytes) else str(host)
        addr = f"{h or queried.rpartition(':')[0]}:{int(port)}"
        for s in range(start, end + 1):
            table[s] = addr
    if any(a is None for a in table):
        return None
    return [a for a in table if a is not None]
