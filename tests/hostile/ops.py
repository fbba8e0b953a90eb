"""What a generated call does: one operation with hostile arguments, the same for every
door (each door maps it onto its own API)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hypothesis import example
from hypothesis import strategies as st

from dream_memory_actor.models import MemoryPendingItem

from . import inputs as gen

#: The pending id meaning "the owner's first pending item", resolved by the door.
FIRST = "<first pending item>"


@dataclass(frozen=True)
class Op:
    name: str
    owner: Any
    args: tuple[Any, ...]


class _Named:
    """A strategy of one operation, with its name (so a door can choose operations)."""

    def __init__(self, name: str, strategy: st.SearchStrategy[Op]) -> None:
        self.name, self.strategy = name, strategy


def _op(name: str, *args: st.SearchStrategy[Any]) -> _Named:
    return _Named(name, st.tuples(gen.owner(), *args).map(
        lambda t: Op(name, t[0], tuple(t[1:]))))


def pending_item() -> st.SearchStrategy[Any]:
    """A pending item with hostile text (built only from what the model accepts)."""
    def build(kind: str, body: Any, side: Any, source: Any) -> Any:
        fields: dict[str, Any] = {"kind": kind, "confidence": 0.6}
        if kind == "status":
            fields.update(key="mood", value=body)
        else:
            fields["content"] = body
        if isinstance(side, str):
            fields["evidence"] = side
        if isinstance(source, str):
            fields["source"] = source
        try:
            return MemoryPendingItem(**fields)
        except ValueError:  # the model refuses it: send the raw fields instead
            return fields

    return st.builds(build, st.sampled_from(["rule", "fact", "status", "memory"]), gen.text(),
                     st.one_of(st.none(), gen.text()), gen.text())


def ops(names: frozenset[str] | None = None) -> st.SearchStrategy[Op]:
    """Generated operations (only those in ``names`` if given)."""
    every = [
        _op("store", gen.text_or_odd(), gen.metadata()),
        _op("search", gen.text_or_odd(), gen.number()),
        _op("set_status", gen.status_key(), gen.text_or_odd(), gen.ttl()),
        _op("delete_status", gen.status_key()),
        _op("add_rule", gen.text_or_odd(), gen.text_or_odd()),
        _op("add_pending", pending_item()),
        _op("get", gen.text_or_odd()),
        _op("list", gen.number(), gen.number()),
        _op("confirm", st.one_of(st.just(FIRST), st.just(FIRST), gen.text_or_odd()),
            st.one_of(st.just("ann"), gen.text_or_odd()), st.one_of(st.none(), gen.text())),
        _op("snapshot"),
        _op("reject", st.one_of(st.just(FIRST), gen.text_or_odd())),
    ]
    return st.one_of([n.strategy for n in every if names is None or n.name in names])


#: Operations that never write: an error from them has nothing to undo.
READS = {"search", "get", "list", "snapshot"}


def _pending_with(**fields: Any) -> MemoryPendingItem:
    return MemoryPendingItem(**{"kind": "fact", "content": "uses helm", "confidence": 0.6,
                                **fields})


def edge_cases() -> list[Op]:
    """Each limit and each hostile text once, through every operation that takes it:
    run as explicit examples before the generated ones."""
    cases = [Op("store", "alice", ("note", m)) for m in gen.EDGE_METADATA]
    for t in gen.EDGE_TEXT:
        cases += [Op("store", "alice", (t, None)), Op("search", "alice", (t, 5)),
                  Op("set_status", "alice", ("k0", t, None)),
                  Op("add_rule", "alice", (t, "user")), Op("add_rule", "alice", ("r", t)),
                  Op("add_pending", "alice", (_pending_with(evidence=t),)),
                  Op("add_pending", "alice", (_pending_with(source=t),)),
                  Op("add_pending", "alice", (_pending_with(content=t),)),
                  Op("get", "alice", (t,)), Op("snapshot", t, ()),
                  Op("confirm", "alice", (FIRST, "ann", t)),
                  Op("confirm", "alice", (FIRST, t, None)), Op("reject", "alice", (t,))]
    cases += [Op("set_status", "alice", (f"k{i}", "v", None))
              for i in range(gen.STATUS_KEYS + 2)]
    for n in (0, -1, 1000, 1001, 2**31, 2**63, 2**64, None, "3", 1.5, True):
        cases += [Op("list", "alice", (n, 0)), Op("list", "alice", (10, n)),
                  Op("search", "alice", ("note", n))]
    cases += [Op("get", "alice", (v,)) for v in (None, 7, b"id", ["x"], {"a": 1})]
    cases += [Op(name, o, args) for o in (None, 7, "", "a" * 129, "{x}", "a b")
              for name, args in (("store", ("note", None)), ("snapshot", ()))]
    return cases


def with_edge_cases(names: frozenset[str] | None = None) -> Any:
    """A decorator adding :func:`edge_cases` (those in ``names``) as explicit examples."""
    def add(test: Any) -> Any:
        for case in edge_cases():
            if names is None or case.name in names:
                test = example(op=case)(test)
        return test
    return add
