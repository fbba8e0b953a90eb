"""Hostile input through a Ray owner handle (``MemorySystem.owner``), on a memory-backend
system: a typed error or success, and nothing written on an error."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given

from dream_memory_actor.config import MemorySettings
from dream_memory_actor.errors import ConfigurationError
from dream_memory_actor.runtime import MemorySystem, OwnerHandle
from dream_memory_actor.runtime import client as runtime_client
from dream_memory_actor.storage.ops import AddPending
from dream_memory_actor.validation import OWNER_ID_PATTERN

from . import inputs as gen
from .ops import FIRST, READS, Op, ops, with_edge_cases

EXAMPLES = 1100


def _settings() -> MemorySettings:
    return MemorySettings(backend="memory", placement="sharded", shards=1, **gen.LIMITS)


@pytest.fixture(scope="module")
def system(ray_runtime: None) -> Iterator[MemorySystem]:
    s = MemorySystem.start(_settings(), name="hostile-input", call_timeout_s=60.0)
    try:
        yield s
    finally:
        s.shutdown(grace_period_s=1)


def state(h: OwnerHandle) -> tuple[Any, ...]:
    snap = gen.settled(h.snapshot())
    mems = h.list(limit=1000)
    return (snap.version, snap.rules, snap.facts, dict(snap.status), snap.pending,
            [(m.id, m.content, m.metadata) for m in mems])


def call(system: MemorySystem, op: Op) -> Any:
    h = system.owner(op.owner)
    a = op.args
    if op.name == "store":
        return h.store(a[0], a[1])
    if op.name == "search":
        return h.search(a[0], a[1])
    if op.name == "set_status":
        return h.set_status(a[0], a[1], a[2])
    if op.name == "delete_status":
        return h.delete_status(a[0])
    if op.name == "add_rule":
        return h.add_rule(a[0], a[1])
    if op.name == "add_pending":
        return h.apply([AddPending(a[0])])
    if op.name == "get":
        return h.get(a[0])
    if op.name == "list":
        return h.list(a[0], a[1])
    if op.name in ("confirm", "reject"):
        pid = a[0]
        if pid == FIRST:
            pending = system.owner("alice").snapshot().pending
            pid = pending[0].id if pending else "none"
        return h.reject(pid, "ann") if op.name == "reject" else h.confirm(pid, a[1], a[2])
    assert op.name == "snapshot"
    return h.snapshot()


@gen.door_settings(EXAMPLES)
@with_edge_cases()
@given(ops())
def test_ray_handle_door(system: MemorySystem, op: Op) -> None:
    owners = ["alice"]
    if isinstance(op.owner, str) and OWNER_ID_PATTERN.fullmatch(op.owner):
        owners.append(op.owner)
    before = [state(system.owner(o)) for o in owners]
    try:
        call(system, op)
    except Exception as exc:  # the point: which errors come out
        name = gen.outcome(exc)
        if op.name not in READS:
            assert [state(system.owner(o)) for o in owners] == before, (op, name)
    else:
        name = "ok"
    gen.TALLY.add("ray handle", name)


def test_a_second_start_of_a_name_is_typed(system: MemorySystem,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigurationError, match="already running"):
        MemorySystem.start(_settings(), name="hostile-input")
    # the race: the name was free when looked up, taken when the registry is created
    monkeypatch.setattr(runtime_client, "_find_registry", lambda name: None)
    with pytest.raises(ConfigurationError, match="already running"):
        MemorySystem.start(_settings(), name="hostile-input")
    assert system.owner("alice").snapshot().owner == "alice"  # the running one is untouched


def test_concurrent_starts_of_one_name(ray_runtime: None) -> None:
    results: list[Any] = []

    def start() -> None:
        try:
            results.append(MemorySystem.start(_settings(), name="hostile-race"))
        except Exception as exc:  # collected and checked below
            results.append(exc)

    threads = [threading.Thread(target=start) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    started = [r for r in results if isinstance(r, MemorySystem)]
    try:
        assert len(results) == 2 and len(started) == 1, results
        [error] = [r for r in results if not isinstance(r, MemorySystem)]
        assert isinstance(error, ConfigurationError), repr(error)
    finally:
        for s in started:
            s.shutdown(grace_period_s=1)
