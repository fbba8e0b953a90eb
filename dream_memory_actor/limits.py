"""The size caps of what one owner keeps, taken from the settings.

They bound what a single call may carry (checked by ``validation``) and what
accumulates over many calls: merged metadata and ``merged_from``
(``storage.dedup.merged``) and the status keys of an owner (``storage.ops``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["DEFAULT_LIMITS", "Limits"]


@dataclass(frozen=True)
class Limits:
    """The size caps of what one owner keeps, besides content (``max_content_bytes``).

    Defaults are those of :class:`~dream_memory_actor.config.MemorySettings`;
    :meth:`of` takes them from settings. They hold after merges too
    (``storage.dedup.merged``).
    """

    #: Metadata of one memory, serialized as JSON, also after merges.
    metadata_bytes: int = 16 * 1024
    #: Top-level metadata keys of one memory, also after merges.
    metadata_keys: int = 128
    #: Earlier contents one memory keeps in ``merged_from``, and their total UTF-8 bytes.
    merge_history: int = 20
    merge_history_bytes: int = 64 * 1024
    #: Status keys of one owner.
    status_keys: int = 256
    #: ``evidence`` and ``source`` of one pending item, UTF-8 bytes each.
    pending_field_bytes: int = 8 * 1024
    #: Earlier values each status key of an owner keeps (its current value included).
    status_history: int = 20
    #: Items of one ``store_many`` batch, and their content's total UTF-8 bytes.
    batch_items: int = 1000
    batch_bytes: int = 8 * 1024 * 1024

    @classmethod
    def of(cls, settings: Any) -> Limits:
        """The limits of a ``MemorySettings``."""
        return cls(settings.max_metadata_bytes, settings.max_metadata_keys,
                   settings.max_merge_history, settings.max_merge_history_bytes,
                   settings.max_status_keys, settings.max_pending_field_bytes,
                   status_history=settings.max_status_history)


DEFAULT_LIMITS = Limits()
