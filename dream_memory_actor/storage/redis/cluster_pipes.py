"""The pipelines and the subscription of a Redis Cluster client (see ``cluster``).

:class:`TxPipeline` binds a WATCH/MULTI/EXEC to the master of the first watched key;
:class:`FanoutPipeline` splits commands without a transaction by master and puts the
replies back in order; :class:`ClusterPubSub` subscribes on one master.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Protocol


class Routes(Protocol):
    """What the pipelines need of the cluster client (``cluster.ClusterClient``): the
    master node of a key, a node's client and scripts, and a way to say the slot map
    is stale (a MOVED/ASK or a lost node)."""

    def node(self, addr: str) -> Any: ...

    def mark_stale(self) -> None: ...

    async def addr_for(self, key: Any) -> str: ...

    async def node_for(self, key: Any) -> Any: ...

    def node_script(self, addr: str, sha: str) -> Any: ...


def topology_errors() -> tuple[type[BaseException], ...]:
    from redis import exceptions as rx

    return (rx.ConnectionError, rx.TimeoutError, rx.ReadOnlyError, rx.ClusterDownError,
            rx.TryAgainError, rx.AskError, OSError)


def redirect_errors() -> tuple[type[BaseException], ...]:
    """Replies that mean the command was not executed: safe to send again."""
    from redis import exceptions as rx

    return (rx.AskError, rx.TryAgainError, rx.ClusterDownError)  # MovedError is an AskError


def first_key(name: str, args: Sequence[Any]) -> Any:
    if name in ("evalsha", "eval"):
        return args[2] if len(args) > 2 and int(args[1]) > 0 else None
    if name in ("execute_command", "ping", "info", "script_load"):
        return None
    if not args:
        return None
    first = args[0]
    if isinstance(first, (list, tuple)):
        return first[0] if first else None
    return first


class TxPipeline:
    """A WATCH/MULTI/EXEC bound to the master of the first watched key."""

    def __init__(self, cluster: Routes) -> None:
        self._cluster = cluster
        self._inner: Any = None

    async def __aenter__(self) -> TxPipeline:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.reset()

    async def reset(self) -> None:
        if self._inner is not None:
            await self._inner.reset()

    async def watch(self, *keys: Any) -> None:
        from redis import exceptions as rx

        for attempt in range(3):
            await self.reset()
            self._inner = (await self._cluster.node_for(keys[0])).pipeline(transaction=True)
            try:
                await self._inner.watch(*keys)
                return
            except (*topology_errors(), rx.WatchError):  # type: ignore[misc]
                self._cluster.mark_stale()
                if attempt == 2:
                    raise
                await asyncio.sleep(0.05 * (attempt + 1))

    async def execute(self, raise_on_error: bool = True) -> Any:
        try:
            return await self._bound().execute(raise_on_error)
        except topology_errors():
            self._cluster.mark_stale()
            raise

    def _bound(self) -> Any:
        if self._inner is None:
            raise RuntimeError("a transaction on Redis Cluster starts with WATCH of a key "
                               "of the owner it writes")
        return self._inner

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._bound(), name)


class FanoutPipeline:
    """Commands without a transaction, sent to each key's master, replies in order."""

    def __init__(self, cluster: Routes) -> None:
        self._cluster = cluster
        self._calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    async def __aenter__(self) -> FanoutPipeline:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._calls = []

    def __await__(self) -> Any:  # redis-py awaits a queued command's return value
        return self._self().__await__()

    async def _self(self) -> FanoutPipeline:
        return self

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)

        def queue(*args: Any, **kwargs: Any) -> FanoutPipeline:
            self._calls.append((name, args, kwargs))
            return self

        return queue

    async def execute(self, raise_on_error: bool = True) -> list[Any]:
        calls, self._calls = self._calls, []
        for attempt in range(2):  # read-only commands: safe to send again
            try:
                return await self._run(calls, raise_on_error)
            except topology_errors():
                self._cluster.mark_stale()
                if attempt == 1:
                    raise
        raise AssertionError("unreachable")

    async def _run(self, calls: Sequence[tuple[str, tuple[Any, ...], dict[str, Any]]],
                   raise_on_error: bool) -> list[Any]:
        groups: dict[str, list[int]] = {}
        for i, (name, args, _) in enumerate(calls):
            addr = await self._cluster.addr_for(first_key(name, args))
            groups.setdefault(addr, []).append(i)
        out: list[Any] = [None] * len(calls)

        async def run(addr: str, idxs: list[int]) -> None:
            async with self._cluster.node(addr).pipeline(transaction=False) as pipe:
                for i in idxs:
                    name, args, kwargs = calls[i]
                    if name == "evalsha":
                        n = int(args[1])
                        script = self._cluster.node_script(addr, args[0])
                        await script(list(args[2:2 + n]), list(args[2 + n:]), client=pipe)
                    else:
                        getattr(pipe, name)(*args, **kwargs)
                replies = await pipe.execute(raise_on_error)
            for i, reply in zip(idxs, replies, strict=True):
                out[i] = reply

        await asyncio.gather(*(run(a, idxs) for a, idxs in groups.items()))
        return out


class ClusterPubSub:
    """A subscription on one master (classic pub/sub reaches every node of a cluster)."""

    def __init__(self, cluster: Routes) -> None:
        self._cluster = cluster
        self._inner: Any = None

    async def subscribe(self, *channels: Any) -> None:
        try:
            node = await self._cluster.node_for(channels[0])
            self._inner = node.pubsub()
            await self._inner.subscribe(*channels)
        except topology_errors():
            self._cluster.mark_stale()
            raise

    async def get_message(self, **kwargs: Any) -> Any:
        try:
            return await self._inner.get_message(**kwargs)
        except topology_errors():
            self._cluster.mark_stale()
            raise

    async def aclose(self) -> None:
        if self._inner is not None:
            await self._inner.aclose()
