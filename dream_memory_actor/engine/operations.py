"""Every operation on one owner's memory, described once; the layers are built from it.

A description is a function signature. Its name is the operation's; each parameter
is an argument, annotated with the one rule that checks it (``MemoryId`` is
``Annotated[str, <the memory id rule>]``); the return annotation is the result; the
docstring is the one users read. The decorator says who serves the operation in a
memory system:

* ``"writer"``: the owner's actor, under the owner's lock (the single writer), which
  hands it to the VectorIndex that holds the embedder;
* ``"owner"``: the owner's actor;
* ``"index"``: any VectorIndex replica (a read of L2, no lock);

and, with ``metric``, what the operation counts as in ``dream_memory_operations_total``.
An ``op_id`` parameter makes it an idempotent write: an id is generated unless given,
and a retry with that id is applied once.

From these come ``OwnerHandle``'s methods, blocking and ``_async`` (:meth:`Operation.
blocking`, :meth:`Operation.coroutine`: the arguments are checked there, once, and
one call is sent), the owner actors' and the VectorIndex's methods (:meth:`Operation.
named` turns what a call carried into the engine's keyword arguments) and what the
doors run (``MemoryBackend.call``, which checks the arguments by the same rules). A
layer that does something different for an operation (the snapshot read, a search
over several owners, the L1 writes made of ``apply``) writes that by hand. A new
operation is its description here, its engine method, and its two lines in
``OwnerHandle`` (plus, for a new kind of stored data, the backends).
"""

# Annotations are evaluated here, not postponed: each parameter's annotation carries
# its check, read when the module is imported.

import inspect
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import (
    Annotated,
    Any,
    Concatenate,
    Generic,
    Literal,
    Optional,
    ParamSpec,
    TypeVar,
    cast,
    get_args,
)

from .. import validation as check
from ..errors import InvalidImport
from ..extraction.service import ConsolidationReport, ExtractionReport, HitlDecision
from ..history import ItemHistory, StatusChange
from ..limits import Limits
from ..models import (
    AuditEntry,
    ChatAppend,
    ChatMessage,
    MemoryPendingItem,
    MemorySnapshot,
    MemoryVersion,
    StoreResult,
    Tombstone,
    VectorMemory,
    new_id,
)
from ..text import MemoryText
from ..validation import l1 as check_l1
from ..validation import l2 as check_l2

P = ParamSpec("P")
R = TypeVar("R")
F = TypeVar("F", bound=Callable[..., Any])

Serves = Literal["writer", "owner", "index"]


@dataclass(frozen=True)
class Scope:
    """What a check may need besides the value: whose call it is and the size caps."""

    owner: str
    max_content_bytes: int
    limits: Limits


#: An argument's rule: the checked (and normalized) value, or a typed ``InvalidInput``.
Check = Callable[[Any, Scope], Any]

# -- the rules, one per kind of argument -------------------------------------------------


def _id(what: str) -> Check:
    """The rule of an id of ``what`` (``validation.ids``)."""

    def rule(value: Any, scope: Scope) -> str:
        return check.ids([value], what)[0]

    return rule


def _content(value: Any, scope: Scope) -> str:
    return check.content(value, scope.max_content_bytes)


def _context(value: Any, scope: Scope) -> str | None:
    return check.context(value, scope.max_content_bytes)


def _edited(value: Any, scope: Scope) -> str | None:
    return None if value is None else check.content(value, scope.max_content_bytes,
                                                    "edited content")


def _metadata(value: Any, scope: Scope) -> dict[str, Any]:
    return check.metadata(value, scope.limits)


def _new_metadata(value: Any, scope: Scope) -> dict[str, Any] | None:
    return None if value is None else check.metadata(value, scope.limits)


def _decider(value: Any, scope: Scope) -> str:
    return check.decider(value)


def _maybe_decider(value: Any, scope: Scope) -> str | None:
    return None if value is None else check.decider(value)


def _reason(value: Any, scope: Scope) -> str | None:
    return check_l2.reason(value)


def _op_id(value: Any, scope: Scope) -> str:
    return new_id() if value is None else check.op_id(value)


def _limit(value: Any, scope: Scope) -> int:
    return check.limit(value)


