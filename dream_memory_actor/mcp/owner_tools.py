"""MCP tools on an owner's data as a whole: export it, forget it.

Both act only on owners the caller's token grants: a token can export or erase its
own owners and nobody else's.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from ..models import Tombstone
from .door import Door, ToolEntry


class Forgotten(BaseModel):
    tombstone: Tombstone = Field(description="What is left of the owner: who erased it, "
                                             "when, and how many items of each kind went")


class ExportDocument(BaseModel):
    lines: list[str] = Field(description="The export document, one JSON object per line "
                                         "(header first, end record last)")


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


OWNER_TOOLS: tuple[ToolEntry, ...] = (
    ToolEntry(export_owner, "Export an owner's data", "read", True),
    ToolEntry(forget_owner, "Erase an owner's data", "destructive", True),
)
