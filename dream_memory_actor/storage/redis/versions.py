"""What the versioned L2 writes on Redis (``RedisVectorStore``'s store_many, update and
supersede) share with the search: the rows they work on, filtered and read.

Keys of owner ``o`` besides those of ``vector``::

    p:{o}:l2:hv:<id>   list    the closed versions of memory <id> (JSON), oldest first
    p:{o}:l2:sb:<id>   string  the last version of the memory <id> superseded (JSON)

Histories are neither hashes nor under the memory prefix, so neither the search
module's index nor the owner's row fetch sees them. Each write is one optimistic
transaction, as ``store`` is (``RedisVectorStore._transact``: WATCH the owner's token,
decide on the rows read, MULTI/EXEC with the document frequencies and the ``op_id``
record).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ...errors import MemoryNotFound
from ...models import VectorMemory
from ..versions import matches
from .rows import OwnerRows

#: What a write decided: its result (JSON), the commands to queue, the rows after it.
Planned = tuple[str, Callable[[Any], None], OwnerRows]


def filtered(rows: OwnerRows, where: Mapping[str, Any] | None) -> OwnerRows:
    """The rows whose metadata matches ``where`` (all of them without a filter)."""
    if not where:
        return rows
    return OwnerRows(
        rows.token, [r for r in rows.rows.values() if matches(r.memory.metadata, where)]
    )


def as_vector(embedding: list[float] | None) -> np.ndarray | None:
    return None if embedding is None else np.asarray(embedding, dtype=np.float64)


def live_memory(rows: OwnerRows, owner: str, memory_id: str) -> VectorMemory:
    row = rows.rows.get(memory_id)
    if row is None:
        raise MemoryNotFound(f"owner {owner!r} has no memory {memory_id!r}")
    return row.memory
