"""The MCP tools: one function and one table entry each.

A tool is an async function whose first parameter is the :class:`Door` (the
memory backend and the caller's grant) and whose other parameters are what the
client sends; its return type is a pydantic model, which becomes the tool's
output schema. :data:`TOOLS` lists them with their titles and hints; the server
registers every entry (``server.build_server``), describes the parameters from
``params.PARAMS`` and counts each call. Adding an operation means adding a
function and a :class:`ToolEntry`, nothing else.

Every owner argument is checked and then authorized against the caller's grant
before the backend is called; every other argument is checked by the library's
own rules (``validation``), so a bad one is a typed error and writes nothing.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from .. import validation as check
from ..engine import operations as ops
from ..errors import InvalidQuery
from ..extraction.service import ExtractionReport, HitlDecision
from ..models import (
    AuditEntry,
    ChatAppend,
    ChatMessage,
    MemoryFact,
    MemoryPendingItem,
    MemoryRule,
    MemorySnapshot,
    SearchHit,
    StoreResult,
    VectorMemory,
)
from ..storage.ops import (
    AddFact,
    AddRule,
    DeleteStatus,
    RemoveFact,
    RemoveRule,
    SetStatus,
    added,
)
from ..validation.l2 import metadata_filter
from .door import Door, Effect, ToolEntry
from .lifecycle_tools import LIFECYCLE_TOOLS
from .params import PARAMS, Param

# -- outputs ---------------------------------------------------------------------------


class SnapshotView(MemorySnapshot):
    """The owner's structured memory and the text for a system prompt."""

    prompt: str = Field(description="The rules, facts and status as a system-prompt block")


class SearchResults(BaseModel):
    hits: list[SearchHit] = Field(description="Best first")


class PendingView(MemoryPendingItem):
    description: str = Field(description="One line for the person deciding")


class PendingList(BaseModel):
    pending: list[PendingView]


class RuleAdded(BaseModel):
    rule: MemoryRule | None = Field(description="The rule (an existing one with the same "
                                                "text is kept rather than added twice); "
                                                "null when it was queued as a correction")
    pending: MemoryPendingItem | None = Field(
        None, description="A new version of a current rule is not added beside it: this "
                          "pending correction, naming the rule it would replace, waits "
                          "for a person's decision")
    version: int = Field(description="The snapshot version after the write")


class FactAdded(BaseModel):
    fact: MemoryFact | None = Field(description="The fact (an existing one with the same "
                                                "text is kept rather than added twice); "
                                                "null when it was queued as a correction")
    pending: MemoryPendingItem | None = Field(
        None, description="A new version of a current fact is not added beside it: this "
                          "pending correction, naming the fact it would replace, waits "
                          "for a person's decision")
    version: int = Field(description="The snapshot version after the write")


class Written(BaseModel):
    """An L1 write: the snapshot version after it and the owner's status now."""

    version: int
    status: dict[str, str]


class Deleted(BaseModel):
    deleted: bool = Field(description="False if there was no such memory")


class MemoryList(BaseModel):
    memories: list[VectorMemory] = Field(description="Newest first")


class MessageIn(BaseModel):
    role: Literal["user", "assistant", "system", "tool"]
    content: str


class ConversationEnded(BaseModel):
    report: ExtractionReport | None = Field(
        description="What extraction did with the last window (none if it was empty)")


class AuditTrail(BaseModel):
    entries: list[AuditEntry] = Field(description="Newest first")


class Consolidated(BaseModel):
    """One consolidation pass over the owner's semantic memories."""

    proposals: list[PendingView] = Field(
        description="What the pass proposed, each a pending item whose proposal names the "
                    "memories it changes (as they were) and the one it keeps; they wait in "
                    "list_pending (with apply_all they were confirmed at once)")
    counts: dict[str, int] = Field(description="The proposals by kind: merge, supersede, "
                                               "expire (of memories), correction (of rules "
                                               "and facts), status_expiry")
    applied: int = Field(description="Proposals this call confirmed (apply_all)")
    refused: int = Field(description="With apply_all, proposals refused because their "
                                     "memories changed meanwhile; they stay queued")


def _written(snap: MemorySnapshot) -> Written:
    return Written(version=snap.version, status=dict(snap.status))


def _view(item: MemoryPendingItem) -> PendingView:
    return PendingView(**dict(item), description=item.describe())


# -- reads -----------------------------------------------------------------------------


async def read_snapshot(door: Door, owner: str) -> SnapshotView:
    """The owner's rules, facts, status and pending items, and the prompt text an agent
    puts in its system prompt. Read it at the start of a conversation."""
    snap = await door.backend.snapshot(door.owner(owner))
    return SnapshotView(**dict(snap), prompt=snap.to_prompt())


