"""What agents use: ``MemorySystem`` (start, connect, search, shutdown) and ``OwnerHandle``.

::

    system = MemorySystem.start(MemorySettings(placement="sharded"), name="prod")
    alice = system.owner("alice")                  # a plain, picklable handle
    snap = alice.add_fact("The user is a Java developer")
    alice.store("went live on Kubernetes with helm")
    hits = alice.search("K8s deployment", also=["team-infra"])
    other_agent.remote(alice)                      # pass it to tasks and actors
    print(await alice.snapshot_async(min_version=snap.version))
    system.shutdown()

Every method has a blocking form ``x`` and a coroutine twin ``x_async`` (use the
latter inside async code, async actors included: the blocking form blocks the
event loop while it waits). Arguments are checked here, before anything is sent;
a write carries an operation id (generated unless given) so a retried write is
applied once.

Ray: ``start`` and ``connect`` call ``ray.init`` themselves when this process is not
connected yet (and ``shutdown`` then calls ``ray.shutdown``); handles never do —
used in a process without Ray they raise ``RuntimeUnavailable``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import ray

from .. import validation as check
from ..config import MemorySettings
from ..embedding import Embedder
from ..errors import ConfigurationError, SystemClosed
from ..models import SearchHit
from . import calls
from .connection import Connection, connection
from .errors import RuntimeUnavailable, ray_errors
from .handle import OwnerHandle
from .placement import NAMESPACE, registry_name
from .registry import BASE_OPTIONS, RemoteRegistry
from .spec import ClientView, SystemSpec


class MemorySystem:
    """A running memory system: its settings, its actors, a factory of owner handles.

    Create it with :meth:`start` (or join one with :meth:`connect`), not directly.
    """

    def __init__(self, view: ClientView, settings: MemorySettings, *,
                 owns_ray: bool = False) -> None:
        self._view = view
        self.settings = settings
        self._owns_ray = owns_ray

    @property
    def name(self) -> str:
        return self._view.name

    @property
    def connection(self) -> Connection:
        """This process's connection to the system: actor handles, snapshots held here."""
        return connection(self._view)

    # -- lifecycle --------------------------------------------------------------------------

    @classmethod
    def start(
        cls,
        settings: MemorySettings | None = None,
        *,
        name: str = "default",
        index_replicas: int = 1,
        embedder_factory: Callable[[], Embedder] | None = None,
        actor_options: Mapping[str, Any] | None = None,
        system_actor_options: Mapping[str, Any] | None = None,
        call_timeout_s: float = 60.0,
        read_timeout_s: float = 10.0,
        ray_address: str | None = None,
        start_timeout_s: float = 300.0,
        **options: Any,
    ) -> MemorySystem:
        """Start the system ``name`` on the Ray cluster and return it.

        ``options`` override fields of ``settings`` (``placement="dedicated"``,
        ``max_live_owners=100``, ...). ``index_replicas`` VectorIndex actors serve
        searches; ``embedder_factory`` (picklable, no arguments) replaces the
        configured embedding model. ``actor_options`` / ``system_actor_options`` are
        passed to ``.options()`` of the owner-holding actors / of the registry and
        the VectorIndex (for example ``{"resources": {"memory_node": 1}}``).
        A system of that name already running is an error: use :meth:`connect`.
        """
        if settings is None:
            base = MemorySettings(**options)
        elif options:
            base = type(settings)(**{**settings.model_dump(), **options})
        else:
            base = settings
        spec = SystemSpec(
            name, base, index_replicas=index_replicas, embedder_factory=embedder_factory,
            actor_options=dict(actor_options or {}),
            system_actor_options=dict(system_actor_options or {}),
            call_timeout_s=call_timeout_s, read_timeout_s=read_timeout_s,
        )
        owns_ray = _ensure_ray(ray_address)
        try:
            running = ConfigurationError(
                f"memory system {name!r} is already running; use MemorySystem.connect()")
            if _find_registry(name) is not None:
                raise running
            # Detached: the system outlives the driver that started it, until shutdown().
            try:
                registry = RemoteRegistry.options(**{
                    **BASE_OPTIONS, "max_task_retries": -1, **spec.system_actor_options,
                    "name": registry_name(name), "namespace": NAMESPACE, "lifetime": "detached",
                }).remote(spec)
            except ray.exceptions.ActorAlreadyExistsError as exc:  # another start came first
                raise running from exc
            try:
                with ray_errors(f"starting memory system {name!r}"):
                    view: ClientView = ray.get(registry.start.remote(), timeout=start_timeout_s)
            except BaseException:
                _quiet_kill(registry, spec.drain_grace_s)
                raise
        except BaseException:
            if owns_ray:
                ray.shutdown()
            raise
        return cls(view, spec.settings, owns_ray=owns_ray)

    @classmethod
    def connect(cls, name: str = "default", *, ray_address: str | None = "auto",
                timeout_s: float = 60.0) -> MemorySystem:
        """Join the running system ``name`` (from another driver, task or actor)."""
        owns_ray = _ensure_ray(ray_address)
        registry = _find_registry(name)
        if registry is None:
            if owns_ray:
                ray.shutdown()
            raise RuntimeUnavailable(f"no memory system {name!r} is running on this cluster")
        with ray_errors(f"connecting to memory system {name!r}"):
            view, settings = ray.get(registry.describe.remote(), timeout=timeout_s)
        return cls(view, settings, owns_ray=owns_ray)

    def shutdown(self, force: bool = False, grace_period_s: float = 5.0) -> None:
        """Stop the system: calls in flight may finish within ``grace_period_s`` (unless
        ``force``), then every actor ends. Safe to call twice; later calls raise
        ``SystemClosed``, here and in every handle of this system."""
        if not ray.is_initialized():  # Ray went first: the actors are gone with it
            return
        conn = self.connection
        if conn.closed:
            return
        conn.closed = True
        registry = _find_registry(self.name)
        if registry is not None:
            _quiet_kill(registry, 0.0 if force else grace_period_s)
        if self._owns_ray:
            ray.shutdown()

    def __enter__(self) -> MemorySystem:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # -- use --------------------------------------------------------------------------------

    def owner(self, owner_id: str) -> OwnerHandle:
        """A handle on ``owner_id``'s memory (no remote call; the id is checked here)."""
        handle = OwnerHandle(self._view, owner_id)  # checks the id
        self.connection.check_open()
        return handle

    def search(self, owners: str | Iterable[str], query: str, limit: int = 10, *,
               min_score: float = 0.0, filter: Mapping[str, Any] | None = None
               ) -> list[SearchHit]:
        """Hybrid search over the memories of several owners at once, best first;
        ``filter`` keeps the memories whose metadata has these values."""
        return self.connection.call(calls.search(self._view, owners, query, limit, min_score,
                                           filter))

    async def search_async(self, owners: str | Iterable[str], query: str, limit: int = 10, *,
                           min_score: float = 0.0, filter: Mapping[str, Any] | None = None
                           ) -> list[SearchHit]:
        return await self.connection.call_async(
            calls.search(self._view, owners, query, limit, min_score, filter))

    def stats(self, detail: bool = False) -> dict[str, Any]:
        """Live owners, the most ever live at once, passivations; ``detail`` adds each
        actor's pid and resident memory."""
        out: dict[str, Any] = _registry_call(self.connection, "stats", detail)
        return out

    def passivate(self, owners: Sequence[str]) -> int:
        """Passivate these owners now (their state stays in the backend); how many were live."""
        who = list(check.owner_ids(owners))
        n: int = _registry_call(self.connection, "passivate", who)
        return n


def _registry_call(conn: Connection, method: str, *args: Any) -> Any:
    conn.check_open()
    with ray_errors(method):
        return ray.get(getattr(conn.registry(), method).remote(*args),
                       timeout=conn.view.call_timeout_s)


def _ensure_ray(address: str | None) -> bool:
    """Connect this process to Ray if it is not; True if this call did (so it owns it)."""
    if ray.is_initialized():
        return False
    try:
        ray.init(address=address, include_dashboard=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise RuntimeUnavailable(f"could not connect to Ray at {address!r}: {exc}") from exc
    return True


def _find_registry(name: str) -> Any:
    try:
        return ray.get_actor(registry_name(name), namespace=NAMESPACE)
    except ValueError:
        return None


def _quiet_kill(registry: Any, grace_s: float) -> None:
    """Ask the registry to drain and end its actors (bounded), then end it."""
    with contextlib.suppress(Exception):  # dead or stuck: killing it ends its actors too
        ray.get(registry.shutdown.remote(grace_s), timeout=grace_s + 15)
    ray.kill(registry, no_restart=True)


__all__ = ["MemorySystem", "OwnerHandle", "SystemClosed"]
