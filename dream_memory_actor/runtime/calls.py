"""The calls an owner handle makes, each built once and checked before it is sent.

A :class:`~.connection.Call` names the actor kind, the method and the arguments;
building one runs the argument rules of :mod:`dream_memory_actor.validation`, so a
bad call raises here and never leaves the process. Writes get an operation id
(generated unless given), so a retried write is applied once.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from .. import validation as check
from ..models import (
    AuditEntry,
    ChatAppend,
    ChatMessage,
    MemorySnapshot,
    MemoryVersion,
    SearchHit,
    StoreResult,
    Tombstone,
    VectorMemory,
    new_id,
)
from ..storage.ops import AddFact, AddRule, L1Op, added
from ..validation import l1 as check_l1
from ..validation import l2 as check_l2
from .connection import Call, Connection
from .placement import read_task_name
from .spec import ClientView

if TYPE_CHECKING:
    from ..extraction import ExtractionReport, HitlDecision

T = TypeVar("T")

#: The most messages one ``append_messages`` or ``extract`` call may carry.
MAX_MESSAGES = check.MAX_MESSAGES
#: Seconds a batch write may take per item beyond the call timeout (embedding it).
BATCH_ITEM_S = 0.25


def same(value: Any) -> Any:
    return value


def snapshot_of(value: Any) -> MemorySnapshot:
    assert isinstance(value, MemorySnapshot)
    return value


def _op_id(op_id: str | None) -> str:
    return new_id() if op_id is None else check.op_id(op_id)


def search(view: ClientView, owners: str | Iterable[str], query: str, limit: int,
           min_score: float, filter: Mapping[str, Any] | None = None
           ) -> Call[list[SearchHit]]:
    """A hybrid search over ``owners``, for any VectorIndex replica."""
    who = check.owner_ids(owners)
    text = check.content(query, view.max_content_bytes, what="query")
    n = check.limit(limit)
    floor = check.unit_interval(min_score, "min_score")
    where = check_l2.metadata_filter(filter)
    args: tuple[Any, ...] = (list(who), text, n, floor)
    return Call("index", "search", args if where is None else (*args, where), same, "search")


def _owner(owner: str, method: str, args: tuple[Any, ...], then: Callable[[Any], T],
           extra_timeout_s: float = 0.0) -> Call[T]:
    return Call("owner", method, (owner, *args), then, f"{method} for {owner!r}",
                owner=owner, extra_timeout_s=extra_timeout_s)


# -- L1 ----------------------------------------------------------------------------------


def reads(view: ClientView, owner: str, conn: Connection, min_version: int | None,
          timeout_s: float | None, min_epoch: str | None = None
          ) -> Iterator[Call[MemorySnapshot | None]]:
    """The reads to try in order until one gives the snapshot; the last always does.
    Made one at a time: the first usually answers.

    1. the fast read, from the actor's memory, as cheap as a Ray call without
       argument: an unchanged snapshot held here is confirmed, not re-sent;
    2. the full read (loads the owner, waits for ``min_version``, counted in
       ``min_epoch`` when given).
    """
    check.min_version(min_version)
    check.min_epoch(min_epoch, min_version)
    wait = check.timeout(view.read_timeout_s if timeout_s is None else timeout_s)
    token, version = conn.known(owner)
    remember = functools.partial(conn.remember, owner)
    if min_epoch is None:  # the fast read's question has no room for an epoch
        yield Call("owner", "read", (), remember, f"read for {owner!r}", owner=owner,
                   task_name=read_task_name(owner, min_version, token, version))
    yield _owner(owner, "snapshot", (min_version, wait, min_epoch), remember, wait)


def apply(view: ClientView, owner: str, ops: Sequence[L1Op], op_id: str | None,
          then: Callable[[Any], T]) -> Call[T]:
    checked = check_l1.ops(ops, view.max_content_bytes, view.limits)
    return _owner(owner, "apply", (checked, _op_id(op_id)), then)


def add(view: ClientView, owner: str, kind: type[AddRule] | type[AddFact], content: str,
        source: str, op_id: str | None) -> Call[Any]:
    op = kind(check.content(content, view.max_content_bytes), source, review_updates=True)
    return apply(view, owner, [op], op_id, lambda snap: added(snap, op))


# -- L2 ----------------------------------------------------------------------------------


def store(view: ClientView, owner: str, content: str, metadata: Mapping[str, Any] | None,
          op_id: str | None) -> Call[StoreResult]:
    text = check.content(content, view.max_content_bytes)
    meta = check.metadata(metadata, view.limits)
    return _owner(owner, "store", (text, meta, _op_id(op_id)), same)


def get(owner: str, memory_id: str) -> Call[VectorMemory]:
    check.ids([memory_id], "memory id")
    return Call("index", "get", (owner, memory_id), same, f"get for {owner!r}")


def delete(owner: str, memory_id: str) -> Call[bool]:
    check.ids([memory_id], "memory id")
    return _owner(owner, "delete", (memory_id,), same)


def list_memories(owner: str, limit: int, offset: int,
                  filter: Mapping[str, Any] | None = None) -> Call[list[VectorMemory]]:
    args: tuple[Any, ...] = (owner, check.limit(limit), check.offset(offset))
    where = check_l2.metadata_filter(filter)
    return Call("index", "list", args if where is None else (*args, where), same,
                f"list for {owner!r}")


def store_many(view: ClientView, owner: str, items: Sequence[Any], op_id: str | None
               ) -> Call[list[StoreResult]]:
    """A batch for the owner's actor, checked here; it may take ``BATCH_ITEM_S`` per
    item longer than a call (the VectorIndex embeds it)."""
    batch = [{"content": t, "metadata": m}
             for t, m in check_l2.batch(items, view.max_content_bytes, view.limits)]
    return _owner(owner, "store_many", (batch, _op_id(op_id)), same,
                  BATCH_ITEM_S * len(batch))


def update(view: ClientView, owner: str, memory_id: str, content: str,
           metadata: Mapping[str, Any] | None, op_id: str | None) -> Call[VectorMemory]:
    check.ids([memory_id], "memory id")
    text = check.content(content, view.max_content_bytes)
    meta = None if metadata is None else check.metadata(metadata, view.limits)
    return _owner(owner, "update", (memory_id, text, meta, _op_id(op_id)), same)


def supersede_memory(view: ClientView, owner: str, memory_id: str, content: str,
                     metadata: Mapping[str, Any] | None, by: str | None, reason: str | None,
                     op_id: str | None) -> Call[VectorMemory]:
    check.ids([memory_id], "memory id")
    text = check.content(content, view.max_content_bytes)
    meta = None if metadata is None else check.metadata(metadata, view.limits)
    who = None if by is None else check.decider(by)
    args = (memory_id, text, meta, who, check_l2.reason(reason), _op_id(op_id))
    return _owner(owner, "supersede_memory", args, same)


def memory_history(owner: str, memory_id: str) -> Call[list[MemoryVersion]]:
    check.ids([memory_id], "memory id")
    return Call("index", "memory_history", (owner, memory_id), same,
                f"memory_history for {owner!r}")


# -- extraction, the pending queue and the L3 chat window -----------------------------------


def append(view: ClientView, owner: str, conversation: str, messages: Sequence[ChatMessage],
           op_id: str | None) -> Call[ChatAppend]:
    conv = check.conversation_id(conversation)
    msgs = [check.message(m, view.max_content_bytes)
            for m in check.messages(messages, max_count=MAX_MESSAGES, empty_ok=False)]
    return _owner(owner, "append_messages", (conv, msgs, _op_id(op_id)), same)


def end(owner: str, conversation: str) -> Call[ExtractionReport | None]:
    return _owner(owner, "end_conversation", (check.conversation_id(conversation),), same)


def extract(owner: str, messages: Sequence[ChatMessage]) -> Call[ExtractionReport]:
    msgs = check.messages(messages, max_count=MAX_MESSAGES)
    return _owner(owner, "extract", (msgs,), same)


def flush(owner: str) -> Call[int]:
    return _owner(owner, "flush_extractions", (), same)


def confirm(view: ClientView, owner: str, pending_id: str, by: str,
            edited_content: str | None) -> Call[HitlDecision]:
    check.ids([pending_id], "pending item id")
    text = None if edited_content is None else check.content(
        edited_content, view.max_content_bytes, "edited content")
    return _owner(owner, "confirm", (pending_id, check.decider(by), text), same)


def reject(owner: str, pending_id: str, by: str) -> Call[HitlDecision]:
    check.ids([pending_id], "pending item id")
    return _owner(owner, "reject", (pending_id, check.decider(by)), same)


def audit(owner: str, limit: int) -> Call[list[AuditEntry]]:
    return _owner(owner, "audit", (check.limit(limit),), same)


# -- the owner as a whole -------------------------------------------------------------------


def forget(owner: str, by: str, op_id: str | None) -> Call[Tombstone]:
    return _owner(owner, "forget", (check.decider(by), _op_id(op_id)), same)


def export(owner: str) -> Call[list[str]]:
    return _owner(owner, "export", (), same)


def import_document(owner: str, lines: Iterable[str]) -> Call[dict[str, int]]:
    from ..engine.portability import parse

    document = [line if isinstance(line, str) else line.decode("utf-8") for line in lines]
    if parse(document).owner != owner:  # checked here too: a bad document stays here
        from ..errors import InvalidImport

        raise InvalidImport(f"the document is not of owner {owner!r}")
    return _owner(owner, "import_document", (document,), same)
