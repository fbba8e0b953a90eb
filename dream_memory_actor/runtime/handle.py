"""``OwnerHandle``: one owner's memory, as a plain picklable object.

Each operation is built once as a :class:`~.connection.Call` (arguments checked
here, an operation id attached to writes) and run either blocking (``x``) or as a
coroutine (``x_async``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from .. import validation as check
from ..errors import FactNotFound, InvalidQuery, RuleNotFound
from ..models import (
    AuditEntry,
    ChatAppend,
    ChatMessage,
    MemoryFact,
    MemoryRule,
    MemorySnapshot,
    SearchHit,
    StoreResult,
    VectorMemory,
    new_id,
)
from ..storage.memory import InMemoryStructuredStore
from ..storage.ops import AddFact, AddRule, DeleteStatus, L1Op, RemoveFact, RemoveRule, SetStatus
from ..text import content_hash
from .connection import Call, Connection, connection
from .placement import read_task_name
from .spec import ClientView

if TYPE_CHECKING:
    from ..extraction import ExtractionReport, HitlDecision

T = TypeVar("T")
# Aliases: inside OwnerHandle the name ``list`` is a method.
Hits = list[SearchHit]
Memories = list[VectorMemory]
Audit = list[AuditEntry]

#: The most messages one ``append_messages`` or ``extract`` call may carry.
MAX_MESSAGES = 1000


@functools.lru_cache(maxsize=8)
def _ops_checker(max_content_bytes: int) -> InMemoryStructuredStore:
    # The stores' own ``validate_ops``, run here so bad input never leaves the process.
    return InMemoryStructuredStore(max_content_bytes=max_content_bytes)


def _op_id(op_id: str | None) -> str:
    return new_id() if op_id is None else check.ids([op_id], "operation id")[0]


def _same(value: Any) -> Any:
    return value


def _snapshot_of(value: Any) -> MemorySnapshot:
    assert isinstance(value, MemorySnapshot)
    return value


def _find(items: Sequence[Any], text: str, kind: str) -> Any:
    h = content_hash(text)
    found = next((i for i in items if content_hash(i.content) == h), None)
    if found is None:  # a retried add whose item was removed since the first attempt
        raise (RuleNotFound if kind == "rules" else FactNotFound)(
            f"the {kind[:-1]} was added, then removed before this retry answered")
    return found


def _conversation(value: object) -> str:
    if not isinstance(value, str) or not check.OWNER_ID_PATTERN.fullmatch(value):
        raise InvalidQuery(
            f"invalid conversation id {value!r}: use 1-128 characters of A-Z a-z 0-9 . _ : @ -, "
            "starting with a letter or digit")
    return value


def _messages(messages: Sequence[ChatMessage], *, empty_ok: bool) -> list[ChatMessage]:
    if isinstance(messages, (str, bytes, ChatMessage)) or not isinstance(messages, Sequence):
        raise InvalidQuery("messages must be a list of ChatMessage")
    out = list(messages)
    if not out and not empty_ok:
        raise InvalidQuery("messages must not be empty")
    if len(out) > MAX_MESSAGES:
        raise InvalidQuery(f"at most {MAX_MESSAGES} messages per call, got {len(out)}")
    for m in out:
        if not isinstance(m, ChatMessage):
            raise InvalidQuery(f"expected a ChatMessage, got {type(m).__name__}")
    return out


def _decider(by: object) -> str:
    if not isinstance(by, str) or not 0 < len(by) <= 64 or "\x00" in by:
        raise InvalidQuery(f"by must name who decides (1-64 characters), got {by!r}")
    return by


def search_call(view: ClientView, owners: str | Iterable[str], query: str, limit: int,
                min_score: float) -> Call[Hits]:
    """A hybrid search over ``owners``, checked here, for any VectorIndex replica."""
    who = check.owner_ids(owners)
    text = check.content(query, view.max_content_bytes, what="query")
    n = check.limit(limit)
    floor = check.unit_interval(min_score, "min_score")
    return Call("index", "search", (list(who), text, n, floor), _same, "search")


class OwnerHandle:
    """The memory of one owner. Obtain it with ``MemorySystem.owner(owner_id)``.

    Holds no connection, only the system's name and limits, so it pickles to a
    few hundred bytes and works in any task or actor of the cluster.
    """

    __slots__ = ("_view", "owner")

    def __init__(self, view: ClientView, owner: str) -> None:
        self._view = view
        self.owner = check.owner_id(owner)

    def __reduce__(self) -> tuple[Any, ...]:
        return (OwnerHandle, (self._view, self.owner))

    def __repr__(self) -> str:
        return f"OwnerHandle({self.owner!r}, system={self._view.name!r})"

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, OwnerHandle) and other.owner == self.owner
                and other._view.incarnation == self._view.incarnation)

    def __hash__(self) -> int:
        return hash((self.owner, self._view.incarnation))

    def _run(self, call: Call[T]) -> T:
        return connection(self._view).call(call)

    async def _run_async(self, call: Call[T]) -> T:
        return await connection(self._view).call_async(call)

    # -- building the calls -------------------------------------------------------------

    def _owner_call(self, method: str, args: tuple[Any, ...], then: Callable[[Any], T],
                    extra_timeout_s: float = 0.0) -> Call[T]:
        return Call("owner", method, (self.owner, *args), then, f"{method} for {self.owner!r}",
                    owner=self.owner, extra_timeout_s=extra_timeout_s)

    def _snapshot_args(self, min_version: int | None, timeout_s: float | None,
                       min_epoch: str | None = None) -> float:
        if min_version is not None and (isinstance(min_version, bool)
                                        or not isinstance(min_version, int) or min_version < 0):
            raise InvalidQuery(f"min_version must be an integer >= 0, got {min_version!r}")
        if min_epoch is not None and (min_version is None or not isinstance(min_epoch, str)
                                      or len(min_epoch) > 64):
            raise InvalidQuery(f"min_epoch must be a snapshot's epoch, with min_version, "
                               f"got {min_epoch!r}")
        wait = self._view.read_timeout_s if timeout_s is None else timeout_s
        if isinstance(wait, bool) or not isinstance(wait, (int, float)) or not 0 < wait <= 3600:
            raise InvalidQuery(f"timeout_s must be a number of seconds in (0, 3600], got {wait!r}")
        return float(wait)

    def _reads(self, conn: Connection, min_version: int | None, wait: float,
               min_epoch: str | None = None) -> Iterator[Call[MemorySnapshot | None]]:
        """The reads to try in order until one gives the snapshot; the last always does.
        Made one at a time: the first usually answers.

        1. the fast read, from the actor's memory, as cheap as a Ray call without
           argument: an unchanged snapshot held here is confirmed, not re-sent;
        2. the full read (loads the owner, waits for ``min_version``).
        """
        token, version = conn.known(self.owner)
        remember = functools.partial(conn.remember, self.owner)
        if min_epoch is None:  # the fast read's question has no room for an epoch
            yield Call("owner", "read", (), remember, f"read for {self.owner!r}",
                       owner=self.owner,
                       task_name=read_task_name(self.owner, min_version, token, version))
        yield self._owner_call("snapshot", (min_version, wait, min_epoch), remember, wait)

    def _apply(self, ops: Sequence[L1Op], op_id: str | None, then: Callable[[Any], T]
               ) -> Call[T]:
        if isinstance(ops, (str, bytes)) or not isinstance(ops, Sequence) or not ops:
            raise InvalidQuery("apply needs a non-empty list of operations")
        checked = _ops_checker(self._view.max_content_bytes).validate_ops(ops)
        return self._owner_call("apply", (checked, _op_id(op_id)), then)

    def _add(self, kind: type[AddRule] | type[AddFact], content: str, source: str,
             op_id: str | None) -> Call[Any]:
        text = check.content(content, self._view.max_content_bytes)
        attr = "rules" if kind is AddRule else "facts"
        return self._apply([kind(text, source)], op_id,
                           lambda snap: _find(getattr(snap, attr), text, attr))

    def _store(self, content: str, metadata: Mapping[str, Any] | None, op_id: str | None
               ) -> Call[StoreResult]:
        text = check.content(content, self._view.max_content_bytes)
        meta = check.metadata(metadata)
        return self._owner_call("store", (text, meta, _op_id(op_id)), _same)

    def _get(self, memory_id: str) -> Call[VectorMemory]:
        check.ids([memory_id], "memory id")
        return Call("index", "get", (self.owner, memory_id), _same, f"get for {self.owner!r}")

    def _delete(self, memory_id: str) -> Call[bool]:
        check.ids([memory_id], "memory id")
        return self._owner_call("delete", (memory_id,), _same)

    def _list(self, limit: int, offset: int) -> Call[Memories]:
        n = check.limit(limit)
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise InvalidQuery(f"offset must be an integer >= 0, got {offset!r}")
        return Call("index", "list", (self.owner, n, offset), _same, f"list for {self.owner!r}")

    def _search(self, query: str, limit: int, also: Iterable[str], min_score: float
                ) -> Call[Hits]:
        if isinstance(also, str):
            also = [also]
        return search_call(self._view, (self.owner, *also), query, limit, min_score)

    # -- L1 -------------------------------------------------------------------------------

    def snapshot(self, min_version: int | None = None, *, timeout_s: float | None = None,
                 min_epoch: str | None = None) -> MemorySnapshot:
        """The owner's snapshot, served from its actor's memory.

        ``min_version``: wait (up to ``timeout_s``, default the system's read timeout)
        until the snapshot has at least this version, e.g. the version another agent's
        write returned; ``RuntimeTimeout`` if it does not come. ``min_epoch`` (that
        snapshot's ``epoch``) says which incarnation of the owner's state the version
        counts in: a snapshot of a later epoch (the backend lost the state and it was
        written again) is newer than any version of the old one.
        """
        conn = connection(self._view)
        wait = self._snapshot_args(min_version, timeout_s, min_epoch)
        for read in self._reads(conn, min_version, wait, min_epoch):
            snap = conn.call(read)
            if snap is not None:
                return snap
        raise AssertionError("the full read always carries the snapshot")

    async def snapshot_async(self, min_version: int | None = None, *,
                             timeout_s: float | None = None, min_epoch: str | None = None
                             ) -> MemorySnapshot:
        conn = connection(self._view)
        wait = self._snapshot_args(min_version, timeout_s, min_epoch)
        for read in self._reads(conn, min_version, wait, min_epoch):
            snap = await conn.call_async(read)
            if snap is not None:
                return snap
        raise AssertionError("the full read always carries the snapshot")

    def apply(self, ops: Sequence[L1Op], *, op_id: str | None = None) -> MemorySnapshot:
        """Apply L1 operations atomically (all or none); the new snapshot."""
        return self._run(self._apply(ops, op_id, _snapshot_of))

    async def apply_async(self, ops: Sequence[L1Op], *, op_id: str | None = None
                          ) -> MemorySnapshot:
        return await self._run_async(self._apply(ops, op_id, _snapshot_of))

    def add_rule(self, content: str, source: str = "user", *, op_id: str | None = None
                 ) -> MemoryRule:
        """Add a rule; the existing one if the same text is already a rule."""
        rule: MemoryRule = self._run(self._add(AddRule, content, source, op_id))
        return rule

    async def add_rule_async(self, content: str, source: str = "user", *,
                             op_id: str | None = None) -> MemoryRule:
        rule: MemoryRule = await self._run_async(self._add(AddRule, content, source, op_id))
        return rule

    def add_fact(self, content: str, source: str = "user", *, op_id: str | None = None
                 ) -> MemoryFact:
        """Add a fact; the existing one if the same text is already a fact."""
        fact: MemoryFact = self._run(self._add(AddFact, content, source, op_id))
        return fact

    async def add_fact_async(self, content: str, source: str = "user", *,
                             op_id: str | None = None) -> MemoryFact:
        fact: MemoryFact = await self._run_async(self._add(AddFact, content, source, op_id))
        return fact

    def remove_rule(self, rule_id: str, *, op_id: str | None = None) -> MemorySnapshot:
        return self._run(self._apply([RemoveRule(rule_id)], op_id, _snapshot_of))

    async def remove_rule_async(self, rule_id: str, *, op_id: str | None = None
                                ) -> MemorySnapshot:
        return await self._run_async(self._apply([RemoveRule(rule_id)], op_id, _snapshot_of))

    def remove_fact(self, fact_id: str, *, op_id: str | None = None) -> MemorySnapshot:
        return self._run(self._apply([RemoveFact(fact_id)], op_id, _snapshot_of))

    async def remove_fact_async(self, fact_id: str, *, op_id: str | None = None
                                ) -> MemorySnapshot:
        return await self._run_async(self._apply([RemoveFact(fact_id)], op_id, _snapshot_of))

    def set_status(self, key: str, value: str, ttl_s: float | None = None, *,
                   op_id: str | None = None) -> MemorySnapshot:
        """Set a status entry; ``ttl_s`` makes it expire by itself."""
        return self._run(self._apply([SetStatus(key, value, ttl_s)], op_id, _snapshot_of))

    async def set_status_async(self, key: str, value: str, ttl_s: float | None = None, *,
                               op_id: str | None = None) -> MemorySnapshot:
        call = self._apply([SetStatus(key, value, ttl_s)], op_id, _snapshot_of)
        return await self._run_async(call)

    def delete_status(self, key: str, *, op_id: str | None = None) -> MemorySnapshot:
        return self._run(self._apply([DeleteStatus(key)], op_id, _snapshot_of))

    async def delete_status_async(self, key: str, *, op_id: str | None = None
                                  ) -> MemorySnapshot:
        return await self._run_async(self._apply([DeleteStatus(key)], op_id, _snapshot_of))

    # -- L2 -------------------------------------------------------------------------------

    def store(self, content: str, metadata: Mapping[str, Any] | None = None, *,
              op_id: str | None = None) -> StoreResult:
        """Store a semantic memory, merged into a near-duplicate if there is one."""
        return self._run(self._store(content, metadata, op_id))

    async def store_async(self, content: str, metadata: Mapping[str, Any] | None = None, *,
                          op_id: str | None = None) -> StoreResult:
        return await self._run_async(self._store(content, metadata, op_id))

    def search(self, query: str, limit: int = 10, also: Iterable[str] = (), *,
               min_score: float = 0.0) -> Hits:
        """Hybrid search over this owner's memories and those of the owners in ``also``."""
        return self._run(self._search(query, limit, also, min_score))

    async def search_async(self, query: str, limit: int = 10, also: Iterable[str] = (), *,
                           min_score: float = 0.0) -> Hits:
        return await self._run_async(self._search(query, limit, also, min_score))

    def get(self, memory_id: str) -> VectorMemory:
        return self._run(self._get(memory_id))

    async def get_async(self, memory_id: str) -> VectorMemory:
        return await self._run_async(self._get(memory_id))

    def delete(self, memory_id: str) -> bool:
        """Delete a semantic memory; ``False`` if there was none with that id."""
        return self._run(self._delete(memory_id))

    async def delete_async(self, memory_id: str) -> bool:
        return await self._run_async(self._delete(memory_id))

    def list(self, limit: int = 100, offset: int = 0) -> Memories:
        """Semantic memories, newest first."""
        return self._run(self._list(limit, offset))

    async def list_async(self, limit: int = 100, offset: int = 0) -> Memories:
        return await self._run_async(self._list(limit, offset))

    # -- extraction, the pending queue and the L3 chat window --------------------------------

    def _append(self, conversation: str, messages: Sequence[ChatMessage], op_id: str | None
                ) -> Call[ChatAppend]:
        conv = _conversation(conversation)
        return self._owner_call("append_messages",
                                (conv, _messages(messages, empty_ok=False), _op_id(op_id)), _same)

    def _end(self, conversation: str) -> Call[ExtractionReport | None]:
        return self._owner_call("end_conversation", (_conversation(conversation),), _same)

    def _extract(self, messages: Sequence[ChatMessage]) -> Call[ExtractionReport]:
        return self._owner_call("extract", (_messages(messages, empty_ok=True),), _same)

    def _confirm(self, pending_id: str, by: str, edited_content: str | None
                 ) -> Call[HitlDecision]:
        check.ids([pending_id], "pending item id")
        text = None if edited_content is None else check.content(
            edited_content, self._view.max_content_bytes, "edited content")
        return self._owner_call("confirm", (pending_id, _decider(by), text), _same)

    def _reject(self, pending_id: str, by: str) -> Call[HitlDecision]:
        check.ids([pending_id], "pending item id")
        return self._owner_call("reject", (pending_id, _decider(by)), _same)

    def _audit(self, limit: int) -> Call[Audit]:
        return self._owner_call("audit", (check.limit(limit),), _same)

    def append_messages(self, conversation: str, messages: Sequence[ChatMessage], *,
                        op_id: str | None = None) -> ChatAppend:
        """Append to the chat window of ``conversation`` (the last ``chat_window``
        messages, kept by the owner's actor and persisted in the backend). What leaves
        the window (``overflow``) is extracted in the background by the owner's actor;
        an extraction failure never fails the append. Idempotent like every write: a
        retry (same ``op_id``, generated here unless given) appends nothing again."""
        return self._run(self._append(conversation, messages, op_id))

    async def append_messages_async(self, conversation: str, messages: Sequence[ChatMessage],
                                    *, op_id: str | None = None) -> ChatAppend:
        return await self._run_async(self._append(conversation, messages, op_id))

    def end_conversation(self, conversation: str) -> ExtractionReport | None:
        """Close ``conversation``: its window is deleted and extracted (awaited); the
        report, or ``None`` if the window was empty. An ``ExtractionError`` is raised."""
        return self._run(self._end(conversation))

    async def end_conversation_async(self, conversation: str) -> ExtractionReport | None:
        return await self._run_async(self._end(conversation))

    def extract(self, messages: Sequence[ChatMessage]) -> ExtractionReport:
        """Extract from ``messages`` now, through the gate: written, queued or skipped."""
        return self._run(self._extract(messages))

    async def extract_async(self, messages: Sequence[ChatMessage]) -> ExtractionReport:
        return await self._run_async(self._extract(messages))

    def flush_extractions(self) -> int:
        """Wait until the background extractions of this owner started so far have
        finished (on its current actor); how many there were."""
        n: int = self._run(self._owner_call("flush_extractions", (), _same))
        return n

    async def flush_extractions_async(self) -> int:
        n: int = await self._run_async(self._owner_call("flush_extractions", (), _same))
        return n

    def confirm(self, pending_id: str, by: str, edited_content: str | None = None
                ) -> HitlDecision:
        """Write a pending item (``edited_content`` replaces its text) and record who did.
        Idempotent; ``PendingItemDecided`` if it was rejected."""
        return self._run(self._confirm(pending_id, by, edited_content))

    async def confirm_async(self, pending_id: str, by: str, edited_content: str | None = None
                            ) -> HitlDecision:
        return await self._run_async(self._confirm(pending_id, by, edited_content))

    def reject(self, pending_id: str, by: str) -> HitlDecision:
        """Drop a pending item and record who did. Idempotent; ``PendingItemDecided`` if
        it was confirmed."""
        return self._run(self._reject(pending_id, by))

    async def reject_async(self, pending_id: str, by: str) -> HitlDecision:
        return await self._run_async(self._reject(pending_id, by))

    def audit(self, limit: int = 100) -> Audit:
        """Decisions on this owner's pending items (who, what, when), newest first."""
        return self._run(self._audit(limit))

    async def audit_async(self, limit: int = 100) -> Audit:
        return await self._run_async(self._audit(limit))
