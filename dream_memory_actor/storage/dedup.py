"""What a store does, decided once for every backend: pure functions.

``merge_target``: insert or merge, and into which memory. ``merged``: what a merge
does to the surviving memory (content updated, metadata merged, the original
embedding kept, ``merged_from`` / ``merged_at`` recorded so the merge can be
traced). ``df_delta``: how a write moves the owner's document frequencies.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

from ..limits import DEFAULT_LIMITS, Limits
from ..models import VectorMemory
from ..text import terms
from ..validation import RESERVED_METADATA_KEYS

#: How many earlier contents ``merged_from`` keeps by default (oldest dropped first).
MERGE_HISTORY = DEFAULT_LIMITS.merge_history


def merged(existing: VectorMemory, content: str, metadata: dict[str, Any],
           now: datetime, limits: Limits = DEFAULT_LIMITS) -> VectorMemory:
    """The memory after merging ``content`` / ``metadata`` into ``existing``.

    New metadata keys win over old ones; the oldest old keys are dropped while the
    merged metadata has more keys or serialized bytes than ``limits`` allow.
    ``merged_from`` lists the earlier contents, newest kept, at most
    ``limits.merge_history`` of them and ``limits.merge_history_bytes`` in all;
    ``merged_at`` is the time of this merge, ``merge_count`` counts merges.
    ``updated_at`` moves to ``now`` (never backwards).
    """
    history = [h for h in existing.metadata.get("merged_from", []) if isinstance(h, str)]
    if existing.content != content:
        history.append(existing.content)
    meta = _bounded({k: v for k, v in existing.metadata.items()
                     if k not in RESERVED_METADATA_KEYS}, metadata, limits)
    meta["merged_from"] = _recent(history, limits)
    meta["merged_at"] = now.isoformat()
    meta["merge_count"] = int(existing.metadata.get("merge_count", 0)) + 1
    return existing.model_copy(
        update={
            "content": content,
            "metadata": meta,
            "updated_at": max(existing.updated_at, now),
        }
    )


def _bounded(old: dict[str, Any], new: dict[str, Any], limits: Limits) -> dict[str, Any]:
    """``old`` updated by ``new``, the oldest keys of ``old`` only dropped to fit ``limits``
    (``new`` fits them: it was checked)."""
    meta = {**old, **new}
    kept = [k for k in old if k not in new]  # droppable, oldest first
    size = _json_size(meta)
    while kept and (len(meta) > limits.metadata_keys or size > limits.metadata_bytes):
        key = kept.pop(0)
        # '"key": value, ' leaves: the size of {"key": value}, its braces counted for ", "
        size -= _json_size({key: meta.pop(key)})
    return meta


def _recent(history: list[str], limits: Limits) -> list[str]:
    """The newest entries of ``history`` within the count and byte bounds, oldest first."""
    out: list[str] = []
    total = 0
    for text in reversed(history[-limits.merge_history:] if limits.merge_history else []):
        total += len(text.encode("utf-8"))
        if total > limits.merge_history_bytes:
            break
        out.append(text)
    out.reverse()
    return out


def _json_size(value: dict[str, Any]) -> int:
    return len(json.dumps(value, ensure_ascii=False).encode("utf-8"))


def merge_target(nearest: tuple[str, float] | None, threshold: float,
                 same_text: Callable[[], str | None]) -> tuple[str, float | None] | None:
    """The memory a new content merges into, with its similarity, or ``None`` (insert).

    ``nearest`` is the owner's memory most similar to the new embedding and its
    cosine (``None`` without an embedding or any stored vector); it is chosen when the
    cosine is above ``threshold``. Otherwise ``same_text()`` gives the memory with the
    same text, case and spaces aside (similarity ``None``), if any.
    """
    if nearest is not None and nearest[1] > threshold:
        return nearest
    same = same_text()
    return None if same is None else (same, None)


def df_delta(old: str | None, new: str | None) -> dict[str, int]:
    """How a write changes document frequencies: +1 for each term only ``new`` has, -1 for
    each only ``old`` has (insert: ``old`` None; delete: ``new`` None).

    >>> df_delta("deploy helm", "deploy argo")
    {'helm': -1, 'argo': 1}
    """
    if old == new:
        return {}
    gone = [] if old is None else terms(old)
    come = [] if new is None else terms(new)
    come_set = set(come)
    gone_set = set(gone)
    delta = {t: -1 for t in gone if t not in come_set}
    delta.update({t: 1 for t in come if t not in gone_set})
    return delta