def _offset(value: Any, scope: Scope) -> int:
    return check.offset(value)


def _filter(value: Any, scope: Scope) -> dict[str, Any] | None:
    return check_l2.metadata_filter(value)


def _batch(value: Any, scope: Scope) -> list[dict[str, Any]]:
    return [{"content": t, "metadata": m, **({} if c is None else {"context": c})}
            for t, m, c in check_l2.batch(value, scope.max_content_bytes, scope.limits)]


def _conversation(value: Any, scope: Scope) -> str:
    return check.conversation_id(value)


def _new_messages(value: Any, scope: Scope) -> list[ChatMessage]:
    return [check.message(m, scope.max_content_bytes)
            for m in check.messages(value, max_count=check.MAX_MESSAGES, empty_ok=False)]


def _messages(value: Any, scope: Scope) -> list[ChatMessage]:
    return check.messages(value, max_count=check.MAX_MESSAGES)


def _status_key(value: Any, scope: Scope) -> str:
    return check.status_key(value)


def _proposed(value: Any, scope: Scope) -> MemoryPendingItem:
    item = value if isinstance(value, MemoryPendingItem) else MemoryPendingItem.model_validate(
        value)
    return check_l1.pending_item(item, scope.max_content_bytes, scope.limits)


def _past(value: Any, scope: Scope) -> datetime:
    return check.past(value)


def _document(value: Any, scope: Scope) -> list[str]:
    """An export document of this owner, whole: a bad one never leaves the caller."""
    from .portability import parse

    lines = [line if isinstance(line, str) else line.decode("utf-8") for line in value]
    if parse(lines).owner != scope.owner:
        raise InvalidImport(f"the document is not of owner {scope.owner!r}")
    return lines


MemoryId = Annotated[str, _id("memory id")]
ItemId = Annotated[str, _id("item id")]
PendingId = Annotated[str, _id("pending item id")]
Content = Annotated[str, _content]
Edited = Annotated[Optional[str], _edited]  # noqa: UP045 - evaluated at import, on 3.10
Context = Annotated[Optional[str], _context]  # noqa: UP045
Metadata = Annotated[Optional[Mapping[str, Any]], _metadata]  # noqa: UP045
NewMetadata = Annotated[Optional[Mapping[str, Any]], _new_metadata]  # noqa: UP045
Decider = Annotated[str, _decider]
MaybeDecider = Annotated[Optional[str], _maybe_decider]  # noqa: UP045
Reason = Annotated[Optional[str], _reason]  # noqa: UP045
OpId = Annotated[Optional[str], _op_id]  # noqa: UP045
Limit = Annotated[int, _limit]
Offset = Annotated[int, _offset]
Filter = Annotated[Optional[Mapping[str, Any]], _filter]  # noqa: UP045
Batch = Annotated[Sequence[Any], _batch]
ConversationId = Annotated[str, _conversation]
NewMessages = Annotated[Sequence[ChatMessage], _new_messages]
Messages = Annotated[Sequence[ChatMessage], _messages]
StatusKey = Annotated[str, _status_key]
PastTime = Annotated[datetime, _past]
Proposed = Annotated[MemoryPendingItem, _proposed]
Document = Annotated[Iterable[str], _document]


