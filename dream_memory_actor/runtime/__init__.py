"""The Ray runtime: owner actors, the shared VectorIndex, the extractor pool, and the
agent-facing client.

Agents use :class:`MemorySystem` and :class:`OwnerHandle`; the actors behind them
are private. Layout: ``owner`` (one owner's live memory, pure asyncio),
``placement`` (names, stable hash, live set), ``holder`` / ``owner_actor`` /
``vector_index`` / ``registry`` / ``extractor_pool`` (the actors), ``connection``
(routing and retries), ``errors`` (Ray's errors translated), ``calls`` (each call
built and checked), ``handle`` and ``client`` (the public API), ``doors`` (the
doors' interface over a running system), ``local`` (a throwaway system for
scripts and benchmarks). The operations the handle, the actors and the doors
serve are described once, in ``engine.operations``.
"""

from __future__ import annotations

try:
    import ray  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised via the extras message
    from ..errors import missing_dependency

    raise missing_dependency("ray", "ray") from exc

from .client import MemorySystem
from .errors import RuntimeTimeout, RuntimeUnavailable
from .handle import OwnerHandle

__all__ = ["MemorySystem", "OwnerHandle", "RuntimeTimeout", "RuntimeUnavailable"]
