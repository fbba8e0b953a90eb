"""The Ray runtime: owner actors, the shared VectorIndex, and the agent-facing client.

Agents use :class:`MemorySystem` and :class:`OwnerHandle`; the actors behind them
are private. Layout: ``owner`` (one owner's live memory, pure asyncio),
``placement`` (names, stable hash, live set), ``holder`` / ``owner_actor`` /
``vector_index`` / ``registry`` (the actors), ``connection`` (routing and retries),
``errors`` (Ray's errors translated), ``calls`` (each call built and checked),
``handle`` and ``client`` (the public API), ``local`` (a throwaway system for scripts
and benchmarks).
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
