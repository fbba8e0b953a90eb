"""What an update and a supersession do to a memory, decided once: pure functions.

An update keeps the memory's id and replaces its content (and, when given, its
metadata; the merge records stay), the previous version going to the memory's
history, closed at the time of the update. A supersession closes the memory and
writes its successor, a new memory, in one step; the closed memory's last version
names the successor. Histories live beside the live memories (their own table or
keys), so searches and lists read only current memories, as fast as before.

A filter keeps the memories whose metadata has each of its keys equal to its value
(JSON equality: ``1`` equals ``1.0``, ``true`` equals neither).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping
from contextlib import suppress
from datetime import datetime
from typing import Any, Literal

from ..errors import MemoryNotFound
from ..models import MemoryVersion, VectorMemory
from ..validation import RESERVED_METADATA_KEYS

#: The most memories one history walks (a chain of supersessions); longer chains are cut.
MAX_CHAIN = 1000


def updated(
    existing: VectorMemory,
    content: str,
    metadata: dict[str, Any] | None,
    has_embedding: bool,
    now: datetime,
    context: str | None = None,
) -> VectorMemory:
    """``existing`` after an update: ``metadata`` (when given) replaces its own keys,
    the merge records stay; ``context`` (when given) replaces its context; ``updated_at``
    moves to ``now`` (never backwards)."""
    meta = (
        dict(existing.metadata)
        if metadata is None
        else {
            **{k: v for k, v in existing.metadata.items() if k in RESERVED_METADATA_KEYS},
            **metadata,
        }
    )
    return existing.model_copy(
        update={
            "content": content,
            "metadata": meta,
            "context": existing.context if context is None else context,
            "has_embedding": has_embedding,
            "updated_at": max(existing.updated_at, now),
        }
    )


def successor(
    existing: VectorMemory,
    content: str,
    metadata: dict[str, Any] | None,
    has_embedding: bool,
    now: datetime,
    context: str | None = None,
) -> VectorMemory:
    """The memory that supersedes ``existing``: a new id, ``metadata`` or else the
    metadata of ``existing`` without its merge records, and ``context``."""
    meta = (
        {k: v for k, v in existing.metadata.items() if k not in RESERVED_METADATA_KEYS}
        if metadata is None
        else dict(metadata)
    )
    return VectorMemory(
        owner=existing.owner,
        content=content,
        metadata=meta,
        context=context,
        created_at=now,
        updated_at=now,
        has_embedding=has_embedding,
    )


def closed(
    existing: VectorMemory,
    now: datetime,
    change: Literal["update", "supersede", "merge", "expire"],
    *,
    superseded_by: str | None = None,
    by: str | None = None,
    reason: str | None = None,
) -> MemoryVersion:
    """The version ``existing`` was until ``now``, for the history."""
    return MemoryVersion(
        memory_id=existing.id,
        owner=existing.owner,
        content=existing.content,
        metadata=existing.metadata,
        context=existing.context,
        has_embedding=existing.has_embedding,
        valid_from=existing.updated_at,
        valid_to=max(now, existing.updated_at),
        change=change,
        superseded_by=superseded_by,
        by=by,
        reason=reason,
    )


def current(memory: VectorMemory) -> MemoryVersion:
    """The live version of ``memory`` (``valid_to`` ``None``). Its id is made from the
    memory's id and the time it last changed, so a history reads the same twice and a
    version, once closed, is another."""
    return MemoryVersion(
        id=str(uuid.uuid5(uuid.NAMESPACE_URL, f"{memory.id}@{memory.updated_at.isoformat()}")),
        memory_id=memory.id,
        owner=memory.owner,
        content=memory.content,
        metadata=memory.metadata,
        context=memory.context,
        has_embedding=memory.has_embedding,
        valid_from=memory.updated_at,
    )


def superseded_by(versions: list[MemoryVersion], memory_id: str) -> str | None:
    """The successor of ``memory_id`` if ``versions`` (its history) say it was superseded
    by it or merged into it."""
    return next(
        (v.superseded_by for v in versions if v.memory_id == memory_id
         and v.change in ("supersede", "merge") and v.superseded_by is not None),
        None,
    )


async def chain(
    memory_id: str,
    history: Callable[[str], Awaitable[list[MemoryVersion]]],
    get: Callable[[str], Awaitable[VectorMemory]],
) -> list[MemoryVersion]:
    """Every version of the chain of supersessions ``memory_id`` belongs to, oldest
    first, the current one last (when the chain ends in a live memory).

    ``history(x)`` gives the closed versions of ``x`` and the version that names ``x`` as
    its successor; ``get(x)`` the live memory ``x`` or ``MemoryNotFound``.
    """
    seen: set[str] = set()
    todo = [memory_id]
    found: dict[str, MemoryVersion] = {}
    live: list[MemoryVersion] = []
    while todo and len(seen) < MAX_CHAIN:
        x = todo.pop()
        if x in seen:
            continue
        seen.add(x)
        for v in await history(x):
            found[v.id] = v
            todo.extend(i for i in (v.memory_id, v.superseded_by) if i and i not in seen)
        if superseded_by(list(found.values()), x) is None:
            with suppress(MemoryNotFound):
                live.append(current(await get(x)))
    if not found and not live:
        raise MemoryNotFound(f"no memory {memory_id!r} and no history of it")
    closed_versions = sorted(
        found.values(), key=lambda v: (v.valid_to or v.valid_from, v.valid_from)
    )
    return closed_versions + live


def matches(metadata: Mapping[str, Any], where: Mapping[str, Any] | None) -> bool:
    """Whether ``metadata`` has every key of ``where`` with an equal value (JSON
    equality, as PostgreSQL's ``jsonb @>`` decides for scalars)."""
    if not where:
        return True
    for key, want in where.items():
        if key not in metadata:
            return False
        if not _json_equal(metadata[key], want):
            return False
    return True


def _json_equal(have: Any, want: Any) -> bool:
    if isinstance(want, bool) or isinstance(have, bool):
        return isinstance(want, bool) and isinstance(have, bool) and have == want
    if want is None or have is None:
        return want is None and have is None
    if isinstance(want, (int, float)):  # Python compares int and float exactly, as jsonb
        return isinstance(have, (int, float)) and have == want
    return isinstance(have, str) and isinstance(want, str) and have == want
