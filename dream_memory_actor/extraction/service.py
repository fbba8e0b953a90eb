"""Extraction for one memory: run the extractor, gate, write, queue; confirm and reject.

``ExtractionService`` writes through a :class:`MemoryWriter` (a ``MemoryEngine``,
or an owner actor's single writer in the Ray runtime) and reads the chat
windows and the audit trail from the structured store::

    service = ExtractionService.for_engine(engine)          # rule-based without a model
    report = await service.extract("alice", [ChatMessage(role="user",
                                             content="From now on, reply in Chinese.")])
    report.counts["written"]                                 # 1
    await service.confirm("alice", pending_id, by="alice")   # a person's decision

Confirming and rejecting are one atomic ``decide`` (see ``storage.decisions``):
``RemovePending``, the write (``AddRule``/``AddFact``/``SetStatus``) and the audit
entry, under the operation id ``hitl:<pending id>``; ``apply`` cannot write audit
entries. Both are idempotent: a second call finds the item gone, reads its audit
entry and returns it (``applied=False``) without writing. Of two concurrent calls,
the removal of the item lets one apply; the other reads the winner.
A ``memory`` item is written to L2 after that apply, with its own operation id,
and a repeated confirm re-issues that store (a no-op once done), so a crash in
between is repaired by retrying.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel, ConfigDict, computed_field

from .. import validation as check
from ..errors import (
    ExtractionError,
    ItemNotFound,
    PendingItemDecided,
    PendingItemNotFound,
    ProposalChanged,
    ProposalNotApplied,
)
from ..metrics import get_metrics
from ..models import (
    PROPOSAL_KINDS,
    AuditAction,
    AuditEntry,
    ChatAppend,
    ChatMessage,
    MemoryPendingItem,
    MemorySnapshot,
    StoreResult,
    utcnow,
)
from ..storage.decisions import UNDO_OP
from ..storage.ops import AddPending, L1Op
from .candidates import ExtractionResult, Extractor, Usage, check_items
from .configured import open_extractor
from .gate import Thresholds, gate, is_quoted
from .plan import RESULTS, ItemOutcome, Plan, Result

__all__ = ["RESULTS", "ConsolidationReport", "ExtractionReport", "ExtractionService",
           "HitlDecision", "ItemOutcome", "MemoryWriter", "Result"]

if TYPE_CHECKING:
    from ..config import MemorySettings
    from ..storage.base import StructuredStore



class MemoryWriter(Protocol):
    """Where extracted memories are written: ``MemoryEngine`` has these methods."""

    async def snapshot(self, owner: str) -> MemorySnapshot: ...

    async def apply(self, owner: str, ops: Sequence[L1Op], *, op_id: str | None = None
                    ) -> MemorySnapshot: ...

    async def store(self, owner: str, content: str, *,
                    metadata: Mapping[str, Any] | None = None, op_id: str | None = None,
                    context: str | None = None) -> StoreResult: ...

    async def decide(self, owner: str, pending_id: str, action: AuditAction, by: str, *,
                     edited: str | None = None, op_id: str | None = None
                     ) -> tuple[MemorySnapshot, AuditEntry] | None: ...

    async def propose(self, owner: str) -> list[MemoryPendingItem]: ...

    async def apply_proposal(self, owner: str, item: MemoryPendingItem, *, by: str,
                             edited: str | None = None) -> str | None: ...

    async def unapply_proposal(self, owner: str, pending_id: str) -> int: ...

    async def undo_decision(self, owner: str, pending_id: str, by: str, *, restored: int,
                            expires_at: datetime | None = None, op_id: str | None = None
                            ) -> tuple[MemorySnapshot, AuditEntry] | None: ...


class Engine(MemoryWriter, Protocol):
    """A writer with its own stores and settings, as ``MemoryEngine`` is."""

    structured: StructuredStore
    settings: MemorySettings


class ExtractionReport(BaseModel):
    """One extraction for one owner: every item's outcome, counted, and its cost."""

    model_config = ConfigDict(frozen=True)

    owner: str
    extractor: str
    outcomes: tuple[ItemOutcome, ...] = ()
    usage: Usage = Usage()
    #: The snapshot version after the write (``None``: nothing was written to L1).
    version: int | None = None
    duration_s: float = 0.0

    @property
    def counts(self) -> dict[str, int]:
        seen = Counter(o.result for o in self.outcomes)
        return {r: seen[r] for r in RESULTS}


