"""The VectorIndex actor: hybrid search and the L2 write path, shared by all owners.

An async actor holding one :class:`~dream_memory_actor.engine.MemoryEngine`
(its connection pool and its cached embedder, so a repeated query is embedded
once). Searches come straight from the handles; stores and deletes come from
the owner's actor, which holds the owner's lock, so dedup never races.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import ray

from ..engine import MemoryEngine, operations
from ..models import MemoryPendingItem, SearchHit
from ..text import MemoryText
from .errors import ray_errors
from .placement import NAMESPACE, index_name, registry_name, shard_of
from .spec import SystemSpec, open_index_engine


def process_info() -> dict[str, Any]:
    """This process's id, resident memory (RSS, and USS: the pages only it uses; bytes)
    and Ray node."""
    try:
        import psutil

        mem = psutil.Process().memory_full_info()
        rss, uss = int(mem.rss), int(getattr(mem, "uss", mem.rss))
    except ImportError:  # pragma: no cover - psutil ships with ray[default]
        with open("/proc/self/statm", encoding="ascii") as f:
            rss = uss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    node = ray.get_runtime_context().get_node_id() if ray.is_initialized() else None
    return {"pid": os.getpid(), "rss_bytes": rss, "uss_bytes": uss, "node_id": node}


class IndexActor:
    """Run as ``_index.<system>.<replica>`` (see :mod:`.registry`); private."""

    def __init__(self, spec: SystemSpec, replica: int) -> None:
        self._spec = spec
        self._replica = replica
        self._engine: MemoryEngine | None = None
        self._opening = asyncio.Lock()
        self._proposer: Any = None

    async def _open(self, setup: bool = False) -> MemoryEngine:
        if self._engine is None:
            async with self._opening:
                if self._engine is None:
                    self._engine = await open_index_engine(self._spec, setup=setup)
        return self._engine

    async def ready(self, setup: bool) -> dict[str, Any]:
        """Open the engine (running migrations when ``setup``); the process info."""
        await self._open(setup)
        return process_info()

    async def search(self, owners: Sequence[str], query: str, limit: int, min_score: float,
                     filter: Mapping[str, Any] | None = None) -> list[SearchHit]:
        engine = await self._open()
        return await engine.search(owners, query, limit=limit, min_score=min_score,
                                   filter=filter)

    async def forget_memories(self, owner: str) -> int:
        return await (await self._open()).forget_memories(owner)

    async def prepare(self, owner: str, memories: list[MemoryText]) -> bool:
        return await (await self._open()).prepare(owner, memories)

    async def export(self, owner: str) -> list[str]:
        return await (await self._open()).export(owner)

    async def last_changes(self) -> dict[str, datetime]:
        return await (await self._open()).last_changes()

    async def propose(self, owner: str) -> list[MemoryPendingItem]:
        """A consolidation pass over ``owner``, computed by the system's proposer (a
        process of its own, so the pass does not slow the owner's writes here; see
        ``runtime.proposer``) once this replica has written the reads its searches
        noted. The in-process backend's memories are only here: its passes are too."""
        engine = await self._open()
        if self._spec.settings.backend == "memory":
            return await engine.propose(owner)
        await engine.write_reads()
        if self._proposer is None:
            registry = ray.get_actor(registry_name(self._spec.name), namespace=NAMESPACE)
            self._proposer = await registry.proposer.remote(self._spec.incarnation)
        with ray_errors("consolidation proposer"):
            found: list[MemoryPendingItem] = await self._proposer.propose.remote(owner)
        return found

    async def import_document(self, lines: list[str]) -> dict[str, int]:
        return await (await self._open()).import_document(lines)

    async def info(self) -> dict[str, Any]:
        info = process_info()
        engine = self._engine
        if engine is not None and engine.embedder is not None:
            info["embed_cache_hits"] = engine.embedder.hits
            info["embed_cache_misses"] = engine.embedder.misses
        return info

    async def close(self) -> None:
        if self._engine is not None:
            await self._engine.close()


class IndexL2:
    """The owner actors' way to the VectorIndex: one replica per owner (stable hash).

    The replicas are found by name on first use rather than passed in: actor handles
    among constructor arguments would put them in the object store, from where a
    restart cannot always get them back (ray-project/ray#53727).
    """

    def __init__(self, system: str, replicas: int, timeout_s: float) -> None:
        self._system = system
        self._replicas = replicas
        self._timeout_s = timeout_s  # the owner's lock is held meanwhile: never wait forever
        self._indexes: list[Any] = []
        #: False once the index answered that it has no embedder (keyword-only).
        self._embeds = True

    def _for(self, owner: str) -> Any:
        if not self._indexes:
            self._indexes = [ray.get_actor(index_name(self._system, i), namespace=NAMESPACE)
                             for i in range(self._replicas)]
        return self._indexes[shard_of(owner, self._replicas)]

    async def forget_memories(self, owner: str) -> int:
        gone: int = await _remote(self._for(owner).forget_memories.remote(owner), "forget",
                                  self._timeout_s)
        return gone

    async def prepare(self, owner: str, memories: list[MemoryText]) -> bool:
        """Have the owner's replica embed a coming write's memories into its cache (see
        ``MemoryEngine.prepare``); skipped once it said it embeds nothing."""
        if self._embeds:
            self._embeds = bool(await _remote(self._for(owner).prepare.remote(owner, memories),
                                              "prepare", self._timeout_s))
        return self._embeds

    async def export(self, owner: str) -> list[str]:
        lines: list[str] = await _remote(self._for(owner).export.remote(owner), "export",
                                         self._timeout_s)
        return lines

    async def import_document(self, owner: str, lines: list[str]) -> dict[str, int]:
        """Import ``owner``'s document (its header names ``owner``: checked at the door)."""
        counts: dict[str, int] = await _remote(
            self._for(owner).import_document.remote(lines), "import", self._timeout_s)
        return counts


async def _remote(ref: Any, what: str, timeout_s: float) -> Any:
    """Await an index call; its errors leave as the project's (not nested Ray errors)."""
    with ray_errors(f"VectorIndex {what}"):
        return await asyncio.wait_for(asyncio.wrap_future(ref.future()), timeout_s)


def _index_method(op: operations.Operation[Any, Any]) -> Any:
    """The VectorIndex's method of an L2 read or write: the engine's, by name."""

    async def method(self: IndexActor, owner: str, *values: Any) -> Any:
        return await getattr(await self._open(), op.name)(owner, **op.named(values))

    return method


def _path_method(op: operations.Operation[Any, Any]) -> Any:
    """The owner actors' way to an L2 write (or read): the engine's keyword arguments,
    sent in the description's order to the owner's replica (for a write, the owner's
    lock is held meanwhile)."""

    async def method(self: IndexL2, owner: str, **named: Any) -> Any:
        values = [named[name] for name in op.params]
        return await _remote(getattr(self._for(owner), op.name).remote(owner, *values),
                             op.name, self._timeout_s + op.extra_timeout_s(values))

    return method


# Every L2 read and write is the engine's on the VectorIndex; the owner actors send
# the writes, and the reads they need themselves (a handle's come straight here).
for _op in operations.serving("index", "writer"):
    if _op.name not in vars(IndexActor):
        _op.install(IndexActor, _index_method(_op))
    _op.install(IndexL2, _path_method(_op))
