"""What a generated call does: one operation with hostile arguments, the same for every
door (each door maps it onto its own API)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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


def _op(name: str, *args: st.SearchStrategy[Any]) -> st.SearchStrategy[Op]:
    return st.tuples(gen.owner(), *args).map(lambda t: Op(name, t[0], tuple(t[1:])))


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


def ops() -> st.SearchStrategy[Op]:
    return st.one_of(
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
    )


#: Operations that never write: an error from them has nothing to undo.
READS = {"search", "get", "list", "snapshot"}
