"""What one extraction writes, decided against one snapshot: pure logic, no I/O.

:class:`Plan` turns the gate's decisions into L1 operations (``AddRule``,
``AddFact``, ``SetStatus``, ``AddPending``), L2 stores, and one
:class:`ItemOutcome` per extracted item: what is already known or already
queued is not written again, and an item repeated in the same extraction is
counted once.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict

from ..models import MemoryPendingItem, MemorySnapshot
from ..storage.dedup import updated_item
from ..storage.ops import (
    SHOWN_CHARS,
    AddFact,
    AddPending,
    AddRule,
    L1Op,
    SetStatus,
    pending_fingerprint,
)
from ..text import content_hash
from .candidates import ExtractedItem
from .corrections import resolve

Result = Literal["written", "queued", "already_pending", "duplicate", "skipped"]
RESULTS: tuple[Result, ...] = ("written", "queued", "already_pending", "duplicate", "skipped")


class ItemOutcome(BaseModel):
    """What became of one extracted item."""

    model_config = ConfigDict(frozen=True)

    item: ExtractedItem
    result: Result
    reason: str
    #: The queued (or already queued) pending item.
    pending_id: str | None = None


class Plan:
    """The writes of one extraction, decided against one snapshot."""

    def __init__(self, snap: MemorySnapshot, source: str, expires_at: datetime | None) -> None:
        self.snap = snap
        self.source = source
        self.expires_at = expires_at
        self.rules = {content_hash(r.content) for r in snap.rules}
        self.facts = {content_hash(f.content) for f in snap.facts}
        self.queued = {pending_fingerprint(p): p.id for p in snap.pending}
        self.seen: set[str] = set()
        self.ops: list[L1Op] = []
        self.stores: list[ExtractedItem] = []
        self.outcomes: list[ItemOutcome] = []
        #: Outcome index -> fingerprint of the items this plan queues.
        self.mine: dict[int, str] = {}

    def _known(self, item: ExtractedItem, *, any_kind: bool) -> bool:
        """Already a rule or fact (of this kind only when ``any_kind`` is False)."""
        if item.kind == "status":
            return self.snap.status.get(item.key or "") == item.value
        if item.kind == "memory":
            return False  # L2 merges near-duplicates when it stores
        h = content_hash(item.text)
        mine = self.rules if item.kind == "rule" else self.facts
        return h in mine or (any_kind and h in (self.rules | self.facts))

    def add(self, item: ExtractedItem, outcome: str, reason: str) -> None:
        replaced = resolve(self.snap, item.kind, item.supersedes)
        if replaced is not None and content_hash(replaced.content) == content_hash(item.text):
            replaced = None  # "replacing" an item by its own text changes nothing
        why = None if replaced is None else f"would replace {item.kind} {replaced.id!r}"
        if replaced is None and item.kind in ("rule", "fact") and outcome != "skip":
            # Not said to replace anything, but a new version of a current item ("a Go
            # developer" beside "a Java developer"): a correction of it all the same.
            found = updated_item(self.snap.rules if item.kind == "rule" else self.snap.facts,
                                 item.text)
            if found is not None:
                replaced, change = found
                why = f"would replace {item.kind} {replaced.id!r}: {change}"
        pending = MemoryPendingItem(
            kind=item.kind, content=None if item.kind == "status" else item.text,
            key=item.key if item.kind == "status" else None,
            value=item.value if item.kind == "status" else None, confidence=item.confidence,
            source=self.source, expires_at=self.expires_at, evidence=item.evidence,
            supersedes=None if replaced is None else replaced.id,
            supersedes_content=None if replaced is None else replaced.content[:SHOWN_CHARS])
        fp = pending_fingerprint(pending)
        if replaced is not None:
            # A correction replaces what a person confirmed or said: whatever its
            # confidence, a person decides.
            self._queue(item, pending, fp, why or "")
            return
        if outcome == "skip":
            self._out(item, "skipped", reason)
        elif fp in self.seen:
            self._out(item, "duplicate", "repeated in this extraction")
        elif outcome == "write":
            self.seen.add(fp)
            if self._known(item, any_kind=False):
                self._out(item, "duplicate", "already known")
                return
            if item.kind == "rule":
                self.ops.append(AddRule(item.text, source=self.source))
            elif item.kind == "fact":
                self.ops.append(AddFact(item.text, source=self.source))
            elif item.kind == "status":
                self.ops.append(SetStatus(item.key or "", item.text))
            else:
                self.stores.append(item)
            # A pending twin stays queued: removing it could fail the whole apply if it
            # expired or a concurrent extraction removed it; confirming it later is a no-op.
            self._out(item, "written", reason)
        else:
            self.seen.add(fp)
            if self._known(item, any_kind=True):
                self._out(item, "duplicate", "already a rule, fact or status")
            else:
                self._queue(item, pending, fp, reason)

    def _queue(self, item: ExtractedItem, pending: MemoryPendingItem, fp: str, reason: str
               ) -> None:
        self.seen.add(fp)
        if fp in self.queued:
            self._out(item, "already_pending", reason, self.queued[fp])
        else:
            self.ops.append(AddPending(pending))
            self.queued[fp] = pending.id
            self.mine[len(self.outcomes)] = fp
            self._out(item, "queued", reason, pending.id)

    def settle(self, snap: MemorySnapshot) -> None:
        """Correct "queued" outcomes whose twin a concurrent extraction queued first."""
        ids = {pending_fingerprint(p): p.id for p in snap.pending}
        for i, fp in self.mine.items():
            theirs = ids.get(fp)
            if theirs is not None and theirs != self.outcomes[i].pending_id:
                self.outcomes[i] = self.outcomes[i].model_copy(
                    update={"result": "already_pending", "pending_id": theirs})

    def _out(self, item: ExtractedItem, result: Result, reason: str,
             pending_id: str | None = None) -> None:
        self.outcomes.append(ItemOutcome(item=item, result=result, reason=reason,
                                         pending_id=pending_id))
