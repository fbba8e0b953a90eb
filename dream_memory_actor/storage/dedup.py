"""What a store does, decided once for every backend: pure functions.

``merge_target``: insert or merge, and into which memory. ``merged``: what a merge
does to the surviving memory (content updated, metadata merged, the original
embedding kept, ``merged_from`` / ``merged_at`` recorded so the merge can be
traced). ``df_delta``: how a write moves the owner's document frequencies.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from ..models import VectorMemory
from ..text import terms

#: How many earlier contents ``merged_from`` keeps (oldest dropped first).
MERGE_HISTORY = 20


def merged(existing: VectorMemory, content: str, metadata: dict[str, Any],
           now: datetime) -> VectorMemory:
    """The memory after merging ``content`` / ``metadata`` into ``existing``.

    New metadata keys win over old ones; ``merged_from`` lists the earlier
    contents (bounded), ``merged_at`` is the time of this merge, ``merge_count``
    counts merges. ``updated_at`` moves to ``now`` (never backwards).
    """
    history = list(existing.metadata.get("merged_from", []))
    if existing.content != content:
        history.append(existing.content)
    meta = {**existing.metadata, **metadata}
    meta["merged_from"] = history[-MERGE_HISTORY:]
    meta["merged_at"] = now.isoformat()
    meta["merge_count"] = int(existing.metadata.get("merge_count", 0)) + 1
    return existing.model_copy(
        update={
            "content": content,
            "metadata": meta,
            "updated_at": max(existing.updated_at, now),
        }
    )


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
