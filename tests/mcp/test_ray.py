"""The MCP tools over the Ray runtime (``RayBackend``), in-process MCP client."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from mcp import Client

from dream_memory_actor.engine import operations as ops
from dream_memory_actor.engine.operations import Operation, Scope
from dream_memory_actor.mcp import RayBackend, build_server
from dream_memory_actor.models import MemoryPendingItem
from dream_memory_actor.runtime import MemorySystem
from dream_memory_actor.storage.ops import AddPending
from tests.runtime.conftest import start_system

from .test_http import error_text, ok

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


@pytest.fixture(scope="module")
def ray_system(ray_runtime: None, pg_dsn: str) -> Iterator[MemorySystem]:
    system = start_system(pg_dsn, "sharded", "test-mcp")
    try:
        yield system
    finally:
        system.shutdown(grace_period_s=1)


async def test_tools_over_ray(ray_system: MemorySystem) -> None:
    backend = RayBackend(MemorySystem.connect("test-mcp"))
    item = MemoryPendingItem(kind="rule", content="Look at security first", confidence=0.6)
    await ray_system.owner("alice").apply_async([AddPending(item)])
    async with Client(build_server(backend)) as c:
        stored = ok(await c.call_tool("store", {"owner": "alice",
                                                "content": "went live on Kubernetes with helm"}))
        hits = ok(await c.call_tool("search", {"owner": "alice", "query": "Kubernetes helm"}))
        assert hits["hits"][0]["memory"]["id"] == stored["memory"]["id"]
        listed = ok(await c.call_tool("list_pending", {"owner": "alice"}))
        assert [p["id"] for p in listed["pending"]] == [item.id]
        done = ok(await c.call_tool("confirm_pending", {"owner": "alice", "pending_id": item.id}))
        assert done["applied"] and done["entry"]["by"] == "local"
        snap = ok(await c.call_tool("read_snapshot", {"owner": "alice"}))
        assert [r["content"] for r in snap["rules"]] == ["Look at security first"]
        text = error_text(await c.call_tool("reject_pending",
                                            {"owner": "alice", "pending_id": item.id}))
        assert "PendingItemDecided" in text
    await backend.close()


async def test_the_door_checks_a_call_once(ray_system: MemorySystem,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A call through the Ray door is checked by its rules once in this process, at the
    door; the handle sends what the door checked (the store checks again in its actor)."""
    checked: list[str] = []
    check = Operation.check

    def counted(op: Operation[Any, Any], scope: Scope, args: Any, kwargs: Any) -> Any:
        checked.append(op.name)
        return check(op, scope, args, kwargs)

    monkeypatch.setattr(Operation, "check", counted)
    backend = RayBackend(MemorySystem.connect("test-mcp"))
    stored = await backend.call(ops.store, "carol", "deploys go out on Thursdays")
    got = await backend.call(ops.get, "carol", stored.memory.id)
    assert got.content == "deploys go out on Thursdays"
    assert checked == ["store", "get"]
    await backend.close()
