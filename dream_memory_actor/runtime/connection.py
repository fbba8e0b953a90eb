"""A process's connection to one memory system: finding actors, calling them, retrying.

Handles are plain data; the first call in a process opens a :class:`Connection`
for the handle's system and keeps it (one per system and process). It caches
actor handles, routes owner calls to the owner's actor (by stable hash to a shard
host, or through the registry to a dedicated actor) and index calls round-robin
to the VectorIndex replicas, and retries — a bounded number of times — a call
whose actor restarted, died or passivated the owner meanwhile. Writes carry an
operation id, so a retry is applied once.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import ray

from ..errors import SystemClosed
from ..models import MemorySnapshot, utcnow
from .errors import RuntimeUnavailable, reraise, retryable
from .placement import NAMESPACE, registry_name, shard_of
from .spec import ClientView

T = TypeVar("T")

#: Attempts per call (the first included) before ``RuntimeUnavailable``.
ATTEMPTS = 8
#: Dedicated placement: owner actor handles kept per process.
OWNER_CACHE = 4096


def backoff(attempt: int) -> float:
    """Seconds to wait before attempt ``attempt`` (1-based retries): 50 ms doubling to 2 s."""
    return float(min(0.05 * 2 ** (attempt - 1), 2.0))


@dataclass(frozen=True)
class Call(Generic[T]):
    """One remote call: where it goes, what it sends, what the caller gets back."""

    target: str  # "owner" or "index"
    method: str
    args: tuple[Any, ...]
    then: Callable[[Any], T]
    what: str
    owner: str = ""
    #: Added to the call timeout (a ``min_version`` wait may take that long on the actor).
    extra_timeout_s: float = 0.0
    #: The Ray task's name, when the call's question travels in it (the snapshot read).
    task_name: str = ""


class Connection:
    """Actor handles of one system in this process. Thread-safe for the sync API."""

    def __init__(self, view: ClientView) -> None:
        self.view = view
        self.closed = False
        self._guard = threading.Lock()
        self._registry: Any = None
        self._hosts: list[Any] | None = None
        self._indexes: list[Any] | None = None
        self._owners: OrderedDict[str, Any] = OrderedDict()
        self._suspects: dict[str, str] = {}
        self._rr = itertools.count()
        # Last snapshot read per owner: an unchanged snapshot is confirmed, not re-sent.
        self._snaps: OrderedDict[str, tuple[str, int, MemorySnapshot]] = OrderedDict()

    # -- finding actors (each lookup is the first step of an attempt) ------------------------

    def check_open(self) -> None:
        if self.closed:
            raise SystemClosed(f"memory system {self.view.name!r} was shut down")

    def registry(self) -> Any:
        if self._registry is None:
            try:
                self._registry = ray.get_actor(registry_name(self.view.name),
                                               namespace=NAMESPACE)
            except ValueError as exc:
                raise SystemClosed(
                    f"memory system {self.view.name!r} is not running (it was shut down)"
                ) from exc
        return self._registry

    def _lookup(self, call: Call[Any]) -> tuple[Any, Any]:
        """(actor, None) when cached, or (None, ref of the registry call that finds it)."""
        reg_args = self.view.incarnation
        with self._guard:
            if call.target == "index":
                if self._indexes:
                    return self._indexes[next(self._rr) % len(self._indexes)], None
                return None, self.registry().indexes.remote(reg_args)
            if self.view.placement == "sharded":
                if self._hosts:
                    return self._hosts[shard_of(call.owner, len(self._hosts))], None
                return None, self.registry().hosts.remote(reg_args)
            actor = self._owners.get(call.owner)
            if actor is not None:
                self._owners.move_to_end(call.owner)
                return actor, None
            suspect = self._suspects.pop(call.owner, None)
            return None, self.registry().locate.remote(call.owner, reg_args, suspect)

    def _found(self, call: Call[Any], found: Any) -> Any:
        """Cache what the registry answered; the actor for ``call``."""
        with self._guard:
            if call.target == "index":
                self._indexes = list(found)
                return self._indexes[next(self._rr) % len(self._indexes)]
            if self.view.placement == "sharded":
                self._hosts = list(found)
                return self._hosts[shard_of(call.owner, len(self._hosts))]
            self._owners[call.owner] = found
            while len(self._owners) > OWNER_CACHE:
                self._owners.popitem(last=False)
            return found

    def _forget(self, call: Call[Any], actor: Any) -> None:
        """After a failed attempt: look the actor up again next time."""
        with self._guard:
            if actor is None:  # the registry failed: find it by name again (or learn it is gone)
                self._registry = None
            elif call.target == "index":
                self._indexes = None
            elif self.view.placement == "sharded":
                self._hosts = None
            else:
                actor_id: str = actor._actor_id.hex()
                if self._owners.get(call.owner) is actor:
                    del self._owners[call.owner]
                self._suspects[call.owner] = actor_id

    # -- snapshot reads: what this process already holds ----------------------------------

    def known(self, owner: str) -> tuple[str | None, int | None]:
        """(lineage token, version) of the snapshot of ``owner`` held here, if any."""
        with self._guard:
            held = self._snaps.get(owner)
        return (None, None) if held is None else (held[0], held[1])

    def drop_snapshots(self) -> None:
        """Forget every snapshot held here: the next read of each owner carries it whole.

        Frees the copies this process holds; a read after it costs what a first read
        from a new process costs (``python -m benchmarks actor-overhead`` times it).
        """
        with self._guard:
            self._snaps.clear()

    def remember(self, owner: str, reply: Any) -> MemorySnapshot | None:
        """The live snapshot from an actor's reply (or ``None``: ask for the full read)."""
        if reply is None:
            return None
        token, version, snap = reply
        with self._guard:
            if snap is None:
                held = self._snaps.get(owner)
                if held is None or held[:2] != (token, version):
                    return None  # dropped from the cache meanwhile
                snap = held[2]
                self._snaps.move_to_end(owner)
            else:
                self._snaps[owner] = (token, version, snap)
                while len(self._snaps) > OWNER_CACHE:
                    self._snaps.popitem(last=False)
        result: MemorySnapshot = snap.live(utcnow())
        return result

    # -- calling: the same loop, blocking and async -------------------------------------------

    def call(self, call: Call[T]) -> T:
        timeout = self.view.call_timeout_s + call.extra_timeout_s
        last: BaseException | None = None
        for attempt in range(ATTEMPTS):
            self.check_open()
            if attempt:
                time.sleep(backoff(attempt))
            actor = None
            try:
                actor, ref = self._lookup(call)
                if actor is None:
                    actor = self._found(call, ray.get(ref, timeout=timeout))
                value = ray.get(_submit(actor, call), timeout=timeout)
            except Exception as exc:
                last = self._failed(call, actor, exc)
                continue
            return call.then(value)
        raise RuntimeUnavailable(f"{call.what}: no answer after {ATTEMPTS} attempts") from last

    async def call_async(self, call: Call[T]) -> T:
        timeout = self.view.call_timeout_s + call.extra_timeout_s
        last: BaseException | None = None
        for attempt in range(ATTEMPTS):
            self.check_open()
            if attempt:
                await asyncio.sleep(backoff(attempt))
            actor = None
            try:
                actor, ref = self._lookup(call)
                if actor is None:
                    actor = self._found(call, await _wait(ref, timeout))
                value = await _wait(_submit(actor, call), timeout)
            except Exception as exc:
                last = self._failed(call, actor, exc)
                continue
            return call.then(value)
        raise RuntimeUnavailable(f"{call.what}: no answer after {ATTEMPTS} attempts") from last

    def _failed(self, call: Call[Any], actor: Any, exc: Exception) -> BaseException:
        """Raise the translated error, or (retryable) forget the actor and return ``exc``."""
        if not retryable(exc):
            reraise(exc, call.what)
        self._forget(call, actor)
        return exc


def _submit(actor: Any, call: Call[Any]) -> Any:
    """Start ``call`` on ``actor``; its object ref."""
    method = getattr(actor, call.method)
    if call.task_name:
        method = method.options(name=call.task_name)
    return method.remote(*call.args)


async def _wait(ref: Any, timeout: float) -> Any:
    return await asyncio.wait_for(asyncio.wrap_future(ref.future()), timeout)


#: Keyed by incarnation: a shut-down system's connection stays (closed), so its
#: handles fail fast with SystemClosed, and a new start of the name gets a new one.
_connections: dict[str, Connection] = {}
_connections_lock = threading.Lock()


def connection(view: ClientView) -> Connection:
    """This process's connection to ``view``'s system (opened on first use)."""
    if not ray.is_initialized():
        raise RuntimeUnavailable(
            f"this process is not connected to Ray, so memory system {view.name!r} cannot be "
            "reached: use the handle inside a Ray task or actor, or call "
            "ray.init(address=...) / MemorySystem.connect() first"
        )
    with _connections_lock:
        conn = _connections.get(view.incarnation)
        if conn is None:
            conn = _connections[view.incarnation] = Connection(view)
        return conn
