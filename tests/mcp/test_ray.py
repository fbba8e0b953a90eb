"""The MCP tools over the Ray runtime (``RayBackend``), in-process MCP client."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from mcp import Client

from dream_memory_actor import validation as check
from dream_memory_actor.engine import operations as ops
from dream_memory_actor.engine.operations import Operation
from dream_memory_actor.mcp import RayBackend, build_server
from dream_memory_actor.models import MemoryPendingItem
from dream_memory_actor.runtime import MemorySystem
from dream_memory_actor.storage.ops import AddFact, AddPending
from dream_memory_actor.validation import l1 as check_l1
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
    """A call through the Ray door is checked once in this process, at the door: the
    described operations, the L1 writes, the searches and the supersessions are sent as
    the door checked them, owner id included (the store checks again in its actor, as
    the authority)."""
    backend = RayBackend(MemorySystem.connect("test-mcp"))
    s = backend.settings
    fact = check_l1.ops([AddFact("carol works on the payments team", "user")],
                        s.max_content_bytes, s.limits)  # the door's check
    checked: list[str] = []

    def counting(name: str, rule: Any) -> Any:
        def counted(*args: Any, **kwargs: Any) -> Any:
            checked.append(name)
            return rule(*args, **kwargs)
        return counted

    monkeypatch.setattr(Operation, "check", counting("operation", Operation.check))
    monkeypatch.setattr(check_l1, "ops", counting("L1 operations", check_l1.ops))
    monkeypatch.setattr(check, "owner_ids", counting("owners", check.owner_ids))
    monkeypatch.setattr(check, "owner_id", counting("owner", check.owner_id))
    stored = await backend.call(ops.store, "carol", "deploys go out on Thursdays")
    got = await backend.call(ops.get, "carol", stored.memory.id)
    assert got.content == "deploys go out on Thursdays"
    assert checked == ["operation", "operation"]  # one each, at the door
    snap = await backend.apply("carol", fact)
    assert [f.content for f in snap.facts] == ["carol works on the payments team"]
    hits = await backend.search(["carol"], "Thursdays deploys", 5)
    assert hits[0].memory.id == stored.memory.id
    new_fact = await backend.supersede("carol", snap.facts[0].id,
                                       "carol works on the billing team", "carol", None)
    assert new_fact.content == "carol works on the billing team"
    new_memory = await backend.supersede("carol", stored.memory.id,
                                         "deploys go out on Wednesdays", "carol", "moved")
    assert new_memory.content == "deploys go out on Wednesdays"
    assert checked == ["operation", "operation"]
    await backend.close()
