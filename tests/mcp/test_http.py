"""The MCP server over streamable HTTP, driven by the SDK's own client."""

from __future__ import annotations

from typing import Any

import pytest
from mcp.shared._httpx_utils import create_mcp_http_client

from dream_memory_actor.config import MemorySettings
from dream_memory_actor.mcp.server import build_server
from dream_memory_actor.models import MemoryPendingItem
from dream_memory_actor.storage.ops import AddPending

from .conftest import TOKEN_ADMIN, TOKEN_ALICE, HttpServer, free_port, serving

TOOLS = {"read_snapshot", "search", "store", "list_pending", "confirm_pending", "add_rule",
         "add_fact", "set_status", "delete_status", "remove_rule", "remove_fact",
         "delete_memory", "list_memories", "append_messages", "end_conversation", "audit",
         "reject_pending", "supersede", "history", "status_history", "update_memory",
         "store_many", "memory_history", "export_owner", "forget_owner", "consolidate",
         "undo_proposal"}


def ok(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    data: dict[str, Any] = result.structured_content
    return data


def error_text(result: Any) -> str:
    assert result.is_error
    text: str = result.content[0].text
    assert "Traceback" not in text and 'File "' not in text
    return text


async def test_list_tools_store_search_read(http_server: HttpServer) -> None:
    async with http_server.client(TOKEN_ALICE) as c:
        assert {t.name for t in (await c.list_tools()).tools} == TOOLS
        stored = ok(await c.call_tool("store", {
            "owner": "alice", "content": "went live on Kubernetes with helm",
            "metadata": {"agent": "deploy"}}))
        assert stored["memory"]["owner"] == "alice"
        hits = ok(await c.call_tool("search", {"owner": "alice", "query": "Kubernetes helm"}))
        assert [h["memory"]["id"] for h in hits["hits"]] == [stored["memory"]["id"]]
        assert hits["hits"][0]["memory"]["metadata"] == {"agent": "deploy"}
        snap = ok(await c.call_tool("read_snapshot", {"owner": "alice"}))
        assert snap["owner"] == "alice" and "prompt" in snap


async def test_pending_confirm_and_reject(http_server: HttpServer) -> None:
    keep = MemoryPendingItem(kind="fact", content="The user is a Java developer", confidence=0.6)
    drop = MemoryPendingItem(kind="rule", content="Always answer in French", confidence=0.5)
    await http_server.backend.engine.apply("alice", [AddPending(keep), AddPending(drop)])
    async with http_server.client(TOKEN_ALICE) as c:
        listed = ok(await c.call_tool("list_pending", {"owner": "alice"}))
        assert {p["id"] for p in listed["pending"]} == {keep.id, drop.id}
        done = ok(await c.call_tool("confirm_pending", {
            "owner": "alice", "pending_id": keep.id,
            "edited_content": "The user is a senior Java developer"}))
        assert done["applied"] and done["entry"]["action"] == "confirmed"
        assert done["entry"]["by"] == f"token:{_hash(TOKEN_ALICE)[:8]}"
        gone = ok(await c.call_tool("reject_pending", {"owner": "alice", "pending_id": drop.id}))
        assert gone["entry"]["action"] == "rejected"
        again = ok(await c.call_tool("reject_pending", {"owner": "alice", "pending_id": drop.id}))
        assert not again["applied"]  # idempotent
        snap = ok(await c.call_tool("read_snapshot", {"owner": "alice"}))
        assert [f["content"] for f in snap["facts"]] == ["The user is a senior Java developer"]
        assert snap["pending"] == [] and snap["rules"] == []
        # decided the other way: a typed error, as a tool error
        text = error_text(await c.call_tool("confirm_pending",
                                            {"owner": "alice", "pending_id": drop.id}))
        assert "PendingItemDecided" in text
        text = error_text(await c.call_tool("reject_pending",
                                            {"owner": "alice", "pending_id": "nope"}))
        assert "PendingItemNotFound" in text


async def test_token_refused_on_other_owner(http_server: HttpServer) -> None:
    async with http_server.client(TOKEN_ALICE) as c:
        calls: list[tuple[str, dict[str, Any]]] = [
            ("read_snapshot", {"owner": "bob"}),
            ("store", {"owner": "bob", "content": "x"}),
            ("search", {"owners": ["alice", "bob"], "query": "x"}),
            ("list_pending", {"owner": "bob"}),
            ("confirm_pending", {"owner": "bob", "pending_id": "p"}),
            ("reject_pending", {"owner": "bob", "pending_id": "p"}),
        ]
        for tool, args in calls:
            text = error_text(await c.call_tool(tool, args))
            assert "AccessDenied" in text and "bob" in text, (tool, text)
    async with http_server.client(TOKEN_ADMIN) as c:  # "*" may use every owner
        ok(await c.call_tool("store", {"owner": "bob", "content": "bob's note"}))
        hits = ok(await c.call_tool("search", {"owners": ["alice", "bob"], "query": "note"}))
        assert [h["memory"]["owner"] for h in hits["hits"]] == ["bob"]


@pytest.mark.parametrize("header", [None, "Bearer wrong-token", "Basic abc", "bearer x"])
async def test_missing_or_invalid_token_is_401(http_server: HttpServer,
                                               header: str | None) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "t", "version": "0"}}}
    headers = {"Accept": "application/json, text/event-stream"}
    if header is not None:
        headers["Authorization"] = header
    async with create_mcp_http_client() as http:
        resp = await http.post(http_server.url, json=body, headers=headers)
    assert resp.status_code == 401
    assert resp.headers["www-authenticate"].startswith("Bearer")