class HitlDecision(BaseModel):
    """A person's decision as recorded; ``applied`` is False when it had been made before."""

    model_config = ConfigDict(frozen=True)

    entry: AuditEntry
    applied: bool
    memory_id: str | None = None


class ConsolidationReport(BaseModel):
    """One consolidation pass over one owner: what it proposed (queued, or applied at
    once with ``apply_all``), counted by kind."""

    model_config = ConfigDict(frozen=True)

    owner: str
    proposals: tuple[MemoryPendingItem, ...] = ()
    #: Proposals applied by this pass (``apply_all``), and those refused as they were
    #: applied (their memories changed meanwhile).
    applied: int = 0
    refused: int = 0
    duration_s: float = 0.0

    @computed_field  # type: ignore[prop-decorator]
    @property
    def counts(self) -> dict[str, int]:
        """Proposals by kind: ``merge``, ``supersede`` and ``expire`` of memories,
        ``correction`` of rules and facts, and ``status_expiry`` of status values."""
        seen = Counter("status_expiry" if p.status_expiry else
                       "correction" if p.proposal is None else p.kind for p in self.proposals)
        return {k: seen[k] for k in (*PROPOSAL_KINDS, "correction", "status_expiry")}


class ExtractionService:
    """Extraction, the gate and the pending queue for every owner of one memory."""

    def __init__(self, writer: MemoryWriter, structured: StructuredStore, extractor: Extractor,
                 settings: MemorySettings) -> None:
        self.writer = writer
        self.structured = structured
        self.extractor = extractor
        self.settings = settings
        self.thresholds = Thresholds.from_settings(settings)
        self._stats: Counter[str] = Counter()
        self._cost_usd = 0.0

    @classmethod
    def for_engine(cls, engine: Engine, extractor: Extractor | None = None
                   ) -> ExtractionService:
        """A service writing through ``engine``; the configured extractor by default."""
        return cls(engine, engine.structured, extractor or open_extractor(engine.settings),
                   engine.settings)

    # -- extraction -------------------------------------------------------------------

    async def extract(self, owner: str, messages: Sequence[ChatMessage]) -> ExtractionReport:
        """Extract from ``messages`` and apply the result for ``owner`` (the caller's owner:
        nothing in the messages can change it). Nothing is written if the extractor fails."""
        check.owner_id(owner)
        msgs = check.messages(messages)
        if not msgs:
            return ExtractionReport(owner=owner, extractor=self.extractor.name)
        try:
            result = await self.extractor.extract(msgs)
        except ExtractionError as exc:
            self._stats[f"failed:{type(exc).__name__}"] += 1
            get_metrics().error(type(exc).__name__, "extract")
            raise
        return await self.apply_result(owner, msgs, result)

    async def apply_result(self, owner: str, messages: Sequence[ChatMessage],
                           result: ExtractionResult) -> ExtractionReport:
        """Gate ``result`` (extracted from ``messages``, e.g. by the pool) and write it."""
        t0 = time.perf_counter()
        check.owner_id(owner)
        items = check_items(result.items, self.settings.max_content_bytes)
        conversation = "\n".join(m.content for m in check.messages(messages))
        gated = gate(items, self.thresholds, conversation=conversation)
        snap = await self.writer.snapshot(owner)
        plan = Plan(snap, f"extracted:{result.source}", self._expiry())
        for d in gated.decisions:
            plan.add(d.item, d.outcome, d.reason)
        version = None
        if plan.ops:
            written = await self.writer.apply(owner, plan.ops)
            plan.settle(written)
            version = written.version
        for item in plan.stores:
            await self.writer.store(owner, item.text, metadata={
                "source": plan.source, "confidence": item.confidence, "evidence": item.evidence},
                context=context_of(messages, item.evidence, self.settings.extraction_context_turns,
                                   self.settings.extraction_context_date))
        report = ExtractionReport(owner=owner, extractor=result.extractor,
                                  outcomes=tuple(plan.outcomes), usage=result.usage,
                                  version=version,
                                  duration_s=result.total_s + time.perf_counter() - t0)
        self._count(report)
        return report

    def _expiry(self) -> datetime | None:
        ttl = self.settings.pending_ttl_s
        return None if ttl is None else utcnow() + timedelta(seconds=ttl)

    def _count(self, report: ExtractionReport) -> None:
        self._stats["extractions"] += 1
        self._stats.update(report.counts)
        self._stats["prompt_tokens"] += report.usage.prompt_tokens
        self._stats["completion_tokens"] += report.usage.completion_tokens
        if report.usage.cost_usd is not None:
            self._cost_usd += report.usage.cost_usd
        m = get_metrics()
        m.gate_outcomes(report.counts)
        m.extraction_usage(report.usage.prompt_tokens, report.usage.completion_tokens,
                           report.usage.cost_usd)

    def stats(self) -> dict[str, Any]:
        """Totals since this service started: outcomes, failures, tokens and cost."""
        out: dict[str, Any] = {r: 0 for r in RESULTS}
        out.update(self._stats)
        out["cost_usd"] = self._cost_usd
        return out

    # -- the pending queue: a person decides --------------------------------------------

    async def pending(self, owner: str) -> tuple[MemoryPendingItem, ...]:
        """The items waiting for ``owner``'s decision (expired ones are gone)."""
        return (await self.writer.snapshot(check.owner_id(owner))).pending

    async def confirm(self, owner: str, pending_id: str, *, by: str,
                      edited_content: str | None = None) -> HitlDecision:
        """Write the pending item (``edited_content`` replaces its content or status value)
        and remove it from the queue. Idempotent; ``PendingItemDecided`` if it was rejected."""
        return await self._decide(owner, pending_id, "confirmed", by, edited_content)

    async def reject(self, owner: str, pending_id: str, *, by: str) -> HitlDecision:
        """Drop the pending item. Idempotent; ``PendingItemDecided`` if it was confirmed."""
        return await self._decide(owner, pending_id, "rejected", by, None)

    async def audit(self, owner: str, *, limit: int = 100) -> list[AuditEntry]:
        """The decisions on ``owner``'s pending items, newest first."""
        return await self.structured.audit(owner, limit=limit)

    async def consolidate(self, owner: str, *, apply_all: bool = False,
                          by: str = "consolidation") -> ConsolidationReport:
        """Run a consolidation pass over ``owner`` (``engine.consolidation``): its
        proposals are queued for a person's decision, or, with ``apply_all`` (or the
        owner's ``consolidation_auto_apply``), confirmed by ``by`` one at a time, each
        its own write (a proposal whose memories changed meanwhile is refused and stays
        queued)."""
        start = time.perf_counter()
        owner = check.owner_id(owner)
        by = check.decider(by)
        found = await self.writer.propose(owner)
        if found:
            await self.writer.apply(owner, [AddPending(p) for p in found])
        applied = refused = 0
        if apply_all or self.settings.consolidation_auto_apply:
            for p in found:
                try:
                    await self.confirm(owner, p.id, by=by)
                    applied += 1
                except (ProposalChanged, PendingItemNotFound, ItemNotFound):
                    refused += 1  # changed since proposed (or decided meanwhile)
        get_metrics().consolidation(len(found), applied, refused)
        return ConsolidationReport(owner=owner, proposals=tuple(found), applied=applied,
                                   refused=refused, duration_s=time.perf_counter() - start)

    async def _decide(self, owner: str, pending_id: str, action: AuditAction, by: str,
                      edited: str | None) -> HitlDecision:
        # The arguments are checked where the decision is written (the store's decide).
        # A proposal is applied before it is confirmed (a refusal writes nothing) and
        # undone again should a rejection have come first, or after it was applied.
        proposal = None
        if action == "confirmed":
            snap = await self.writer.snapshot(owner)
            proposal = next((p for p in snap.pending if p.id == pending_id
                             and _of_memories(p)), None)
            if proposal is not None:
                await self.writer.apply_proposal(owner, proposal, by=check.decider(by),
                                                 edited=edited)
        try:
            done = await self.writer.decide(owner, pending_id, action, by, edited=edited,
                                            op_id=f"hitl:{pending_id}")
        except PendingItemNotFound:
            done = None  # another decision removed it meanwhile: report that one
        try:
            decision = await self._recorded(owner, pending_id, action)
        except PendingItemNotFound:  # decided the other way, or expired meanwhile
            if proposal is not None:
                await self._unapply(owner, pending_id)
            raise
        if action == "rejected" and _of_memories(decision.entry.item):
            await self._unapply(owner, pending_id)
        mine = self._counted(action, done is not None and decision.entry.id == done[1].id)
        return decision.model_copy(update={"applied": mine})

    def _counted(self, action: str, mine: bool) -> bool:
        """Count a decision this call recorded (``mine``), not one found recorded before."""
        self._stats[action] += int(mine)
        if mine:
            get_metrics().hitl_decision(action)
        return mine

    async def _unapply(self, owner: str, pending_id: str) -> None:
        """Undo proposal ``pending_id`` if a confirmation applied it (a rejected one)."""
        with contextlib.suppress(ProposalNotApplied):
            await self.writer.unapply_proposal(owner, pending_id)

    async def undo_proposal(self, owner: str, pending_id: str, *, by: str) -> HitlDecision:
        """Reverse the confirmed consolidation proposal ``pending_id`` exactly, record who
        undid it in the audit trail, and queue the proposal again (a new id: the entry's
        ``requeued``) for a person to confirm or reject once more.

        Undo puts things back as they were before the confirmation, and before it the
        proposal was waiting for a decision: so it waits again, rather than being made
        again by a later pass, which, for an owner whose passes confirm what they propose
        (``consolidation_auto_apply``), would apply it again behind the person's back.

        The memories are reversed first, as a confirmation applies them before its
        decision is recorded: a refusal (``ProposalChanged``: the memory it kept changed
        since) records nothing, and the undo is recorded with the queued item in one
        write under the operation id ``hitl-undo:<pending id>``, so a retry, or a call
        stopped between the two, records it once. A second call answers the recorded
        undo (``applied`` False). ``ProposalNotApplied`` if ``pending_id`` is not a
        confirmed proposal (rejected, never applied, unknown).

        A confirmed status expiry comes back in that one write: its value is set again,
        refused (``ProposalChanged``) if the key was set again since."""
        owner = check.owner_id(owner)
        by = check.decider(by)
        pending_id = check.ids([pending_id], "pending item id")[0]
        trail = await self.structured.audit(owner, limit=2, pending_id=pending_id)
        recorded = next((e for e in trail if e.action == "undone"), None)
        if recorded is not None:
            return HitlDecision(entry=recorded, applied=False)
        confirmed = next((e for e in trail
                          if e.action == "confirmed" and e.item.proposal is not None), None)
        if confirmed is None:
            raise ProposalNotApplied(f"owner {owner!r} has no applied proposal {pending_id!r}")
        # A status value comes back in the write that records the undo.
        restored = (1 if confirmed.item.status_expiry
                    else await self.writer.unapply_proposal(owner, pending_id))
        done = await self.writer.undo_decision(owner, pending_id, by, restored=restored,
                                               expires_at=self._expiry(),
                                               op_id=UNDO_OP + pending_id)
        found = await self.structured.audit(owner, limit=2, pending_id=pending_id)
        entry = next((e for e in found if e.action == "undone"), None)
        if entry is None:  # the owner was erased meanwhile
            raise ProposalNotApplied(f"owner {owner!r} has no applied proposal {pending_id!r}")
        mine = self._counted("undone", done is not None and entry.id == done[1].id)
        return HitlDecision(entry=entry, applied=mine)

    async def _recorded(self, owner: str, pending_id: str, action: AuditAction
                        ) -> HitlDecision:
        found = [e for e in await self.structured.audit(owner, limit=2, pending_id=pending_id)
                 if e.action != "undone"]
        if not found:
            raise PendingItemNotFound(
                f"owner {owner!r} has no pending item {pending_id!r} (expired, or never queued)")
        entry = found[0]
        if entry.action != action:
            raise PendingItemDecided(
                f"pending item {pending_id!r} of owner {owner!r} was already {entry.action} "
                f"by {entry.by!r} at {entry.at.isoformat()}")
        memory_id = None
        if entry.action == "confirmed" and _of_memories(entry.item):
            edited = None if entry.written == (entry.item.content or "") else entry.written
            # a no-op once applied: repairs a confirmation stopped before it was
            memory_id = await self.writer.apply_proposal(owner, entry.item, by=entry.by,
                                                         edited=edited)
        elif entry.action == "confirmed" and entry.item.kind == "memory":
            stored = await self.writer.store(  # a no-op returning the first result once done
                owner, entry.written or "", op_id=f"hitl-store:{pending_id}",
                metadata={"source": "confirmed", "confidence": entry.item.confidence,
                          "evidence": entry.item.evidence or ""})
            memory_id = stored.memory.id
        return HitlDecision(entry=entry, applied=False, memory_id=memory_id)

    # -- the L3 chat window ---------------------------------------------------------

    async def append_messages(self, owner: str, conversation: str,
                              messages: Sequence[ChatMessage], *, op_id: str | None = None
                              ) -> ChatAppend:
        """Append to the window (``settings.chat_window`` messages); returns the overflow,
        which the caller sends to extraction. ``op_id``: see ``StructuredStore``."""
        return await self.structured.append_messages(owner, conversation, messages,
                                                     window=self.settings.chat_window,
                                                     op_id=op_id)

    async def end_conversation(self, owner: str, conversation: str
                               ) -> tuple[ChatMessage, ...]:
        """Delete the conversation's window; returns it, for extraction."""
        return await self.structured.end_conversation(owner, conversation)

    async def observe(self, owner: str, conversation: str, messages: Sequence[ChatMessage]
                      ) -> tuple[ChatAppend, ExtractionReport | None]:
        """Append, then extract from what left the window (in this process)."""
        appended = await self.append_messages(owner, conversation, messages)
        report = await self.extract(owner, appended.overflow) if appended.overflow else None
        return appended, report

    async def finish(self, owner: str, conversation: str) -> ExtractionReport | None:
        """End the conversation and extract from its last window (in this process)."""
        window = await self.end_conversation(owner, conversation)
        return await self.extract(owner, window) if window else None


