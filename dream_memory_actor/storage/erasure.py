"""Forgetting an owner: what every backend shares.

``StructuredStore.forget`` removes every record of an owner from its storage and
leaves a :class:`~dream_memory_actor.models.Tombstone`; ``VectorStore.forget``
removes the owner's L2 layer. The tombstone keeps no owner id: a retry of the same
erasure is recognised by :func:`op_key`, a digest of the owner and the operation id,
from which neither can be read back.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from .. import validation as check
from ..models import Tombstone, new_epoch
from .changes import Change

if TYPE_CHECKING:
    from .base import StructuredStore, VectorStore

#: What a tombstone records as ``by`` when the owner erased itself (so the owner's id
#: does not survive in the tombstone's ``by``).
SELF = "the owner"


def op_key(owner: str, op_id: str | None) -> str | None:
    """The key under which an erasure with ``op_id`` is recorded, or ``None``."""
    if op_id is None:
        return None
    return hashlib.sha256(f"{owner}\x00{op_id}".encode()).hexdigest()


def actor(by: str, owner: str) -> str:
    """``by`` as the tombstone records it: :data:`SELF` when it names the owner."""
    return SELF if by == owner else by


def forgotten(owner: str) -> Change:
    """The change an erasure announces: version 0 of a new epoch, so whoever follows
    the feed and holds the owner's earlier state reloads it (see ``Change``)."""
    return Change(owner, 0, new_epoch())


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
    from .vector import VectorStore

    check.owner_id(owner)
    check.decider(by)
    if op_id is not None:
        check.op_id(op_id)
    snap = await structured.load(owner)
    audit = await structured._audit(owner, _ALL, None)
    counts = {"rules": len(snap.rules), "facts": len(snap.facts), "status": len(snap.status),
              "pending": len(snap.pending), "audit": len(audit)}
    erase_l2 = memories.forget if isinstance(memories, VectorStore) else memories
    counts["memories"] = await erase_l2(owner)
    return await structured.forget(owner, by=by, counts=counts, op_id=op_id)


#: "No limit" for counting an owner's audit entries.
_ALL = 2**31 - 1
