"""MCP tools for a memory that stays true over time: correct a rule or fact and read its
history; export an owner's data, forget an owner.

Like every tool they act only on owners the caller's token grants: a token can
correct, export or erase its own owners and nobody else's.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from .. import validation as check
from ..engine import operations as ops
from ..history import ItemHistory, StatusChange
from ..models import (
    MemoryFact,
    MemoryRule,
    MemoryVersion,
    StoreResult,
    Tombstone,
    VectorMemory,
)
from .door import Door, ToolEntry


class Forgotten(BaseModel):
    tombstone: Tombstone = Field(description="What is left of the owner: who erased it, "
                                             "when, and how many items of each kind went")


class ExportDocument(BaseModel):
    lines: list[str] = Field(description="The export document, one JSON object per line "
                                         "(header first, end record last)")


class Superseded(BaseModel):
    item: MemoryRule | MemoryFact | VectorMemory = Field(
        description="The rule, fact or semantic memory that replaces the old one (now in "
                    "its history)")


class StatusValues(BaseModel):
    changes: list[StatusChange] = Field(description="Oldest first; a null value: deleted")


async def supersede(door: Door, owner: str, item_id: str, content: str,
                    reason: str | None = None) -> Superseded:
    """Correct a rule, a fact or a semantic memory: the new text replaces the current
    item item_id, which is kept in its history with who (the caller) and why (reason).
    Use it when the user says something that was remembered no longer holds."""
    who = door.owner(owner)
    check.ids([item_id], "item id")
    check.content(content, door.backend.settings.max_content_bytes)
    if reason is not None:
        check.content(reason, door.backend.settings.max_content_bytes, "reason")
    return Superseded(item=await door.backend.supersede(who, item_id, content, door.by(),
                                                        reason))


async def history(door: Door, owner: str, item_id: str) -> ItemHistory:
    """The versions of a rule or fact, oldest first, from any of its ids: what it said,
    until when, what replaced it, who and why."""
    return await door.backend.call(ops.history, door.owner(owner), item_id)


async def status_history(door: Door, owner: str, key: str) -> StatusValues:
    """The last values of a status key, oldest first (a deletion included)."""
    return StatusValues(changes=await door.backend.call(ops.status_history, door.owner(owner), key))


class MemoryIn(BaseModel):
    content: str
    metadata: dict[str, Any] | None = None
    context: str | None = None


class Stored(BaseModel):
    results: list[StoreResult] = Field(description="One per item, in order (merged: folded "
                                                   "into a near-duplicate)")


class MemoryVersions(BaseModel):
    versions: list[MemoryVersion] = Field(description="Oldest first, the current one last")


async def update_memory(door: Door, owner: str, memory_id: str, content: str,
                        metadata: dict[str, Any] | None = None, context: str | None = None
                        ) -> VectorMemory:
    """Change a semantic memory's text (and, when given, its metadata and context); the
    previous version stays in its history (memory_history)."""
    return await door.backend.call(ops.update, door.owner(owner), memory_id, content, metadata,
                                   context=context)


async def store_many(door: Door, owner: str, items: list[str | MemoryIn]) -> Stored:
    """Store several semantic memories at once, as store would each in turn (a
    near-duplicate, also within the batch, is merged), embedded in one call."""
    who = door.owner(owner)
    batch: list[str | dict[str, Any]] = [
        i if isinstance(i, str) else {"content": i.content, "metadata": i.metadata or {},
                                      **({} if i.context is None else {"context": i.context})}
        for i in items]
    return Stored(results=await door.backend.call(ops.store_many, who, batch))


async def memory_history(door: Door, owner: str, memory_id: str) -> MemoryVersions:
    """The versions of a semantic memory (updates and supersessions), oldest first."""
    return MemoryVersions(versions=await door.backend.call(ops.memory_history, door.owner(owner),
                                                           memory_id))


async def forget_owner(door: Door, owner: str) -> Forgotten:
    """Erase everything of the owner: rules, facts, status, pending items, memories, chat
    windows and the audit trail. There is no undo. Leaves a tombstone that does not name
    the owner; the caller is recorded as who asked."""
    return Forgotten(tombstone=await door.backend.call(ops.forget, door.owner(owner), by=door.by()))


async def export_owner(door: Door, owner: str) -> ExportDocument:
    """The owner's data as a versioned JSON Lines document (rules, facts, status, pending
    items, the audit trail, memories with their embeddings), which dream-memory import
    reads on any backend."""
    return ExportDocument(lines=await door.backend.call(ops.export, door.owner(owner)))


LIFECYCLE_TOOLS: tuple[ToolEntry, ...] = (
    ToolEntry(supersede, "Correct a rule, fact or memory", "destructive", False),
    ToolEntry(history, "Read a rule's or fact's history", "read", True),
    ToolEntry(status_history, "Read a status key's past values", "read", True),
    ToolEntry(update_memory, "Change a memory", "destructive", False),
    ToolEntry(store_many, "Store several memories", "write", False),
    ToolEntry(memory_history, "Read a memory's history", "read", True),
    ToolEntry(export_owner, "Export an owner's data", "read", True),
    ToolEntry(forget_owner, "Erase an owner's data", "destructive", True),
)
