"""What a merge of a near-duplicate does to the surviving memory: a pure function.

The seed: content updated, metadata merged, the original embedding kept, and
``merged_from`` / ``merged_at`` recorded so the merge can be traced.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ..models import VectorMemory

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