async def search(door: Door, query: str, owner: str | None = None,
                 owners: list[str] | None = None, limit: int = 10,
                 filter: dict[str, Any] | None = None) -> SearchResults:
    """Search the semantic memories of one owner (owner) or several (owners) by meaning
    and by words, best first. Each hit carries its score and the signals behind it."""
    if (owner is None) == (owners is None):
        raise InvalidQuery("give exactly one of owner or owners")
    who = check.owner_ids(owner if owner is not None else owners)
    check.limit(limit)
    door.grant().check(who)
    where = metadata_filter(filter)
    return SearchResults(hits=await door.backend.search(who, query, limit, where))


async def list_memories(door: Door, owner: str, limit: int = 100, offset: int = 0,
                        filter: dict[str, Any] | None = None) -> MemoryList:
    """The owner's semantic memories, newest first, a page at a time."""
    return MemoryList(memories=await door.backend.call(ops.list_memories, door.owner(owner), limit,
                                                       offset, filter=filter))


async def list_pending(door: Door, owner: str) -> PendingList:
    """Items waiting for a person to confirm or reject them: extracted memories, and the
    proposals of a consolidation pass (kind merge, supersede or expire), whose proposal
    names the memories they would change."""
    items = await door.backend.pending(door.owner(owner))
    return PendingList(pending=[_view(p) for p in items])


async def audit(door: Door, owner: str, limit: int = 100) -> AuditTrail:
    """Who confirmed or rejected which pending item, and when, and who undid which
    confirmed proposal (action undone), newest first."""
    return AuditTrail(entries=await door.backend.call(ops.audit, door.owner(owner), limit))


# -- writes ----------------------------------------------------------------------------


async def store(door: Door, owner: str, content: str, metadata: dict[str, Any] | None = None,
                context: str | None = None) -> StoreResult:
    """Remember something from the conversation as a semantic memory, with the context
    that will help find it (the turn it answers, the date). It is judged against the
    owner's nearest memories: a duplicate is merged into one (merged is true), a new
    value of one supersedes it (superseded is true, the old one stays in its history),
    anything else is stored beside them; judgement, related and reason say which and
    why."""
    return await door.backend.call(ops.store, door.owner(owner), content, metadata, context=context)


async def add_rule(door: Door, owner: str, content: str, source: str = "user") -> RuleAdded:
    """Record how the agents should behave from now on for this owner ("in code review,
    look at security first"). Every agent of the owner sees it in read_snapshot. A new
    version of a current rule ("answer in Chinese" when a rule says English) is queued
    as a correction of that rule for a person to confirm (pending is set)."""
    rule, pending, version = await _add(
        door, owner, AddRule(content, source, review_updates=True))
    return RuleAdded(rule=rule, pending=pending, version=version)


async def add_fact(door: Door, owner: str, content: str, source: str = "user") -> FactAdded:
    """Record a lasting fact about the owner or their environment ("the user is a Java
    developer"). A new version of a current fact ("a Go developer") is queued as a
    correction of it for a person to confirm (pending is set)."""
    fact, pending, version = await _add(
        door, owner, AddFact(content, source, review_updates=True))
    return FactAdded(fact=fact, pending=pending, version=version)


async def _add(door: Door, owner: str, op: AddRule | AddFact
               ) -> tuple[Any, MemoryPendingItem | None, int]:
    """Apply ``op``: the item it left, or the correction it was queued as, and the version."""
    snap = await door.apply(door.owner(owner), [op])
    found = added(snap, op)
    if isinstance(found, MemoryPendingItem):
        return None, found, snap.version
    return found, None, snap.version


async def remove_rule(door: Door, owner: str, rule_id: str) -> Written:
    """Remove a rule that no longer holds."""
    return _written(await door.apply(door.owner(owner), [RemoveRule(rule_id)]))


async def remove_fact(door: Door, owner: str, fact_id: str) -> Written:
    """Remove a fact that no longer holds."""
    return _written(await door.apply(door.owner(owner), [RemoveFact(fact_id)]))


async def set_status(door: Door, owner: str, key: str, value: str,
                     ttl_s: float | None = None) -> Written:
    """Set a current-status entry (current_project=dream-saas), optionally for a while
    only (ttl_s)."""
    return _written(await door.apply(door.owner(owner), [SetStatus(key, value, ttl_s)]))


async def delete_status(door: Door, owner: str, key: str) -> Written:
    """Delete a status entry; an unknown key is an error (UnknownStatusKey)."""
    return _written(await door.apply(door.owner(owner), [DeleteStatus(key)]))


async def delete_memory(door: Door, owner: str, memory_id: str) -> Deleted:
    """Delete one semantic memory."""
    return Deleted(deleted=await door.backend.call(ops.delete, door.owner(owner), memory_id))