def _of_memories(item: MemoryPendingItem) -> bool:
    """Whether ``item`` is a proposal to change memories (applied in L2 before its decision
    is recorded); a status expiry is decided in L1 alone, as a correction is."""
    return item.proposal is not None and not item.status_expiry


#: The most characters of one earlier turn an extracted memory's context keeps.
CONTEXT_TURN_CHARS = 1000


def context_of(messages: Sequence[ChatMessage], evidence: str, turns: int = 1,
               date: bool = True) -> str | None:
    """The context a memory extracted from ``messages`` carries: the conversation's date
    (of the message its ``evidence`` quotes, else of the last) and the ``turns`` messages
    before that one, each as ``role: text`` (cut to ``CONTEXT_TURN_CHARS``); ``None``
    when that is nothing.

    >>> from datetime import datetime, timezone
    >>> at = datetime(2023, 5, 8, tzinfo=timezone.utc)
    >>> msgs = [ChatMessage(role="user", content="I got the job!", created_at=at),
    ...         ChatMessage(role="assistant", content="Congrats!", created_at=at)]
    >>> context_of(msgs, "Congrats")
    '8 May 2023\\nuser: I got the job!'
    """
    quoted = next((i for i, m in enumerate(messages) if is_quoted(evidence, m.content)),
                  None)
    at = messages[-1 if quoted is None else quoted].created_at if messages else None
    parts = [f"{at.day} {at:%B %Y}"] if date and at is not None else []
    if quoted is not None and turns:
        parts += [f"{m.role}: {m.content[:CONTEXT_TURN_CHARS]}"
                  for m in messages[max(0, quoted - turns):quoted]]
    return "\n".join(parts) or None
