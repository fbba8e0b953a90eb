"""What a memory system is made of, as plain picklable data, and how its actors open
their engines.

``SystemSpec`` travels to the registry, which hands it to every actor it creates;
``ClientView`` is the small part a handle carries (it validates arguments locally
and finds the actors by name).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..config import MemorySettings
from ..embedding import CachedEmbedder, Embedder, open_embedder
from ..engine import MemoryEngine
from ..engine.memory_engine import open_embedding
from ..errors import ConfigurationError
from ..limits import DEFAULT_LIMITS, Limits
from ..models import new_id
from ..storage import open_stores
from .placement import system_name

if TYPE_CHECKING:
    from .extractor_pool import ExtractorPool

#: Dedicated placement runs one actor per owner: each opens a small pool only.
DEDICATED_POOL_MAX = 2


@dataclass(frozen=True)
class ClientView:
    """What a handle needs without asking the cluster: names, limits, timeouts."""

    name: str
    placement: str
    max_content_bytes: int
    call_timeout_s: float
    read_timeout_s: float
    #: Which start of the system this is: a handle of a system that was shut down
    #: does not silently talk to a new system that took the same name.
    incarnation: str
    #: The size caps besides content (``MemorySettings.limits``).
    limits: Limits = DEFAULT_LIMITS


@dataclass(frozen=True)
class SystemSpec:
    """Settings plus the runtime's own options (validated in ``__post_init__``)."""

    name: str
    settings: MemorySettings
    index_replicas: int = 1
    #: A picklable zero-argument callable returning an :class:`Embedder`; when set it
    #: replaces ``settings.embedding_model`` in the VectorIndex actors (tests, custom models).
    embedder_factory: Callable[[], Embedder] | None = None
    #: Extra ``.options()`` for the actors holding owners (owner actors or shard hosts).
    actor_options: Mapping[str, Any] = field(default_factory=dict)
    #: Extra ``.options()`` for the registry and the VectorIndex replicas.
    system_actor_options: Mapping[str, Any] = field(default_factory=dict)
    call_timeout_s: float = 60.0
    read_timeout_s: float = 10.0
    #: How long a passivation waits for the calls in flight before it kills the actor.
    drain_grace_s: float = 10.0
    incarnation: str = field(default_factory=new_id)
    #: The LLM extractor pool the owner-holding actors send extraction to; set by the
    #: registry when ``settings.extraction_model`` is configured. ``None``: each actor
    #: runs the configured extractor itself (the offline rule-based one: no actors).
    extractor_pool: ExtractorPool | None = None

    def __post_init__(self) -> None:
        system_name(self.name)
        r = self.index_replicas
        if isinstance(r, bool) or not isinstance(r, int) or not 1 <= r <= 64:
            raise ConfigurationError(f"index_replicas must be an integer in 1..64, got {r!r}")
        if self.settings.backend == "memory" and r != 1:
            raise ConfigurationError(
                "backend 'memory' keeps memories inside one process: use index_replicas=1"
            )
        for what in ("call_timeout_s", "read_timeout_s", "drain_grace_s"):
            value = getattr(self, what)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ConfigurationError(f"{what} must be a positive number, got {value!r}")
        if self.embedder_factory is not None and not callable(self.embedder_factory):
            raise ConfigurationError("embedder_factory must be a callable returning an Embedder")

    def view(self) -> ClientView:
        s = self.settings
        return ClientView(self.name, s.placement, s.max_content_bytes, self.call_timeout_s,
                          self.read_timeout_s, self.incarnation, s.limits)

    def owner_settings(self) -> MemorySettings:
        """Settings for an actor that holds owners: L1 only; when dedicated, a pool of at
        most ``DEDICATED_POOL_MAX`` connections opened on demand (one actor per owner)."""
        s = self.settings
        if s.placement != "dedicated":
            return s
        return s.model_copy(update={
            "postgres_pool_min": 0,
            "postgres_pool_max": min(s.postgres_pool_max, DEDICATED_POOL_MAX),
        })


async def open_index_engine(spec: SystemSpec, *, setup: bool) -> MemoryEngine:
    """The VectorIndex's engine: both stores and the (cached) embedder."""
    settings = spec.settings
    embedder: CachedEmbedder | None
    if spec.embedder_factory is not None:
        embedder = await open_embedder(settings, spec.embedder_factory())
    else:
        settings, embedder = await open_embedding(settings)
    structured, vector = await open_stores(settings, embedder.dim if embedder else None)
    if setup:
        await structured.setup()
        await vector.setup()
    return MemoryEngine(settings, structured, vector, embedder)


async def open_owner_engine(spec: SystemSpec) -> MemoryEngine:
    """An owner holder's engine: L1 reads and writes only (L2 goes to the VectorIndex),
    so no embedder is loaded per owner actor. Migrations were run by the first index."""
    settings = spec.owner_settings()
    structured, vector = await open_stores(settings, None)
    return MemoryEngine(settings, structured, vector, None)
