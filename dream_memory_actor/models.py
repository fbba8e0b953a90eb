"""The data the memory hands out: immutable pydantic models.

``MemorySnapshot`` is what an agent injects into its system prompt; ``SearchHit``
carries the three signal scores so a user can see why a memory ranked.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Mapping
from datetime import datetime, timezone
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, GetCoreSchemaHandler
from pydantic_core import core_schema

#: What an extraction may queue: where the item goes when confirmed.
ExtractedKind = Literal["rule", "fact", "status", "memory"]
#: What a consolidation pass queues: a change of memories (``Proposal``).
ProposalKind = Literal["merge", "supersede", "expire"]
PendingKind = Literal[ExtractedKind, ProposalKind]
PROPOSAL_KINDS: tuple[ProposalKind, ...] = ("merge", "supersede", "expire")
ChatRole = Literal["user", "assistant", "system", "tool"]
#: A person's decision on a pending item, or the undo of a confirmed proposal.
AuditAction = Literal["confirmed", "rejected", "undone"]


def utcnow() -> datetime:
    """The current time, timezone-aware UTC (every timestamp here is)."""
    return datetime.now(timezone.utc)


def new_id() -> str:
    """A new random id (UUID4, hex with dashes)."""
    return str(uuid.uuid4())


def new_epoch() -> str:
    """A new snapshot epoch: the time in hex nanoseconds (so later epochs sort after
    earlier ones) and a random suffix (so two made at once differ)."""
    return f"{time.time_ns():016x}-{uuid.uuid4().hex[:8]}"


class FrozenMap(Mapping[str, str]):
    """An immutable, hashable, picklable ``str -> str`` mapping."""

    __slots__ = ("_data", "_hash")

    def __init__(self, data: Mapping[str, str] | None = None) -> None:
        self._data: dict[str, str] = dict(sorted((data or {}).items()))
        self._hash: int | None = None

    def __getitem__(self, key: str) -> str:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(tuple(self._data.items()))
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping):
            return dict(self._data) == dict(other)
        return NotImplemented

    def __repr__(self) -> str:
        return f"FrozenMap({self._data!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (FrozenMap, (self._data,))

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_after_validator_function(
            lambda v: v if isinstance(v, FrozenMap) else FrozenMap(v),
            core_schema.dict_schema(core_schema.str_schema(), core_schema.str_schema()),
            serialization=core_schema.plain_serializer_function_ser_schema(dict),
        )


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class MemoryRule(_Frozen):
    """A behaviour rule the user asked for ("in code review look at security first")."""

    id: str = Field(default_factory=new_id)
    content: str
    source: str = "user"
    created_at: datetime = Field(default_factory=utcnow)


class MemoryFact(_Frozen):
    """An objective fact about the user or environment ("the user is a Java developer")."""

    id: str = Field(default_factory=new_id)
    content: str
    source: str = "user"
    created_at: datetime = Field(default_factory=utcnow)


class Touched(_Frozen):
    """A memory a proposal changes, as it was when the proposal was made: a proposal
    whose memories changed since is refused when it is decided."""

    id: str
    content: str
    updated_at: datetime


class Proposal(_Frozen):
    """What a consolidation pass proposes to change in the owner's memories.

    ``merge``: the memories ``touches`` say one thing; ``keep`` (the newest) stays with
    ``result`` as its content, the others are closed into it. ``supersede``: ``keep``
    is a newer version of the others, which are closed in its favour. ``expire``: the
    memories are closed, unused for ``reason``'s time. Every closed memory stays in
    its history, naming the proposal, and the change can be undone.

    The expiry of a status value (``MemoryPendingItem.status_expiry``) touches one
    item that is no memory: the status key (``id``), its value (``content``) and when
    it last changed (``updated_at``); confirming it deletes the key.
    """

    touches: tuple[Touched, ...]
    keep: str | None = None
    result: str | None = None
    reason: str = ""


class MemoryPendingItem(_Frozen):
    """An item waiting for a person to confirm or reject it (HITL).

    ``kind`` says where it goes when confirmed: a rule, a fact, a status entry
    (``key``/``value``) or a semantic ``memory``; or, for a consolidation pass's
    ``merge``, ``supersede`` and ``expire``, the change of memories its ``proposal``
    describes (``content`` is then the text the change leaves, if any). An ``expire``
    with a ``key`` and ``value`` lets that status value expire instead
    (:attr:`status_expiry`).
    """

    id: str = Field(default_factory=new_id)
    kind: PendingKind
    content: str | None = None
    key: str | None = None
    value: str | None = None
    confidence: float = Field(ge=0.0, le=1.0)
    source: str = "extractor"
    created_at: datetime = Field(default_factory=utcnow)
    expires_at: datetime | None = None
    #: The words of the conversation the item was extracted from, for the person deciding.
    evidence: str | None = None
    #: The id of the current rule or fact this item would replace when confirmed (a
    #: correction), and that item's text when it was queued.
    supersedes: str | None = None
    supersedes_content: str | None = None
    #: The change of memories a consolidation pass proposes (its three kinds only).
    proposal: Proposal | None = None

    @property
    def status_expiry(self) -> bool:
        """Whether this is a consolidation pass's proposal to let the status value
        ``key`` = ``value`` expire (an L1 change, decided as a correction is) rather
        than a change of memories."""
        return self.kind == "expire" and self.key is not None

    def describe(self) -> str:
        """One line for a person deciding on the item."""
        if self.status_expiry and self.proposal is not None:
            return f"[expire] status {self.key}={self.value}: {self.proposal.reason}"
        if self.proposal is not None:
            n = len(self.proposal.touches)
            return (f"[{self.kind}] {n} {'memory' if n == 1 else 'memories'}: "
                    f"{self.proposal.reason}"
                    + ("" if self.content is None else f" -> {self.content}"))
        what = f"{self.key}={self.value}" if self.kind == "status" else (self.content or "")
        line = f"[{self.kind}] {what} (confidence {self.confidence:.2f})"
        if self.supersedes is not None:
            line += f" replacing {self.supersedes_content or self.supersedes!r}"
        return line


class MemorySnapshot(_Frozen):
    """Everything structured the memory knows about one owner, at one version.

    Immutable: a write produces a new snapshot with ``version`` + 1.

    >>> snap = MemorySnapshot(owner="alice")
    >>> snap.to_prompt()
    'User info:\\n- rules: (none)\\n- facts: (none)\\n- current status: (none)'
    """

    owner: str
    rules: tuple[MemoryRule, ...] = ()
    facts: tuple[MemoryFact, ...] = ()
    status: FrozenMap = Field(default_factory=FrozenMap)
    status_expires_at: Mapping[str, datetime] = Field(default_factory=dict, repr=False)
    pending: tuple[MemoryPendingItem, ...] = ()
    version: int = 0
    #: Names the backend's incarnation of this owner's state: made when the state is first
    #: written, so a backend that lost it (Redis restarted empty) counts versions again
    #: under a new epoch. A version means something only with its epoch: caches compare
    #: both (``reached``). Empty for an owner nothing was written for yet, and on
    #: PostgreSQL, whose state is durable (its versions never restart).
    epoch: str = ""
    updated_at: datetime | None = None

    def reached(self, version: int, epoch: str | None = None) -> bool:
        """Whether this snapshot is at least ``version`` of ``epoch`` (``None``: this
        snapshot's epoch). Epochs are ordered by when they were made: a snapshot of a
        later epoch is newer than any version of an earlier one, whose state the
        backend lost."""
        if epoch is None or epoch == self.epoch:
            return self.version >= version
        return self.epoch > epoch

    def live(self, now: datetime | None = None) -> MemorySnapshot:
        """This snapshot without status entries and pending items that expired by ``now``."""
        now = now or utcnow()
        dead = {k for k, t in self.status_expires_at.items() if t <= now}
        stale = [p for p in self.pending if p.expires_at is not None and p.expires_at <= now]
        if not dead and not stale:
            return self
        return self.model_copy(
            update={
                "status": FrozenMap({k: v for k, v in self.status.items() if k not in dead}),
                "status_expires_at": {
                    k: t for k, t in self.status_expires_at.items() if k not in dead
                },
                "pending": tuple(p for p in self.pending if p not in stale),
            }
        )

    def rules_block(self) -> str:
        return "; ".join(r.content for r in self.rules) or "(none)"

    def facts_block(self) -> str:
        return "; ".join(f.content for f in self.facts) or "(none)"

    def status_block(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.status.items()) or "(none)"

    def to_prompt(self, header: str = "User info:") -> str:
        """The rules/facts/status block for a system prompt."""
        return (
            f"{header}\n- rules: {self.rules_block()}\n- facts: {self.facts_block()}\n"
            f"- current status: {self.status_block()}"
        )


class VectorMemory(_Frozen):
    """One semantic (L2) memory. ``metadata`` records merges (``merged_from``, ``merged_at``).

    ``context`` is what helps find the memory without being part of what it says: the
    turn before it, the conversation's date, who spoke; a line each. It is searched with
    the content (``text.with_context``), its vector is made of the content's and its
    lines' (``embedding.memory_vector``), it is kept with the memory and its versions,
    and never returned as the content.
    """

    id: str = Field(default_factory=new_id)
    owner: str
    content: str
    metadata: dict[str, Any] = Field(default_factory=dict)
    context: str | None = None
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)
    has_embedding: bool = False


class StoreResult(_Frozen):
    """What ``store`` did, and why.

    ``memory`` is the memory now current: the new one, or the one it was merged into.
    ``judgement`` is what the new text was to the nearest stored memory ``related``
    (``storage.dedup.judge``): a ``duplicate`` was merged into it (``merged``), an
    ``update`` superseded it (``superseded``; both stay in ``memory_history``), and a
    ``distinct`` or ``unsure`` one was stored beside it. ``None``: no memory was near
    enough to judge. ``reason`` says what decided; ``similarity`` is the raw cosine.
    """

    memory: VectorMemory
    merged: bool
    similarity: float | None = None
    superseded: bool = False
    judgement: Literal["duplicate", "update", "distinct", "unsure"] | None = None
    related: str | None = None
    reason: str | None = None


class MemoryVersion(_Frozen):
    """One version of a semantic memory in its history, from ``valid_from`` to ``valid_to``.

    ``valid_to`` is ``None`` for the current version. A version closed by ``update``
    has ``change == "update"``; one a store merged a duplicate into has
    ``change == "merge"`` (the content before the merge); the last version of a
    superseded memory has ``change == "supersede"`` and names its successor in
    ``superseded_by``, with who did it (``by``) and why (``reason``) when given; that of
    a memory a person let expire (a consolidation proposal) has ``change == "expire"``.
    """

    id: str = Field(default_factory=new_id)
    memory_id: str
    owner: str
    content: str
    metadata: dict[str, Any] = Field(default_factory=dict)
    context: str | None = None
    has_embedding: bool = False
    valid_from: datetime
    valid_to: datetime | None = None
    change: Literal["update", "supersede", "merge", "expire"] | None = None
    superseded_by: str | None = None
    by: str | None = None
    reason: str | None = None


class SearchHit(_Frozen):
    """A search result with the signals that ranked it.

    ``vector_score`` is the calibrated similarity (the common scale of every
    embedding model, see ``embedding.calibration``) and ``cosine`` the raw cosine
    of query and memory embeddings; both are ``None`` when no embedding took
    part (keyword-only mode or a memory stored without an embedding); ``mode``
    says which signals ran. ``rerank_score`` is the reranker's score when a
    reranker ordered this hit (``None`` otherwise; see ``dream_memory_actor.rerank``);
    ``score`` stays the hybrid score.
    """

    memory: VectorMemory
    score: float
    vector_score: float | None
    keyword_score: float
    time_score: float
    mode: Literal["hybrid", "keyword"]
    cosine: float | None = None
    rerank_score: float | None = None


class ChatMessage(_Frozen):
    """One message of a conversation (the L3 chat window keeps the last N of them)."""

    role: ChatRole
    content: str
    created_at: datetime = Field(default_factory=utcnow)


class ChatAppend(_Frozen):
    """What appending to a chat window did: the window now, and what fell out of it.

    ``overflow`` (oldest first) is what the caller sends to extraction.
    """

    window: tuple[ChatMessage, ...]
    overflow: tuple[ChatMessage, ...] = ()


class AuditEntry(_Frozen):
    """A person's decision on a pending item: who confirmed or rejected what, and when;
    or who undid a confirmed consolidation proposal (``action == "undone"``).

    ``item`` is the pending item as it was queued; ``written`` is the text that
    was written on confirmation (the content, or the value of a status item),
    which differs from the item's when the person edited it. An undo is an entry
    of its own beside the confirmation it reverses (same ``pending_id``): how many
    memories came back (``restored``), and the pending item the proposal waits in
    again (``requeued``).
    """

    id: str = Field(default_factory=new_id)
    pending_id: str
    action: AuditAction
    by: str
    at: datetime = Field(default_factory=utcnow)
    item: MemoryPendingItem
    written: str | None = None
    restored: int | None = Field(None, ge=0)
    requeued: str | None = None


class Tombstone(_Frozen):
    """What erasing an owner leaves: who did it, when, and how much went.

    Nothing in it names the owner or quotes its contents; keep the id the erasure
    returned to show later that it happened. ``counts`` are the owner's items by kind
    (rules, facts, status, pending, memories, audit) just before they were removed.
    """

    id: str = Field(default_factory=new_id)
    by: str
    at: datetime = Field(default_factory=utcnow)
    counts: dict[str, int] = Field(default_factory=dict)


class EmbeddingModel(_Frozen):
    """The model a store's memory vectors were made with, recorded with the data on the
    first write of a vector: its name (``embedding_model``), dimension and calibration
    (``Calibration.to_json``). Every process that opens the store embeds with it, so
    no two models' cosines are ever compared as one scale."""

    model: str
    dim: int = Field(ge=1)
    calibration: dict[str, Any] | None = None
    recorded_at: datetime = Field(default_factory=utcnow)

    def agrees(self, model: str, dim: int | None = None) -> bool:
        """Whether a process configured with ``model`` (and ``dim``) embeds like this."""
        return model == self.model and dim in (None, self.dim)
