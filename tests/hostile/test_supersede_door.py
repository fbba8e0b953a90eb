"""Hostile input to superseding and the history reads through ``MemoryEngine`` (memory
backend): a typed error or success, and nothing written on an error."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from dream_memory_actor.config import MemorySettings
from dream_memory_actor.engine import MemoryEngine
from dream_memory_actor.storage.ops import Supersede

from . import inputs as gen

EXAMPLES = 400
#: Ids the door resolves: alice's current rule, her superseded rule, bob's rule.
CURRENT, CLOSED, BOBS = "<current>", "<closed>", "<bob's>"


@pytest.fixture(scope="module")
def door() -> Iterator[tuple[gen.LoopThread, MemoryEngine, dict[str, str]]]:
    loop = gen.LoopThread()
    engine = loop.run(MemoryEngine.open(MemorySettings(backend="memory", **gen.LIMITS)))

    async def seed() -> dict[str, str]:
        old = await engine.structured.add_rule("alice", "Indent with spaces")
        await engine.supersede("alice", old.id, "Indent with tabs", by="ann")
        bob = await engine.structured.add_rule("bob", "Bob's rule")
        return {CLOSED: old.id, BOBS: bob.id}

    ids = loop.run(seed())
    try:
        yield loop, engine, ids
    finally:
        loop.run(engine.close())
        loop.close()


def item_id() -> st.SearchStrategy[Any]:
    return st.one_of(st.sampled_from([CURRENT, CLOSED, BOBS]), gen.text_or_odd())


async def state(engine: MemoryEngine) -> tuple[Any, ...]:
    out = []
    for owner in ("alice", "bob"):
        snap = gen.settled(await engine.snapshot(owner))
        out += [snap.version, snap.rules, snap.facts,
                (await engine.structured.past(owner))[0]]
    return tuple(out)


async def attempt(engine: MemoryEngine, ids: dict[str, str], name: str, args: tuple[Any, ...]
                  ) -> str:
    current = (await engine.snapshot("alice")).rules[0].id
    resolved = {**ids, CURRENT: current}
    args = tuple(resolved.get(a, a) if isinstance(a, str) else a for a in args)
    before = await state(engine)
    try:
        if name == "supersede":
            await engine.supersede("alice", args[0], args[1], by=args[2], reason=args[3])
        elif name == "supersede_as":  # an explicit id for the new item
            await engine.apply("alice", [Supersede(args[0], args[1], "ann", id=args[2])])
        elif name == "history":
            await engine.history("alice", args[0])
        else:
            await engine.snapshot("alice", as_of=args[0])
    except Exception as exc:  # the point: which errors come out
        outcome = gen.outcome(exc)
        assert await state(engine) == before, (name, args, outcome)
        return outcome
    if name.startswith("supersede"):  # undo, so the next example starts alike
        await engine.supersede("alice", (await engine.snapshot("alice")).rules[0].id,
                               f"Indent with tabs {datetime.now().timestamp()}", by="ann")
    return "ok"


CALLS = st.one_of(
    st.tuples(st.just("supersede"), st.tuples(item_id(), gen.text_or_odd(),
                                              st.one_of(st.just("ann"), gen.text_or_odd()),
                                              st.one_of(st.none(), gen.text_or_odd()))),
    st.tuples(st.just("supersede_as"), st.tuples(item_id(), gen.text(), item_id())),
    st.tuples(st.just("history"), st.tuples(item_id())),
    st.tuples(st.just("as_of"), st.tuples(st.one_of(
        gen.text_or_odd(), st.datetimes(), st.datetimes(timezones=st.just(timezone.utc))))),
)


@gen.door_settings(EXAMPLES)
@example(call=("supersede", (BOBS, "stolen", "ann", None)))
@example(call=("supersede", (CLOSED, "again", "ann", None)))
@example(call=("supersede_as", (CURRENT, "back", CLOSED)))
@example(call=("supersede_as", (CURRENT, "self", CURRENT)))
@example(call=("supersede", (CURRENT, "x" * 100_000, "ann", None)))
@example(call=("supersede", (CURRENT, "new", "ann", "r" * 100_000)))
@given(call=CALLS)
def test_supersede_door(door: tuple[gen.LoopThread, MemoryEngine, dict[str, str]],
                        call: tuple[str, tuple[Any, ...]]) -> None:
    loop, engine, ids = door
    gen.TALLY.add("engine supersede", loop.run(attempt(engine, ids, *call)))
