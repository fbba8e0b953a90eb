"""Forgetting an owner on both layers, composed above the stores.

Each store removes what it holds of the owner (``StructuredStore.forget``,
``VectorStore.forget``); :func:`forget_owner` does both, L2 first, and leaves the
one tombstone, which counts what there was of each kind and names nobody (see
``storage.tombstones``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from .. import validation as check
from ..models import Tombstone
from ..storage.base import StructuredStore, VectorStore


async def forget_owner(structured: StructuredStore,
                       memories: VectorStore | Callable[[str], Awaitable[int]], owner: str, *,
                       by: str, op_id: str | None = None) -> Tombstone:
    """Erase ``owner`` from both layers; the tombstone counts what there was, by kind.
    ``memories`` is the vector store, or what erases the L2 layer and says how many
    memories went.

    L2 goes first: an erasure stopped half way is finished by a retry (same
    ``op_id``), which finds the rest and records the one tombstone (whose memory
    count is then what the retry found).
    """
    check.owner_id(owner)
    check.decider(by)
    if op_id is not None:
        check.op_id(op_id)
    snap = await structured.load(owner)
    audit = await structured.audit(owner, limit=None)
    counts = {"rules": len(snap.rules), "facts": len(snap.facts), "status": len(snap.status),
              "pending": len(snap.pending), "audit": len(audit)}
    erase_l2 = memories.forget if isinstance(memories, VectorStore) else memories
    counts["memories"] = await erase_l2(owner)
    return await structured.forget(owner, by=by, counts=counts, op_id=op_id)
