"""dream-memory-actor: one shared long-term memory for many LLM agents on Ray."""

from __future__ import annotations

from .config import MemorySettings
from .engine import MemoryEngine
from .errors import (
    AuditNotWritable,
    BackendError,
    BackendUnavailable,
    ConfigurationError,
    DreamMemoryError,
    EmbeddingError,
    InvalidContent,
    InvalidEmbedding,
    InvalidInput,
    InvalidMetadata,
    InvalidOwnerId,
    InvalidQuery,
    InvalidStatusKey,
    MemoryNotFound,
    MissingDependency,
    NotFound,
    PendingItemNotFound,
    SchemaError,
    SystemClosed,
    UnknownStatusKey,
    UnsupportedBackend,
)
from .extraction import ExtractionReport, ExtractionService, HitlDecision
from .models import (
    AuditEntry,
    ChatAppend,
    ChatMessage,
    MemoryFact,
    MemoryPendingItem,
    MemoryRule,
    MemorySnapshot,
    SearchHit,
    StoreResult,
    VectorMemory,
)
from .process import __version__ as __version__
from .scoring import Weights

__all__ = [
    "AuditEntry",
    "AuditNotWritable",
    "BackendError",
    "BackendUnavailable",
    "ChatAppend",
    "ChatMessage",
    "ConfigurationError",
    "DreamMemoryError",
    "EmbeddingError",
    "ExtractionReport",
    "ExtractionService",
    "HitlDecision",
    "InvalidContent",
    "InvalidEmbedding",
    "InvalidInput",
    "InvalidMetadata",
    "InvalidOwnerId",
    "InvalidQuery",
    "InvalidStatusKey",
    "MemoryEngine",
    "MemoryFact",
    "MemoryNotFound",
    "MemoryPendingItem",
    "MemoryRule",
    "MemorySettings",
    "MemorySnapshot",
    "MissingDependency",
    "NotFound",
    "PendingItemNotFound",
    "SchemaError",
    "SearchHit",
    "StoreResult",
    "SystemClosed",
    "UnknownStatusKey",
    "UnsupportedBackend",
    "VectorMemory",
    "Weights",
]

# Superseding and history.
from .errors import ItemNotFound, ItemSuperseded, SupersessionCycle
from .history import ItemHistory, ItemVersion, StatusChange

__all__ += ["ItemHistory", "ItemNotFound", "ItemSuperseded", "ItemVersion", "StatusChange",
            "SupersessionCycle"]

# The Ray runtime is an optional extra (``ray``): imported on first use, not here.
__all__ += ["MemorySystem", "OwnerHandle"]

from typing import TYPE_CHECKING  # noqa: E402

if TYPE_CHECKING:
    from .runtime import MemorySystem, OwnerHandle


def __getattr__(name: str) -> object:
    if name in ("MemorySystem", "OwnerHandle"):
        from . import runtime

        return getattr(runtime, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
