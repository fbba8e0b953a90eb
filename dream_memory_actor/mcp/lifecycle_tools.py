"""MCP tools for a memory that stays true over time: correct a rule or fact and read its
history; export an owner's data, forget an owner.

Like every tool they act only on owners the caller's token grants: a token can
correct, export or erase its own owners and nobody else's.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from .. import validation as check
from ..history import ItemHistory, StatusChange
from ..models import MemoryFact, MemoryRule, Tombstone
from .door import Door, ToolEntry


class Forgotten(BaseModel):
    tombstone: Tombstone = Field(description="What is left of the owner: who erased it, "
                                             "when, and how many items of each kind went")


class ExportDocument(BaseModel):
    lines: list[str] = Field(description="The export document, one JSON object per line "
                                         "(header first, end record last)")


class Superseded(BaseModel):
    item: MemoryRule | MemoryFact = Field(description="The rule or fact that replaces the "
                                                      "old one (now in its history)")


class StatusValues(BaseModel):
    changes: list[StatusChange] = Field(description="Oldest first; a null value: deleted")


async def supersede(door: Door, owner: str, item_id: str, content: str,
                    reason: str | None = None) -> Superseded:
    """Correct a rule or fact: the new text replaces the current item item_id, which is
    kept in its history with who (the caller) and why (reason). Use it when the user
    says something that was remembered no longer holds."""
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
    who = door.owner(owner)
    check.ids([item_id], "item id")
    return await door.backend.history(who, item_id)


async def status_history(door: Door, owner: str, key: str) -> StatusValues:
    """The last values of a status key, oldest first (a deletion included)."""
    who = door.owner(owner)
    return StatusValues(changes=await door.backend.status_history(who, check.status_key(key)))


async def forget_owner(door: Door, owner: str) -> Forgotten:
    """Erase everything of the owner: rules, facts, status, pending items, memories, chat
    windows and the audit trail. There is no undo. Leaves a tombstone that does not name
    the owner; the caller is recorded as who asked."""
    who = door.owner(owner)
    return Forgotten(tombstone=await door.backend.forget(who, door.by()))


async def export_owner(door: Door, owner: str) -> ExportDocument:
    """The owner's data as a versioned JSON Lines document (rules, facts, status, pending
    items, the audit trail, memories with their embeddings), which dream-memory import
    reads on any backend."""
    return ExportDocument(lines=await door.backend.export(door.owner(owner)))


LIFECYCLE_TOOLS: tuple[ToolEntry, ...] = (
    ToolEntry(supersede, "Correct a rule or fact", "destructive", False),
    ToolEntry(history, "Read a rule's or fact's history", "read", True),
    ToolEntry(status_history, "Read a status key's past values", "read", True),
    ToolEntry(export_owner, "Export an owner's data", "read", True),
    ToolEntry(forget_owner, "Erase an owner's data", "destructive", True),
)