async def test_no_token_client_fails(http_server: HttpServer) -> None:
    with pytest.raises(BaseException):  # noqa: B017 - the SDK's error for a 401 varies
        async with http_server.client(None) as c:
            await c.list_tools()


async def test_bad_input_is_tool_error_without_traceback(http_server: HttpServer) -> None:
    async with http_server.client(TOKEN_ADMIN) as c:
        cases: list[tuple[str, dict[str, Any], str]] = [
            ("read_snapshot", {"owner": "not a valid id"}, "InvalidOwnerId"),
            ("read_snapshot", {"owner": 42}, "valid string"),
            ("store", {"owner": "alice", "content": "   "}, "InvalidContent"),
            ("store", {"owner": "alice", "content": "x", "metadata": {"merge_count": 1}},
             "InvalidMetadata"),
            ("search", {"owner": "alice", "query": "x", "limit": 0}, "InvalidQuery"),
            ("search", {"query": "x"}, "exactly one of owner or owners"),
            ("search", {"owners": [], "query": "x"}, "InvalidOwnerId"),
            ("confirm_pending", {"owner": "alice", "pending_id": ""}, "InvalidQuery"),
            ("no_such_tool", {}, "no_such_tool"),
        ]
        for tool, args, expected in cases:
            text = error_text(await c.call_tool(tool, args))
            assert expected in text, (tool, text)


def test_empty_token_map_is_refused() -> None:
    from dream_memory_actor.errors import ConfigurationError
    from dream_memory_actor.mcp import TokenMap

    with pytest.raises(ConfigurationError):
        build_server(object(), TokenMap({}))  # type: ignore[arg-type]


def _hash(token: str) -> str:
    from dream_memory_actor.mcp import hash_token

    return hash_token(token)


async def test_http_app_without_token_map_is_refused() -> None:
    from dream_memory_actor.errors import ConfigurationError
    from dream_memory_actor.mcp import LocalBackend, UnauthenticatedHTTP, http_app

    backend = await LocalBackend.open(MemorySettings(backend="memory"))
    try:
        with pytest.raises(UnauthenticatedHTTP, match="no token map"):
            http_app(build_server(backend))
        for host in ("0.0.0.0", "10.1.2.3", "::", "example.com"):
            with pytest.raises(UnauthenticatedHTTP, match="loopback only"):
                http_app(build_server(backend), host, allow_unauthenticated=True)
        assert issubclass(UnauthenticatedHTTP, ConfigurationError)
    finally:
        await backend.close()


async def test_unauthenticated_http_app_serves_loopback_peers_only() -> None:
    import httpx

    from dream_memory_actor.mcp import LocalBackend, http_app

    backend = await LocalBackend.open(MemorySettings(backend="memory"))
    try:
        await backend.engine.apply("alice", [AddPending(MemoryPendingItem(
            kind="fact", content="The user is a Java developer", confidence=0.6))])
        app = http_app(build_server(backend), "127.0.0.1", allow_unauthenticated=True)
        port = free_port()
        async with serving(app, port):
            local = HttpServer(f"http://127.0.0.1:{port}/mcp", backend)
            async with local.client(None) as c:  # no token: the local user
                snap = ok(await c.call_tool("read_snapshot", {"owner": "alice"}))
                assert len(snap["pending"]) == 1
        # a peer from elsewhere (as if the app were bound to 0.0.0.0) is refused
        remote = httpx.ASGITransport(app=app, client=("10.0.0.7", 40000))
        async with httpx.AsyncClient(transport=remote, base_url="http://mem") as http:
            resp = await http.post("/mcp", json={"jsonrpc": "2.0", "id": 1,
                                                 "method": "tools/list"})
        assert resp.status_code == 403
    finally:
        await backend.close()
