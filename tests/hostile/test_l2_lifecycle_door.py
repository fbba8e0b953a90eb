"""Hostile input to the L2 update, supersede, batch and filter doors of ``MemoryEngine``
(memory backend): a typed error or success, and nothing written on an error."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dream_memory_actor.config import MemorySettings
from dream_memory_actor.engine import MemoryEngine

from . import inputs as gen

EXAMPLES = 300
#: The id of alice's first memory, put in by the fixture (a valid target).
LIVE = "<alice's memory>"


@pytest.fixture(scope="module")
def door() -> Iterator[tuple[gen.LoopThread, MemoryEngine, str]]:
    loop = gen.LoopThread()
    engine = loop.run(MemoryEngine.open(MemorySettings(backend="memory", **gen.LIMITS)))
    mid = loop.run(engine.store("alice", "the memory under attack")).memory.id
    try:
        yield loop, engine, mid
    finally:
        loop.run(engine.close())
        loop.close()


def _filter() -> st.SearchStrategy[Any]:
    scalar = st.one_of(gen.text_or_odd(), gen.number(), st.booleans(), st.none())
    return st.one_of(
        gen.odd(),
        gen.metadata(),
        st.dictionaries(
            st.one_of(gen.text(), st.integers(), st.none()),
            st.one_of(scalar, gen.metadata()),
            max_size=20,
        ),
    )


def _items() -> st.SearchStrategy[Any]:
    item = st.one_of(
        gen.text_or_odd(),
        st.fixed_dictionaries(
            {"content": gen.text_or_odd()},
            optional={"metadata": gen.metadata(), "other": gen.odd()},
        ),
    )
    return st.one_of(gen.odd(), st.lists(item, max_size=8))


def _target() -> st.SearchStrategy[Any]:
    return st.one_of(st.just(LIVE), gen.text_or_odd())


OPS = st.one_of(
    st.tuples(st.just("update"), gen.owner(), _target(), gen.text_or_odd(), gen.metadata()),
    st.tuples(
        st.just("supersede"),
        gen.owner(),
        _target(),
        gen.text_or_odd(),
        gen.text_or_odd(),
        gen.text_or_odd(),
    ),
    st.tuples(st.just("store_many"), gen.owner(), _items()),
    st.tuples(st.just("search"), gen.owner(), _filter()),
    st.tuples(st.just("list"), gen.owner(), _filter()),
    st.tuples(st.just("history"), gen.owner(), _target()),
)


async def _state(engine: MemoryEngine) -> Any:
    return [(m.id, m.content, m.metadata) for m in await engine.list("alice", limit=1000)]


async def _attempt(engine: MemoryEngine, mid: str, op: tuple[Any, ...]) -> str:
    name, owner, *args = op
    args = [mid if a == LIVE else a for a in args]
    before = await _state(engine)
    try:
        if name == "update":
            await engine.update(owner, args[0], args[1], metadata=args[2])
        elif name == "supersede":
            await engine.supersede_memory(owner, args[0], args[1], by=args[2], reason=args[3])
        elif name == "store_many":
            await engine.store_many(owner, args[0])
        elif name == "search":
            await engine.search(owner, "memory", filter=args[0])
        elif name == "list":
            await engine.list(owner, filter=args[0])
        else:
            await engine.memory_history(owner, args[0])
    except Exception as exc:  # the point: which errors come out
        got = gen.outcome(exc)
        assert await _state(engine) == before, (op, got)
        return got
    return "ok"


@gen.door_settings(EXAMPLES)
@given(OPS)
def test_l2_lifecycle_door(
    door: tuple[gen.LoopThread, MemoryEngine, str], op: tuple[Any, ...]
) -> None:
    loop, engine, mid = door
    if op[0] in ("update", "supersede") and op[1] == "alice" and op[2] == LIVE:
        # a successful supersession would retire the target: keep it for later examples
        mid = loop.run(engine.store("alice", f"a fresh target {len(gen.TALLY.doors)}")).memory.id
    gen.TALLY.add("engine-l2", loop.run(_attempt(engine, mid, op)))
