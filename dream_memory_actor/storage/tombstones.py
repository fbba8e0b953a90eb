"""The tombstone a forgotten owner leaves: what every backend shares.

``StructuredStore.forget`` removes every record of an owner from its storage and
leaves a :class:`~dream_memory_actor.models.Tombstone`; ``VectorStore.forget``
removes the owner's L2 layer; ``engine.erasure.forget_owner`` does both. The
tombstone keeps no owner id: a retry of the same erasure is recognised by
:func:`op_key`, a digest of the owner and the operation id, from which neither can
be read back.
"""

from __future__ import annotations

import hashlib

from ..models import new_epoch
from .changes import Change

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