async def confirm_pending(door: Door, owner: str, pending_id: str,
                          edited_content: str | None = None) -> HitlDecision:
    """Write a pending item (edited_content replaces its text) and remove it from the
    queue, recording who decided. A consolidation proposal is applied (edited_content
    replaces the text of the memory it keeps; an expiry has none), refused with
    ProposalChanged and nothing written if its memories changed since. Calling it
    again changes nothing; an error if the item was rejected."""
    return await door.backend.call(ops.confirm, door.owner(owner), pending_id, door.by(),
                                   edited_content)


async def reject_pending(door: Door, owner: str, pending_id: str) -> HitlDecision:
    """Drop a pending item, recording who decided. Calling it again changes nothing;
    an error if the item was confirmed."""
    return await door.backend.call(ops.reject, door.owner(owner), pending_id, door.by())


async def append_messages(door: Door, owner: str, conversation: str,
                          messages: list[MessageIn]) -> ChatAppend:
    """Add the new messages of a conversation to its chat window. What falls out of the
    window is extracted into memories: rules and facts the user stated, through the
    confidence gate (sure ones are written, less sure ones wait in list_pending)."""
    return await door.backend.call(
        ops.append_messages, door.owner(owner), conversation,
        [ChatMessage(role=m.role, content=m.content) for m in messages])


async def end_conversation(door: Door, owner: str, conversation: str) -> ConversationEnded:
    """End a conversation: its chat window is extracted into memories (through the same
    gate) and deleted. Returns what extraction did."""
    return ConversationEnded(report=await door.backend.call(ops.end_conversation, door.owner(owner),
                                                            conversation))


async def consolidate(door: Door, owner: str, apply_all: bool = False) -> Consolidated:
    """Tidy the owner's semantic memories: propose merging duplicates into one, superseding
    outdated ones by their newer version and (when the server is configured to) letting
    old ones, and old status values without a TTL, expire. Nothing changes until a
    person confirms a proposal with confirm_pending (edited_content rewrites a merge's
    result) or drops it with reject_pending; a confirmed one can be reversed with
    undo_proposal. A proposal rejected before is not made again. With apply_all the
    caller confirms each at once (for an owner who asked for that)."""
    report = await door.backend.call(ops.consolidate, door.owner(owner), apply_all=apply_all,
                                     by=door.by())
    return Consolidated(proposals=[_view(p) for p in report.proposals], counts=report.counts,
                        applied=report.applied, refused=report.refused)


async def undo_proposal(door: Door, owner: str, pending_id: str) -> HitlDecision:
    """Reverse a confirmed consolidation proposal exactly: the memories it closed live
    again as they were and the memory it kept has its text back, their histories as
    before. The undo is recorded in the audit trail (entry: who, when, restored: how many
    memories came back) and the proposal waits in list_pending again under a new id
    (entry.requeued), to be confirmed or rejected once more. Calling it again changes
    nothing. ProposalNotApplied if no such proposal was confirmed; ProposalChanged, with
    nothing written, if the kept memory changed since. An expired status value is set
    again (ProposalChanged if the key was set since)."""
    return await door.backend.call(ops.undo_proposal, door.owner(owner), pending_id, door.by())


_UNDO_PARAMS = {"pending_id": Param("The id of the confirmed proposal (its pending item id, "
                                    "as consolidate, list_pending or audit showed it).",
                                    PARAMS["pending_id"].bounds)}

# -- the table -------------------------------------------------------------------------

_CORE: tuple[ToolEntry, ...] = (
    ToolEntry(read_snapshot, "Read an owner's memory", "read", True),
    ToolEntry(search, "Search memories", "read", True),
    ToolEntry(list_memories, "List semantic memories", "read", True),
    ToolEntry(list_pending, "List pending items", "read", True),
    ToolEntry(audit, "Read the decisions on pending items", "read", True),
    ToolEntry(store, "Store a memory", "write", False),
    ToolEntry(add_rule, "Add a rule", "write", True),
    ToolEntry(add_fact, "Add a fact", "write", True),
    ToolEntry(set_status, "Set a status entry", "write", True),
    ToolEntry(delete_status, "Delete a status entry", "destructive", True),
    ToolEntry(remove_rule, "Remove a rule", "destructive", True),
    ToolEntry(remove_fact, "Remove a fact", "destructive", True),
    ToolEntry(delete_memory, "Delete a memory", "destructive", True),
    ToolEntry(confirm_pending, "Confirm a pending item", "write", True),
    ToolEntry(reject_pending, "Reject a pending item", "destructive", True),
    ToolEntry(consolidate, "Propose tidying an owner's memories", "write", True),
    ToolEntry(undo_proposal, "Undo a confirmed consolidation proposal", "destructive", True,
              _UNDO_PARAMS),
    ToolEntry(append_messages, "Add messages to a conversation", "write", False),
    ToolEntry(end_conversation, "End a conversation and extract from it", "destructive", True),
)

#: Every tool the server registers, in the order clients list them.
TOOLS: tuple[ToolEntry, ...] = _CORE + LIFECYCLE_TOOLS

__all__ = ["TOOLS", "Door", "Effect", "ToolEntry"]
