"""The registry actor: creates a system's actors, and keeps owners within the cap.

One per system, ``_registry.<system>``, detached so the system outlives the
driver that started it (``MemorySystem.shutdown`` ends it). Every other actor is
created by the registry and so fate-shares with it: no actor outlives its system.

In ``dedicated`` placement it activates owner actors on first use and passivates
them (drain, then kill) when idle or, least recently used first, when the cap
``max_live_owners`` is reached; creations and passivations are serialized by one
lock, so the live count never exceeds the cap. In ``sharded`` placement the
hosts do their own eviction and the registry only creates them.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import ray

from ..errors import SystemClosed
from ..metrics import get_metrics
from .dreamer import Dreamer, interval
from .handle import OwnerHandle
from .owner_actor import HostActor, OwnerActor, sweep_interval
from .placement import NAMESPACE, LiveSet, host_name, index_name, owner_name, proposer_name
from .proposer import ProposerActor
from .spec import ClientView, SystemSpec
from .threaded import CALL_THREADS, threaded_actor
from .vector_index import IndexActor

log = logging.getLogger(__name__)

#: Options every actor of a system gets: restarted on failure, its calls retried
#: (safe: reads are pure and writes carry op ids), no CPU slot held while idle.
BASE_OPTIONS: Mapping[str, Any] = {"num_cpus": 0, "max_restarts": -1, "max_task_retries": 5}

#: How long a new owner actor may take to serve its first call before it counts as idle.
UNBORN_GRACE_S = 60.0

_Index = ray.remote(IndexActor)
_Proposer = ray.remote(ProposerActor)
# Threaded actors (``max_concurrency`` in HOLDER_OPTIONS): their snapshot read skips
# the event loop, see threaded.py.
_Owner: Any = ray.remote(threaded_actor(OwnerActor))
_Host: Any = ray.remote(threaded_actor(HostActor))
HOLDER_OPTIONS: Mapping[str, Any] = {"max_concurrency": CALL_THREADS}


def _holder_options(spec: SystemSpec) -> dict[str, Any]:
    """The owner-holding actors' options: threaded, unless the user's options say otherwise."""
    return {**HOLDER_OPTIONS, **spec.actor_options}


def _options(name: str, extra: Mapping[str, Any]) -> dict[str, Any]:
    return {**BASE_OPTIONS, **extra, "name": name, "namespace": NAMESPACE,
            "get_if_exists": True}


#: How often the live-owner gauge is refreshed from the hosts (sharded placement).
LIVE_GAUGE_INTERVAL_S = 5.0


class Registry:
    """Private: see the module docstring. Methods are called by the client only."""

    def __init__(self, spec: SystemSpec) -> None:
        self._spec = spec
        s = spec.settings
        self._indexes: list[Any] = []
        self._hosts: list[Any] = []
        self._proposer: Any = None
        self._live: LiveSet[Any] = LiveSet(s.max_live_owners, s.idle_timeout_s)
        self._lock = asyncio.Lock()
        self._started: asyncio.Task[None] | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._dreaming: asyncio.Task[None] | None = None
        self._closing = False
        # Owner actors created but not yet used (a process takes a second or more to
        # start): not idle, whatever the timeout; since when, in monotonic seconds.
        self._unborn: dict[str, float] = {}

    # -- start ------------------------------------------------------------------------

    async def _ready(self) -> None:
        failed = self._started is not None and self._started.done() and (
            self._started.cancelled() or self._started.exception() is not None)
        if self._started is None or failed:
            self._started = asyncio.get_running_loop().create_task(self._start())
        await asyncio.shield(self._started)

    async def _start(self) -> None:
        if self._spec.settings.extraction_model and self._spec.extractor_pool is None:
            # LLM calls run in a pool of extractor actors owned by this (detached) registry,
            # so they live as long as the system; the owner actors get it in their spec.
            from .extractor_pool import ExtractorPool

            pool = await asyncio.to_thread(ExtractorPool, self._spec.settings)
            self._spec = dataclasses.replace(self._spec, extractor_pool=pool)
        spec = self._spec
        name = spec.name
        self._indexes = [
            _Index.options(**_options(index_name(name, i), spec.system_actor_options)).remote(
                spec, i)
            for i in range(spec.index_replicas)
        ]
        # The first replica runs the migrations; the others only open their pools.
        await self._indexes[0].ready.remote(True)
        await asyncio.gather(*(ix.ready.remote(False) for ix in self._indexes[1:]))
        if spec.settings.placement == "sharded":
            self._hosts = [
                _Host.options(**_options(host_name(name, i), _holder_options(spec))).remote(
                    spec, i)
                for i in range(spec.settings.shards)
            ]
            await asyncio.gather(*(h.ping.remote() for h in self._hosts))
            # the hosts hold the owners: their count is asked for, the gauge kept current
            self._sweeper = asyncio.get_running_loop().create_task(self._count_live())
        else:
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep())
        if spec.settings.consolidation_idle_s is not None:
            self._dreaming = asyncio.get_running_loop().create_task(self._dream())

    def _check(self, incarnation: str | None) -> None:
        if self._closing:
            raise SystemClosed(f"memory system {self._spec.name!r} is shutting down")
        if incarnation is not None and incarnation != self._spec.incarnation:
            raise SystemClosed(f"memory system {self._spec.name!r} was shut down and "
                               "started again; get a new handle from the new system")

    async def start(self) -> ClientView:
        """Create the VectorIndex replicas (and the shard hosts) and wait until they answer."""
        await self._ready()
        return self._spec.view()

    async def describe(self) -> tuple[ClientView, Any]:
        await self._ready()
        self._check(None)
        return self._spec.view(), self._spec.settings

    async def indexes(self, incarnation: str) -> list[Any]:
        await self._ready()
        self._check(incarnation)
        return self._indexes

    async def proposer(self, incarnation: str) -> Any:
        """The process consolidation passes run in (``runtime.proposer``), made on the
        first call: a system that never consolidates never starts it."""
        self._check(incarnation)
        if self._proposer is None:
            self._proposer = _Proposer.options(**_options(
                proposer_name(self._spec.name), self._spec.system_actor_options)).remote(
                self._spec)
        return self._proposer

    async def hosts(self, incarnation: str) -> list[Any]:
        await self._ready()
        self._check(incarnation)
        return self._hosts

    # -- dedicated placement ---------------------------------------------------------------

    async def locate(self, owner: str, incarnation: str, suspect: str | None = None) -> Any:
        """The live actor of ``owner``, activated if needed. ``suspect``: the id of an actor
        the client could not reach; if it is still the live one and stays silent, replace it."""
        await self._ready()
        self._check(incarnation)
        actor = self._live.get(owner)
        if (actor is not None and suspect == actor._actor_id.hex()
                and not await self._responds(actor)):
            async with self._lock:
                if self._live.get(owner) is actor:
                    _kill(self._live.pop(owner))
            actor = None
        if actor is None:
            async with self._lock:
                self._check(incarnation)
                actor = self._live.get(owner)
                if actor is None:
                    while self._live.full:
                        await self._passivate(next(self._live.lru()))
                    actor = _Owner.options(**_options(owner_name(self._spec.name, owner),
                                                      _holder_options(self._spec))
                                           ).remote(self._spec, owner)
                    self._live.add(owner, actor)
                    self._unborn[owner] = time.monotonic()
                    get_metrics().set_live_owners(len(self._live))
        self._live.touch(owner)
        return actor

    async def _responds(self, actor: Any) -> bool:
        try:
            await asyncio.wait_for(actor.ping.remote(), self._spec.call_timeout_s)
        except Exception:
            return False
        return True

    def touch(self, owner: str) -> None:
        """An owner actor reports use (a few times a second at most)."""
        self._unborn.pop(owner, None)
        self._live.touch(owner)

    async def _passivate(self, owner: str) -> None:
        """Drain, then kill the owner's actor. Callers hold ``self._lock``."""
        actor = self._live.pop(owner)
        self._unborn.pop(owner, None)
        if actor is None:
            return
        get_metrics().set_live_owners(len(self._live))
        grace = self._spec.drain_grace_s
        # Dead or stuck: killed all the same; its calls in flight get retried elsewhere.
        with contextlib.suppress(Exception):
            await asyncio.wait_for(actor.drain.remote(grace), grace + 5)
        _kill(actor)

    def _idle(self) -> list[str]:
        # An actor never used within UNBORN_GRACE_S is idle after all (its caller is gone).
        now = time.monotonic()
        return [o for o in self._live.idle()
                if now - self._unborn.get(o, -UNBORN_GRACE_S) >= UNBORN_GRACE_S]

    async def _sweep(self) -> None:
        every = sweep_interval(self._spec.settings.idle_timeout_s)
        while True:
            await asyncio.sleep(every)
            for owner in self._idle():
                async with self._lock:
                    if owner in self._idle():
                        await self._passivate(owner)

    async def _count_live(self) -> None:
        """Sharded placement: set ``live_owner_actors`` from the hosts' counts, every
        ``LIVE_GAUGE_INTERVAL_S`` (a host that does not answer keeps the last value)."""
        while True:
            with contextlib.suppress(Exception):
                infos = await asyncio.wait_for(
                    asyncio.gather(*(h.info.remote() for h in self._hosts)),
                    self._spec.call_timeout_s)
                get_metrics().set_live_owners(sum(i["live"] for i in infos))
            await asyncio.sleep(LIVE_GAUGE_INTERVAL_S)

    async def _dream(self) -> None:
        """Consolidation passes for the owners idle for ``consolidation_idle_s``, each
        through its handle (see ``runtime.dreamer``)."""
        s = self._spec.settings
        assert s.consolidation_idle_s is not None
        view = self._spec.view()

        async def changes() -> Mapping[str, datetime]:
            found: Mapping[str, datetime] = await self._indexes[0].last_changes.remote()
            return found

        async def run(owner: str) -> None:
            await OwnerHandle(view, owner).consolidate_async()

        dreamer = Dreamer(changes, run, s.consolidation_idle_s, s.consolidation_owners_per_run)
        while True:
            await asyncio.sleep(interval(s.consolidation_idle_s))
            try:
                await dreamer.run_once()
            except Exception:  # the index is restarting: next time
                log.warning("looking for idle owners to consolidate failed", exc_info=True)

    async def passivate(self, owners: Sequence[str]) -> int:
        """Passivate these owners now (tests, admin); how many were live."""
        await self._ready()
        if self._spec.settings.placement == "sharded":
            counts = await asyncio.gather(*(h.passivate.remote(list(owners))
                                            for h in self._hosts))
            return int(sum(counts))
        done = 0
        async with self._lock:
            for owner in owners:
                if owner in self._live:
                    await self._passivate(owner)
                    done += 1
        return done

    # -- stats and shutdown ----------------------------------------------------------------

    async def stats(self, detail: bool = False) -> dict[str, Any]:
        """Live owners, their high-water mark and passivations; ``detail`` adds each
        actor's pid and RSS (one call per actor)."""
        await self._ready()
        s = self._spec.settings
        out: dict[str, Any] = {"placement": s.placement, "cap": s.max_live_owners}
        if s.placement == "sharded":
            infos = await asyncio.gather(*(h.info.remote() for h in self._hosts))
            out.update(live_owners=sum(i["live"] for i in infos),
                       high_water=sum(i["high_water"] for i in infos),
                       passivated=sum(i["passivated"] for i in infos), live_actors=len(infos))
            if detail:
                out["hosts"] = infos
        else:
            out.update(live_owners=len(self._live), high_water=self._live.high_water,
                       passivated=self._live.evicted, live_actors=len(self._live))
            if detail:
                out["owners"] = await asyncio.gather(
                    *(a.info.remote() for _, a in self._live.items()), return_exceptions=True)
                out["owners"] = [i for i in out["owners"] if isinstance(i, dict)]
        if detail:
            out["indexes"] = await asyncio.gather(*(ix.info.remote() for ix in self._indexes))
        get_metrics().set_live_owners(int(out["live_owners"]))
        return out

    async def shutdown(self, grace_s: float) -> None:
        """Refuse new work, let calls in flight finish (bounded), then end every actor."""
        self._closing = True
        for task in (self._sweeper, self._dreaming):
            if task is not None:
                task.cancel()
        holders = self._hosts or [a for _, a in self._live.items()]
        if grace_s > 0 and holders:
            await asyncio.wait(
                [asyncio.ensure_future(_quiet(h.drain.remote(grace_s))) for h in holders],
                timeout=grace_s + 1)
        system = [*self._indexes, *([self._proposer] if self._proposer is not None else [])]
        closers = [_quiet(a.close.remote()) for a in [*holders, *system]]
        if closers:
            await asyncio.wait([asyncio.ensure_future(c) for c in closers], timeout=5)
        for actor in [*holders, *system]:
            _kill(actor)
        self._hosts, self._indexes, self._proposer = [], [], None
        for owner, _ in self._live.items():
            self._live.pop(owner)
        pool = self._spec.extractor_pool
        if pool is not None:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(pool.shutdown, force=True)


def _kill(actor: Any) -> None:
    # Synchronous in the GCS: once it returns, the name is free for the next activation.
    if actor is not None:
        ray.kill(actor, no_restart=True)


async def _quiet(ref: Any) -> None:
    with contextlib.suppress(Exception):  # shutting down: a dead actor is fine
        await ref


RemoteRegistry: Any = ray.remote(Registry)
