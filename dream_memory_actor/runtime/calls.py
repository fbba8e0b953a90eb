"""The calls an owner handle makes, each built once and checked before it is sent.

A :class:`~.connection.Call` names the actor kind, the method and the arguments;
building one runs the arguments' rules, so a bad call raises here and never leaves
the process. Writes get an operation id (generated unless given), so a retried
write is applied once. :func:`of` builds the call of any described operation
(``engine.operations``); the reads, the search and the L1 writes are built here.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from .. import validation as check
from ..engine.operations import Operation, Scope
from ..models import MemorySnapshot, SearchHit, new_id
from ..storage.ops import AddFact, AddRule, L1Op, added
from ..validation import l1 as check_l1
from ..validation import l2 as check_l2
from .connection import Call, Connection
from .placement import read_task_name
from .spec import ClientView

T = TypeVar("T")

def same(value: Any) -> Any:
    return value


def search(view: ClientView, owners: str | Iterable[str], query: str, limit: int,
           min_score: float, filter: Mapping[str, Any] | None = None
           ) -> Call[list[SearchHit]]:
    """A hybrid search over ``owners``, for any VectorIndex replica."""
    return searched(list(check.owner_ids(owners)),
                    check.content(query, view.max_content_bytes, what="query"),
                    check.limit(limit), check.unit_interval(min_score, "min_score"),
                    check_l2.metadata_filter(filter))


def searched(owners: list[str], query: str, limit: int, min_score: float,
             where: Mapping[str, Any] | None) -> Call[list[SearchHit]]:
    """The search of arguments already checked (at a door, or by :func:`search`)."""
    args: tuple[Any, ...] = (owners, query, limit, min_score)
    return Call("index", "search", args if where is None else (*args, where), same, "search")


def of(op: Operation[Any, Any], view: ClientView, owner: str, args: Sequence[Any],
       kwargs: Mapping[str, Any]) -> Call[Any]:
    """The call of a described operation, its arguments checked by their rules."""
    return checked(op, owner, op.check(Scope(owner, view.max_content_bytes, view.limits),
                                       args, kwargs))


def checked(op: Operation[Any, Any], owner: str, values: tuple[Any, ...]) -> Call[Any]:
    """The call of a described operation whose arguments ``values`` were checked
    (``Operation.check``: an operation id made, for the call's retries)."""
    if op.serves == "index":
        return Call("index", op.name, (owner, *values), same, f"{op.name} for {owner!r}")
    return _owner(owner, op.name, values, same, op.extra_timeout_s(values))


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
    return applied(owner, checked, new_id() if op_id is None else check.op_id(op_id), then)


def applied(owner: str, ops: Sequence[L1Op], op_id: str, then: Callable[[Any], T]
            ) -> Call[T]:
    """The apply of operations already checked (at a door, or by :func:`apply`)."""
    return _owner(owner, "apply", (ops, op_id), then)


def add(view: ClientView, owner: str, kind: type[AddRule] | type[AddFact], content: str,
        source: str, op_id: str | None) -> Call[Any]:
    op = kind(content, source, review_updates=True)  # checked by apply; ``added`` normalizes
    return apply(view, owner, [op], op_id, lambda snap: added(snap, op))


