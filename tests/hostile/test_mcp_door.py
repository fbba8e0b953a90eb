"""Hostile input through the MCP tools, driven by the official ``mcp`` client against the
server in this process (memory backend): a tool error naming a DreamMemoryError subclass
(or the SDK's refusal of an argument of the wrong JSON type, before any tool code runs)
or success; never a traceback, nothing written on an error."""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import assume, given
from mcp import Client

from dream_memory_actor import errors
from dream_memory_actor.config import MemorySettings
from dream_memory_actor.mcp import LocalBackend, build_server
from dream_memory_actor.models import MemoryPendingItem
from dream_memory_actor.storage.ops import AddPending
from dream_memory_actor.validation import OWNER_ID_PATTERN

from . import inputs as gen
from .ops import FIRST, READS, Op, ops, with_edge_cases

EXAMPLES = 1100
TOOLS = frozenset({"store", "search", "snapshot", "confirm", "reject"})


class Door:
    """The server and a connected client, kept open in one task of a loop thread (the
    client's context must be entered and left by the same task)."""

    def __init__(self) -> None:
        self.loop = gen.LoopThread()
        self.backend: LocalBackend = self.loop.run(
            LocalBackend.open(MemorySettings(backend="memory", **gen.LIMITS)))
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._task = asyncio.run_coroutine_threadsafe(self._serve(), self.loop.loop)
        assert self._ready.wait(60), "the MCP client did not connect"

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        async with Client(build_server(self.backend)) as client:
            self.client = client
            self._ready.set()
            await self._stop.wait()

    def close(self) -> None:
        assert self._stop is not None
        self.loop.loop.call_soon_threadsafe(self._stop.set)
        self._task.result(30)
        self.loop.run(self.backend.close())
        self.loop.close()


@pytest.fixture(scope="module")
def door() -> Iterator[Door]:
    d = Door()
    try:
        yield d
    finally:
        d.close()


async def state(backend: LocalBackend, owner: str) -> tuple[Any, ...]:
    engine = backend.engine
    snap = gen.settled(await engine.snapshot(owner))
    mems = await engine.list(owner, limit=1000)
    return (snap.version, snap.rules, snap.facts, dict(snap.status), snap.pending,
            [(m.id, m.content, m.metadata) for m in mems])


async def _first_pending(backend: LocalBackend) -> str:
    snap = await backend.engine.snapshot("alice")
    if not snap.pending:  # something to confirm or reject
        item = MemoryPendingItem(kind="fact", content=f"queued at {snap.version}",
                                 confidence=0.6)
        snap = await backend.engine.apply("alice", [AddPending(item)])
    return snap.pending[0].id


async def arguments(backend: LocalBackend, op: Op) -> tuple[str, dict[str, Any]]:
    o, a = op.owner, op.args
    if op.name == "store":
        return "store", {"owner": o, "content": a[0], "metadata": a[1]}
    if op.name == "search":
        return "search", {"owner": o, "query": a[0], "limit": a[1]}
    if op.name == "snapshot":
        return "read_snapshot", {"owner": o}
    pid = await _first_pending(backend) if a[0] == FIRST else a[0]
    if op.name == "reject":
        return "reject_pending", {"owner": o, "pending_id": pid}
    return "confirm_pending", {"owner": o, "pending_id": pid, "edited_content": a[2]}


def _json_ok(args: dict[str, Any]) -> bool:
    try:
        json.dumps(args, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return False
    return True


def answer(result: Any) -> str:
    """``ok``, the DreamMemoryError subclass named by a tool error, or ``schema``."""
    if not result.is_error:
        return "ok"
    text: str = result.content[0].text
    assert "Traceback" not in text and 'File "' not in text, text
    head = text.removeprefix("Error executing tool ").split(": ", 1)[1]
    if re.match(r"\d+ validation errors? for \w+Arguments$", head.splitlines()[0]):
        return "schema"  # the SDK refused an argument of the wrong JSON type
    name = head.split(":", 1)[0]
    assert isinstance(getattr(errors, name, None), type), text
    assert issubclass(getattr(errors, name), errors.DreamMemoryError), text
    return name


async def attempt(door: Door, op: Op) -> str:
    owners = ["alice"]
    if isinstance(op.owner, str) and OWNER_ID_PATTERN.fullmatch(op.owner):
        owners.append(op.owner)
    tool, args = await arguments(door.backend, op)
    before = [await state(door.backend, o) for o in owners]
    try:
        result = await door.client.call_tool(tool, args)
    except UnicodeEncodeError:  # the client cannot encode a lone surrogate in a key: not sent
        return "unsendable"
    name = answer(result)
    if name != "ok" and op.name not in READS:
        assert [await state(door.backend, o) for o in owners] == before, (op, name)
    return name


@gen.door_settings(EXAMPLES)
@with_edge_cases(TOOLS)
@given(ops(TOOLS))
def test_mcp_door(door: Door, op: Op) -> None:
    # JSON carries no bytes, NaN or arbitrary objects, and a JSON encoder no 2000-deep
    # nesting: such values cannot reach the server
    assume(_json_ok({"a": op.args, "o": op.owner}))
    name = door.loop.run(attempt(door, op))
    assume(name != "unsendable")
    gen.TALLY.add("mcp", name)
