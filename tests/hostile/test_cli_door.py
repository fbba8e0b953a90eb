"""Hostile input through the ``dream-memory`` command line, in process (``cli.main``), on
one memory-backend engine shared by the calls (so a read-back sees what a call wrote):
exit 0, or exit 1 with one ``error: ...`` line (2 with argparse's usage for a malformed
command line); never a traceback, nothing written on an error."""

from __future__ import annotations

import asyncio
import contextlib
import io
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given

from dream_memory_actor import cli
from dream_memory_actor.config import MemorySettings
from dream_memory_actor.engine import MemoryEngine
from dream_memory_actor.models import MemoryPendingItem
from dream_memory_actor.storage.ops import AddPending
from dream_memory_actor.validation import OWNER_ID_PATTERN

from . import inputs as gen
from .ops import FIRST, READS, Op, ops, with_edge_cases

EXAMPLES = 1100
COMMANDS = frozenset({"search", "snapshot", "confirm", "reject", "list"})


@pytest.fixture(scope="module")
def engine() -> Iterator[MemoryEngine]:
    shared = asyncio.run(MemoryEngine.open(MemorySettings(backend="memory", **gen.LIMITS)))

    async def opened(cls: Any, settings: Any = None, **_: Any) -> MemoryEngine:
        return shared

    async def kept() -> None:  # each command closes its engine; the shared one stays open
        pass

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DREAM_MEMORY_BACKEND", "memory")
        mp.setattr(MemoryEngine, "open", classmethod(opened))
        mp.setattr(shared, "close", kept)
        yield shared


async def state(engine: MemoryEngine, owner: str) -> tuple[Any, ...]:
    snap = gen.settled(await engine.snapshot(owner))
    mems = await engine.list(owner, limit=1000)
    return (snap.version, snap.rules, snap.facts, dict(snap.status), snap.pending,
            [(m.id, m.content, m.metadata) for m in mems])


async def first_pending(engine: MemoryEngine) -> str:
    snap = await engine.snapshot("alice")
    if not snap.pending:
        item = MemoryPendingItem(kind="status", key="mood", value=f"v{snap.version}",
                                 confidence=0.6)
        snap = await engine.apply("alice", [AddPending(item)])
    return snap.pending[0].id


def _arg(value: Any) -> str:
    return value if isinstance(value, str) else str(value)


def argv(engine: MemoryEngine, op: Op) -> list[str]:
    o, a = _arg(op.owner), op.args
    if op.name == "search":
        return ["search", "--owner", o, _arg(a[0]), "--limit", _arg(a[1])]
    if op.name == "snapshot":
        return ["snapshot", "--owner", o, "--json"]
    if op.name == "list":
        return ["pending", "list", "--owner", o]
    pid = asyncio.run(first_pending(engine)) if a[0] == FIRST else _arg(a[0])
    if op.name == "reject":
        return ["pending", "reject", "--owner", o, "--id", pid, "--by", "ann"]
    edit = [] if a[2] is None else ["--edit", a[2]]
    return ["pending", "confirm", "--owner", o, "--id", pid, "--by", _arg(a[1]), *edit]


def run(args: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            rc = cli.main(args)
        except SystemExit as exc:  # argparse: a malformed command line
            rc = int(exc.code or 0)
    return rc, err.getvalue()


@gen.door_settings(EXAMPLES)
@with_edge_cases(COMMANDS)
@given(ops(COMMANDS))
def test_cli_door(engine: MemoryEngine, op: Op) -> None:
    owners = ["alice"]
    if isinstance(op.owner, str) and OWNER_ID_PATTERN.fullmatch(op.owner):
        owners.append(op.owner)
    args = argv(engine, op)
    before = [asyncio.run(state(engine, o)) for o in owners]
    rc, err = run(args)
    assert "Traceback" not in err, err
    if rc == 0:
        name = "ok"
    else:
        lines = err.strip().splitlines()
        if rc == 2:  # argparse's usage, then its one error line
            assert lines[-1].startswith("dream-memory") and ": error: " in lines[-1], err
            name = "usage (exit 2)"
        else:
            assert rc == 1 and len(lines) == 1 and lines[0].startswith("error: "), (rc, err)
            name = "error line (exit 1)"
        if op.name not in READS:
            assert [asyncio.run(state(engine, o)) for o in owners] == before, (args, err)
    gen.TALLY.add("cli", name)