class Operation(Generic[P, R]):
    """One operation's description (see the module's docstring)."""

    def __init__(self, spec: Callable[P, R], serves: Serves, metric: str | None,
                 name: str | None, per_item_s: float, embeds: str | None = None) -> None:
        self.name = name or spec.__name__
        self.doc = inspect.getdoc(spec) or ""
        self.serves = serves
        self.metric = metric
        #: Seconds a call may take per item of its first argument beyond the call timeout.
        self.per_item_s = per_item_s
        self.signature = inspect.signature(spec)
        self.params = tuple(self.signature.parameters)
        self.checks: tuple[Check | None, ...] = tuple(
            _rule(p.annotation) for p in self.signature.parameters.values())
        #: The argument whose text (or batch items' texts) the write embeds.
        self.embeds = embeds

    def __repr__(self) -> str:
        return f"Operation({self.name!r}, serves={self.serves!r})"

    def check(self, scope: Scope, args: Sequence[Any], kwargs: Mapping[str, Any]
              ) -> tuple[Any, ...]:
        """The arguments of a call, bound as the signature binds them and each checked by
        its rule, in order (a generated ``op_id`` included)."""
        return tuple(value if rule is None else rule(value, scope)
                     for value, rule in zip(self.bind(args, kwargs).values(), self.checks,
                                            strict=True))

    def bind(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """The arguments by name, defaults filled in, unchecked (for a door that checked)."""
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return dict(bound.arguments)

    def named(self, values: Sequence[Any]) -> dict[str, Any]:
        """What a call carried (``check``'s values, in order) as keyword arguments."""
        return dict(zip(self.params, values, strict=True))

    def memories(self, values: Sequence[Any]) -> list[MemoryText]:
        """The checked memories (content, context) a call of this write embeds (none for
        most operations)."""
        if self.embeds is None:
            return []
        named = self.named(values)
        value = named[self.embeds]
        if isinstance(value, str):
            return [(value, named.get("context"))]
        return [(item["content"], item.get("context")) for item in value]

    def extra_timeout_s(self, values: Sequence[Any]) -> float:
        return self.per_item_s * len(values[0]) if self.per_item_s else 0.0

    # -- the methods built from it ----------------------------------------------------

    def blocking(self) -> Callable[Concatenate[Any, P], R]:
        """The handle's blocking method: ``handle._perform(operation, args, kwargs)``."""
        op = self

        def method(handle: Any, /, *args: P.args, **kwargs: P.kwargs) -> R:
            return cast(R, handle._perform(op, args, kwargs))

        return self._like(method, "")

    def coroutine(self) -> Callable[Concatenate[Any, P], Coroutine[Any, Any, R]]:
        """The handle's ``_async`` method: ``await handle._perform_async(...)``."""
        op = self

        async def method(handle: Any, /, *args: P.args, **kwargs: P.kwargs) -> R:
            return cast(R, await handle._perform_async(op, args, kwargs))

        return self._like(method, "_async")

    def install(self, cls: type, method: Callable[..., Any]) -> None:
        """Make ``method`` the operation's method of ``cls``, named and documented as it
        (a layer that serves the operation as every other one does)."""
        method.__name__ = self.name
        method.__qualname__ = f"{cls.__qualname__}.{self.name}"
        method.__doc__ = self.doc
        setattr(cls, self.name, method)

    def _like(self, method: F, suffix: str) -> F:
        """``method`` named and documented as the operation, with its signature."""
        method.__name__ = method.__qualname__ = self.name + suffix
        method.__doc__ = self.doc
        lead = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
        shown = [p.replace(annotation=_plain(p.annotation))
                 for p in self.signature.parameters.values()]
        method.__signature__ = self.signature.replace(  # type: ignore[attr-defined]
            parameters=[lead, *shown])
        return method


def _rule(annotation: Any) -> Check | None:
    rules = [a for a in get_args(annotation)[1:] if callable(a)]
    return rules[0] if rules else None


def _plain(annotation: Any) -> Any:
    """The type an ``Annotated`` argument has, without its rule (what ``help`` shows)."""
    return get_args(annotation)[0] if _rule(annotation) is not None else annotation


def operation(serves: Serves, *, metric: str | None = None, name: str | None = None,
              per_item_s: float = 0.0, embeds: str | None = None
              ) -> Callable[[Callable[P, R]], Operation[P, R]]:
    """Describe an operation by its signature (see the module's docstring)."""

    def describe(spec: Callable[P, R]) -> Operation[P, R]:
        return Operation(spec, serves, metric, name, per_item_s, embeds)

    return describe


#: Seconds a batch write may take per item beyond the call timeout (embedding it).
BATCH_ITEM_S = 0.25

# -- L2: semantic memories ----------------------------------------------------------------
#
# A description's body never runs: only its signature and docstring are read (an
# ``Operation`` is not callable). The engine method of the same name does the work.


@operation("writer", metric="store", embeds="content")
def store(content: Content, metadata: Metadata = None, *, context: Context = None,
          op_id: OpId = None) -> StoreResult:
    """Store a semantic memory, merged into a near-duplicate if there is one. ``context``
    (the turn before it, its date) is embedded and searched with it, never returned as
    its content."""
    raise NotImplementedError


@operation("writer", metric="store_many", per_item_s=BATCH_ITEM_S, embeds="items")
def store_many(items: Batch, *, op_id: OpId = None) -> list[StoreResult]:
    """Store a batch (texts or ``{"content": ..., "metadata": ..., "context": ...}``) as
    ``store`` each would, near-duplicates merged, embedded in one call; one result per
    item."""
    raise NotImplementedError


@operation("writer", metric="update", embeds="content")
def update(memory_id: MemoryId, content: Content, metadata: NewMetadata = None, *,
           context: Context = None, op_id: OpId = None) -> VectorMemory:
    """Change a memory's content (and metadata and context, when given); the previous
    version stays in its history."""
    raise NotImplementedError


@operation("writer", metric="apply", embeds="content")
def supersede_memory(memory_id: MemoryId, content: Content, metadata: NewMetadata = None, *,
                     by: MaybeDecider = None, reason: Reason = None, context: Context = None,
                     op_id: OpId = None) -> VectorMemory:
    """Replace a memory by a new one, closing the old in the same step; the new one (its
    context the given one, else the old memory's)."""
    raise NotImplementedError


@operation("writer", metric="delete")
def delete(memory_id: MemoryId) -> bool:
    """Delete a semantic memory; ``False`` if there was none with that id."""
    raise NotImplementedError


@operation("index")
def get(memory_id: MemoryId) -> VectorMemory:
    """The current memory ``memory_id`` (``MemoryNotFound`` if there is none)."""
    raise NotImplementedError


@operation("index", metric="list", name="list")
def list_memories(limit: Limit = 100, offset: Offset = 0, *, filter: Filter = None
                  ) -> list[VectorMemory]:
    """Current semantic memories, newest first (``filter`` as in ``search``)."""
    raise NotImplementedError


@operation("index")
def memory_history(memory_id: MemoryId) -> list[MemoryVersion]:
    """The versions of the memory's chain of updates and supersessions, oldest first."""
    raise NotImplementedError


# -- L1 history ------------------------------------------------------------------------------


@operation("owner")
def history(item_id: ItemId) -> ItemHistory:
    """The versions of the rule or fact ``item_id`` belongs to, oldest first."""
    raise NotImplementedError


@operation("owner")
def snapshot_as_of(at: PastTime) -> MemorySnapshot:
    """The rules, facts and status this owner had at ``at``."""
    raise NotImplementedError


@operation("owner")
def status_history(key: StatusKey) -> list[StatusChange]:
    """The kept values of status ``key``, oldest first (``None``: deleted)."""
    raise NotImplementedError


# -- extraction, the pending queue and the L3 chat window ---------------------------------------


@operation("owner", metric="append")
def append_messages(conversation: ConversationId, messages: NewMessages, *,
                    op_id: OpId = None) -> ChatAppend:
    """Append to the chat window of ``conversation`` (the last ``chat_window``
    messages, kept by the owner's actor and persisted in the backend). What leaves
    the window (``overflow``) is extracted in the background by the owner's actor;
    an extraction failure never fails the append. Idempotent like every write: a
    retry (same ``op_id``, generated here unless given) appends nothing again."""
    raise NotImplementedError


@operation("owner", metric="extract")
def end_conversation(conversation: ConversationId) -> Optional[ExtractionReport]:  # noqa: UP045
    """Close ``conversation``: its window is deleted and extracted (awaited); the
    report, or ``None`` if the window was empty. An ``ExtractionError`` is raised."""
    raise NotImplementedError


@operation("owner", metric="extract")
def extract(messages: Messages) -> ExtractionReport:
    """Extract from ``messages`` now, through the gate: written, queued or skipped."""
    raise NotImplementedError


@operation("owner")
def flush_extractions() -> int:
    """Wait until the background extractions of this owner started so far have
    finished (on its current actor); how many there were."""
    raise NotImplementedError


@operation("owner", metric="apply")
def confirm(pending_id: PendingId, by: Decider, edited_content: Edited = None
            ) -> HitlDecision:
    """Write a pending item (``edited_content`` replaces its text) and record who did.
    Idempotent; ``PendingItemDecided`` if it was rejected."""
    raise NotImplementedError


@operation("owner", metric="apply")
def reject(pending_id: PendingId, by: Decider) -> HitlDecision:
    """Drop a pending item and record who did. Idempotent; ``PendingItemDecided`` if
    it was confirmed."""
    raise NotImplementedError


@operation("owner")
def audit(limit: Limit = 100) -> list[AuditEntry]:
    """Decisions on this owner's pending items (who, what, when), newest first."""
    raise NotImplementedError


# -- consolidation ("dreaming"): proposals a person decides ----------------------------------------


@operation("index")
def propose() -> list[MemoryPendingItem]:
    """What a consolidation pass would propose for this owner now (merges of duplicate
    memories, supersessions of outdated ones, expiries of old memories and status
    values, corrections of rules and facts), not queued (``consolidate`` queues them)."""
    raise NotImplementedError


@operation("owner", metric="consolidate")
def consolidate(*, apply_all: bool = False, by: Decider = "consolidation"
                ) -> ConsolidationReport:
    """Run a consolidation pass: its proposals wait in the pending queue for a person's
    ``confirm`` (with an edit) or ``reject``; with ``apply_all`` (for owners who opt in),
    ``by`` confirms each at once. A proposal rejected before is not made again; one
    undone waits in the queue again (``undo_proposal``)."""
    raise NotImplementedError


@operation("writer", metric="apply")
def apply_proposal(item: Proposed, *, by: Decider, edited: Edited = None
                   ) -> Optional[str]:  # noqa: UP045
    """Apply the queued proposal ``item`` (``confirm`` calls it): one write, refused with
    ``ProposalChanged`` if its memories changed since; the kept memory's id."""
    raise NotImplementedError


@operation("writer", metric="apply")
def unapply_proposal(pending_id: PendingId) -> int:
    """Reverse an applied proposal's change of the memories exactly, recording nothing
    (``undo_proposal`` calls it): how many memories came back."""
    raise NotImplementedError


@operation("owner", metric="apply")
def undo_proposal(pending_id: PendingId, by: Decider) -> HitlDecision:
    """Reverse a confirmed proposal exactly: its memories live again as they were, their
    versions gone from the histories. The undo is recorded in the audit trail (who,
    when, how many memories came back) and the proposal waits in the queue again, under
    a new id (``entry.requeued``), for a person to confirm or reject once more.
    Idempotent: a second call answers the recorded undo (``applied`` False).
    ``ProposalNotApplied`` if no such proposal was confirmed; ``ProposalChanged``,
    nothing written, if the memory it kept changed since. An expired status value is
    set again (``ProposalChanged`` if its key was set since)."""
    raise NotImplementedError


# -- the owner as a whole ------------------------------------------------------------------------


@operation("owner", metric="forget")
def forget(*, by: Decider, op_id: OpId = None) -> Tombstone:
    """Erase everything of this owner on every layer (rules, facts, status and
    pending items, memories and their embeddings, chat windows, operation ids, the
    audit trail) and return the tombstone left: who, when, how many of each kind,
    and nothing that names the owner. Background extractions of the owner are
    cancelled first. Idempotent: a retry (same ``op_id``) returns the same tombstone."""
    raise NotImplementedError


@operation("owner")
def export() -> list[str]:
    """This owner's export document, line by line: a versioned JSON Lines document
    with its rules, facts, status, pending items, audit trail and memories (with
    their embeddings and the model that made them). See ``portability``."""
    raise NotImplementedError


@operation("owner", metric="import")
def import_document(lines: Document) -> dict[str, int]:
    """Import an export document of this owner (its header must name it) into it;
    the owner must be empty. Checked whole before anything is written."""
    raise NotImplementedError


#: Every operation described here, by name.
OPERATIONS: dict[str, Operation[Any, Any]] = {
    op.name: op for op in list(globals().values()) if isinstance(op, Operation)}


def serving(*kinds: Serves) -> list[Operation[Any, Any]]:
    """The operations served by ``kinds`` in a memory system."""
    return [op for op in OPERATIONS.values() if op.serves in kinds]
