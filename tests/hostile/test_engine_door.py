"""Hostile input through ``MemoryEngine`` (memory backend): a typed error or success,
and nothing written on an error."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given

from dream_memory_actor.config import MemorySettings
from dream_memory_actor.engine import MemoryEngine
from dream_memory_actor.storage.ops import AddPending, AddRule, DeleteStatus, SetStatus
from dream_memory_actor.validation import OWNER_ID_PATTERN

from . import inputs as gen
from .ops import FIRST, READS, Op, ops, with_edge_cases

EXAMPLES = 1200


@pytest.fixture(scope="module")
def door() -> Iterator[tuple[gen.LoopThread, MemoryEngine]]:
    loop = gen.LoopThread()
    engine = loop.run(MemoryEngine.open(MemorySettings(backend="memory", **gen.LIMITS)))
    try:
        yield loop, engine
    finally:
        loop.run(engine.close())
        loop.close()


async def state(engine: MemoryEngine, owner: str) -> tuple[Any, ...]:
    snap = gen.settled(await engine.snapshot(owner))
    mems = await engine.list(owner, limit=1000)
    return (snap.version, snap.rules, snap.facts, dict(snap.status), snap.pending,
            [(m.id, m.content, m.metadata) for m in mems], await engine.vector.count(owner))


async def call(engine: MemoryEngine, op: Op) -> Any:
    o, a = op.owner, op.args
    if op.name == "store":
        return await engine.store(o, a[0], metadata=a[1])
    if op.name == "search":
        return await engine.search(o, a[0], limit=a[1])
    if op.name == "set_status":
        return await engine.apply(o, [SetStatus(a[0], a[1], a[2])])
    if op.name == "delete_status":
        return await engine.apply(o, [DeleteStatus(a[0])])
    if op.name == "add_rule":
        return await engine.apply(o, [AddRule(a[0], a[1])])
    if op.name == "add_pending":
        return await engine.apply(o, [AddPending(a[0])])
    if op.name == "get":
        return await engine.get(o, a[0])
    if op.name == "list":
        return await engine.list(o, limit=a[0], offset=a[1])
    if op.name in ("confirm", "reject"):
        pid = a[0]
        if pid == FIRST:
            pending = (await engine.snapshot("alice")).pending
            pid = pending[0].id if pending else "none"
        if op.name == "reject":
            return await engine.decide(o, pid, "rejected", "ann")
        return await engine.decide(o, pid, "confirmed", a[1], edited=a[2])
    assert op.name == "snapshot"
    return await engine.snapshot(o)


def watched(op: Op) -> list[str]:
    owners = ["alice"]
    if isinstance(op.owner, str) and OWNER_ID_PATTERN.fullmatch(op.owner):
        owners.append(op.owner)
    return owners


async def attempt(engine: MemoryEngine, op: Op) -> str:
    owners = watched(op)
    before = [await state(engine, o) for o in owners]
    try:
        await call(engine, op)
    except Exception as exc:  # the point: which errors come out
        name = gen.outcome(exc)
        if op.name not in READS:
            assert [await state(engine, o) for o in owners] == before, (op, name)
        return name
    return "ok"


@gen.door_settings(EXAMPLES)
@with_edge_cases()
@given(ops())
def test_engine_door(door: tuple[gen.LoopThread, MemoryEngine], op: Op) -> None:
    loop, engine = door
    gen.TALLY.add("engine", loop.run(attempt(engine, op)))

