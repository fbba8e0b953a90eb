"""One MCP suite, four servers: in-process memory and a running Ray memory system
(``--ray-system``), each over stdio (the SDK's client spawns the server) and over
streamable HTTP with bearer tokens. Every tool of the table is used here."""

from __future__ import annotations

import json
import os
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from mcp import Client, StdioServerParameters

from dream_memory_actor.config import MemorySettings
from dream_memory_actor.mcp import LocalBackend, RayBackend, TokenMap, build_server, hash_token
from dream_memory_actor.mcp.server import http_app
from dream_memory_actor.mcp.tools import TOOLS
from dream_memory_actor.process import version
from tests.support.servers import free_ports

from .conftest import HttpServer, free_port, serving
from .test_http import error_text, ok

ADMIN = "tok-suite-admin-0123456789"
NARROW = "tok-suite-narrow-0123456789"  # grants the owner "alice" only
SYSTEM = "test-mcp-suite"

#: Every agent-facing operation has a tool (the table may only grow).
REQUIRED = {"read_snapshot", "search", "store", "add_rule", "add_fact", "set_status",
            "delete_status", "delete_memory", "list_memories", "list_pending",
            "confirm_pending", "reject_pending", "append_messages", "end_conversation", "audit",
            "export_owner", "forget_owner", "supersede", "history", "status_history",
            "update_memory", "store_many", "memory_history", "consolidate", "undo_proposal"}

Connect = Callable[[str | None], AbstractAsyncContextManager[Client]]


@dataclass
class Target:
    name: str
    connect: Connect
    by: str  # who a decision of the admin connection is recorded as
    tokens: bool  # HTTP: a token decides which owners a connection may use


def _tokens() -> TokenMap:
    return TokenMap.parse({hash_token(ADMIN): {"owners": ["*"], "name": "admin"},
                           hash_token(NARROW): ["alice"]})


def _stdio(extra: list[str], env_extra: dict[str, str]) -> Connect:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DREAM_MEMORY_")}
    env.update(PYTHONPATH=os.getcwd(), HF_HUB_OFFLINE="1", **env_extra)
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "dream_memory_actor.mcp", *extra],
        env=env, cwd=os.getcwd())

    @asynccontextmanager
    async def connect(token: str | None) -> AsyncIterator[Client]:
        async with Client(params) as c:
            yield c

    return connect


@asynccontextmanager
async def _http(backend: Any) -> AsyncIterator[Connect]:
    port = free_port()
    app = http_app(build_server(backend, _tokens(), issuer_url=f"http://127.0.0.1:{port}"))
    async with serving(app, port):
        server = HttpServer(f"http://127.0.0.1:{port}/mcp", backend)
        yield lambda token: server.client(token or ADMIN)


@pytest.fixture(scope="module")
def ray_suite_system(request: pytest.FixtureRequest) -> Iterator[str]:
    """A running Ray memory system on the test PostgreSQL; its Ray address."""
    request.getfixturevalue("ray_runtime")
    import ray

    from tests.runtime.conftest import start_system

    system = start_system(request.getfixturevalue("pg_dsn"), "sharded", SYSTEM)
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        system.shutdown(grace_period_s=1)


@pytest.fixture(params=[
    "local-stdio", "local-http",
    pytest.param("ray-stdio", marks=[pytest.mark.postgres, pytest.mark.slow]),
    pytest.param("ray-http", marks=[pytest.mark.postgres, pytest.mark.slow]),
])
async def target(request: pytest.FixtureRequest) -> AsyncIterator[Target]:
    mode, transport = request.param.split("-")
    if mode == "local" and transport == "stdio":
        yield Target(request.param, _stdio(["--transport", "stdio"],
                                           {"DREAM_MEMORY_BACKEND": "memory"}), "local", False)
        return
    if mode == "local":
        backend: Any = await LocalBackend.open(MemorySettings(backend="memory"))
        try:
            async with _http(backend) as connect:
                yield Target(request.param, connect, "admin", True)
        finally:
            await backend.close()
        return
    address = request.getfixturevalue("ray_suite_system")
    if transport == "stdio":
        yield Target(request.param, _stdio(
            ["--transport", "stdio", "--ray-system", SYSTEM, "--ray-address", address], {}),
            "local", False)
        return
    from dream_memory_actor.runtime import MemorySystem

    async with _http(RayBackend(MemorySystem.connect(SYSTEM))) as connect:
        yield Target(request.param, connect, "admin", True)


def _owner() -> str:
    return f"suite-{uuid.uuid4().hex[:10]}"


async def test_tools_resource_and_prompt_are_described(target: Target) -> None:
    async with target.connect(None) as c:
        info = c.server_info  # type: ignore[attr-defined]
        assert info.name == "dream-memory" and info.version == version() != ""
        tools = {t.name: t for t in (await c.list_tools()).tools}
        assert set(tools) == {e.name for e in TOOLS} and set(tools) >= REQUIRED
        for t in tools.values():
            assert t.title and t.description and "``" not in t.description, t.name
            a = t.annotations
            assert a is not None and None not in (a.read_only_hint, a.destructive_hint,
                                                  a.idempotent_hint, a.open_world_hint), t.name
            assert t.output_schema and t.output_schema.get("properties"), t.name
            assert "``" not in json.dumps(t.output_schema), t.name
            for name, prop in t.input_schema["properties"].items():
                assert prop.get("description"), (t.name, name)
        assert tools["read_snapshot"].annotations.read_only_hint  # type: ignore[union-attr]
        assert tools["delete_memory"].annotations.destructive_hint  # type: ignore[union-attr]
        limit = tools["search"].input_schema["properties"]["limit"]
        assert limit["minimum"] == 1 and limit["maximum"] >= 100
        owner = tools["store"].input_schema["properties"]["owner"]
        assert owner["pattern"].startswith("^") and owner["maxLength"] == 128
        templates = (await c.list_resource_templates()).resource_templates
        assert [t.uri_template for t in templates] == ["memory://{owner}/snapshot"]
        assert [p.name for p in (await c.list_prompts()).prompts] == ["memory_prompt"]


async def test_rules_facts_status_resource_prompt(target: Target) -> None:
    who = _owner()
    async with target.connect(None) as c:
        rule = ok(await c.call_tool("add_rule", {"owner": who, "content":
                                                 "In code review, look at security first"}))
        again = ok(await c.call_tool("add_rule", {"owner": who, "content":
                                                  "In code review, look at security first"}))
        assert again["rule"]["id"] == rule["rule"]["id"]  # kept once
        fact = ok(await c.call_tool("add_fact", {"owner": who,
                                                 "content": "The user is a Java developer"}))
        st = ok(await c.call_tool("set_status", {"owner": who, "key": "current_project",
                                                 "value": "dream-saas", "ttl_s": 3600}))
        assert st["status"] == {"current_project": "dream-saas"}
        snap = ok(await c.call_tool("read_snapshot", {"owner": who}))
        assert [r["content"] for r in snap["rules"]] == ["In code review, look at security first"]
        assert "current_project=dream-saas" in snap["prompt"]
        prompt = await c.get_prompt("memory_prompt", {"owner": who})
        assert prompt.messages[0].content.text == snap["prompt"]  # type: ignore[union-attr]
        res = await c.read_resource(f"memory://{who}/snapshot")
        assert json.loads(res.contents[0].text)["version"] == snap["version"]  # type: ignore[union-attr]
        ok(await c.call_tool("delete_status", {"owner": who, "key": "current_project"}))
        assert "UnknownStatusKey" in error_text(await c.call_tool(
            "delete_status", {"owner": who, "key": "current_project"}))
        ok(await c.call_tool("remove_rule", {"owner": who, "rule_id": rule["rule"]["id"]}))
        ok(await c.call_tool("remove_fact", {"owner": who, "fact_id": fact["fact"]["id"]}))
        snap = ok(await c.call_tool("read_snapshot", {"owner": who}))
        assert snap["rules"] == [] and snap["facts"] == [] and snap["status"] == {}


async def test_store_search_list_delete(target: Target) -> None:
    who = _owner()
    async with target.connect(None) as c:
        stored = ok(await c.call_tool("store", {"owner": who, "content":
                                                "went live on Kubernetes with helm",
                                                "metadata": {"agent": "deploy"}}))
        mid = stored["memory"]["id"]
        hits = ok(await c.call_tool("search", {"owner": who, "query": "Kubernetes helm"}))
        assert [h["memory"]["id"] for h in hits["hits"]] == [mid]
        listed = ok(await c.call_tool("list_memories", {"owner": who, "limit": 10}))
        assert [m["id"] for m in listed["memories"]] == [mid]
        assert ok(await c.call_tool("delete_memory", {"owner": who, "memory_id": mid}))[
            "deleted"]
        assert not ok(await c.call_tool("delete_memory", {"owner": who, "memory_id": mid}))[
            "deleted"]
        assert ok(await c.call_tool("list_memories", {"owner": who}))["memories"] == []


async def test_supersede_and_history(target: Target) -> None:
    who = _owner()
    async with target.connect(None) as c:
        rule = ok(await c.call_tool("add_rule", {"owner": who, "content": "Reply in English"}))
        old = rule["rule"]["id"]
        new = ok(await c.call_tool("supersede", {"owner": who, "item_id": old, "content":
                                                 "Reply in Chinese", "reason": "user asked"}))
        assert new["item"]["content"] == "Reply in Chinese"
        snap = ok(await c.call_tool("read_snapshot", {"owner": who}))
        assert [r["content"] for r in snap["rules"]] == ["Reply in Chinese"]
        chain = ok(await c.call_tool("history", {"owner": who, "item_id": old}))
        assert [v["content"] for v in chain["versions"]] == ["Reply in English",
                                                              "Reply in Chinese"]
        assert chain["versions"][0]["reason"] == "user asked"
        assert chain["versions"][0]["by"] == target.by
        text = error_text(await c.call_tool("supersede", {"owner": who, "item_id": old,
                                                          "content": "again"}))
        assert "ItemSuperseded" in text
        ok(await c.call_tool("set_status", {"owner": who, "key": "k", "value": "v1"}))
        ok(await c.call_tool("set_status", {"owner": who, "key": "k", "value": "v2"}))
        values = ok(await c.call_tool("status_history", {"owner": who, "key": "k"}))
        assert [ch["value"] for ch in values["changes"]] == ["v1", "v2"]


async def test_batches_filters_updates_and_memory_history(target: Target) -> None:
    who = _owner()
    async with target.connect(None) as c:
        # (topics t1-t3: far apart for the Ray system's test embedder too)
        stored = ok(await c.call_tool("store_many", {"owner": who, "items": [
            {"content": "t1: went live on Kubernetes with helm", "metadata": {"agent": "deploy"}},
            {"content": "t2: the billing service moved to PostgreSQL",
             "metadata": {"agent": "db"}},
            "t3: the team prefers short answers"]}))["results"]
        assert [r["merged"] for r in stored] == [False, False, False]
        deploy = stored[0]["memory"]["id"]
        hits = ok(await c.call_tool("search", {"owner": who, "query": "service moved",
                                               "filter": {"agent": "deploy"}}))["hits"]
        assert [h["memory"]["id"] for h in hits] in ([deploy], [])
        listed = ok(await c.call_tool("list_memories", {"owner": who,
                                                        "filter": {"agent": "db"}}))
        assert [m["content"] for m in listed["memories"]] == [
            "t2: the billing service moved to PostgreSQL"]
        ok(await c.call_tool("update_memory", {"owner": who, "memory_id": deploy,
                                               "content": "t1: went live on Kubernetes with argo"}))
        versions = ok(await c.call_tool("memory_history", {"owner": who,
                                                           "memory_id": deploy}))["versions"]
        assert [v["content"] for v in versions] == ["t1: went live on Kubernetes with helm",
                                                    "t1: went live on Kubernetes with argo"]
        text = error_text(await c.call_tool("list_memories", {"owner": who,
                                                              "filter": {"a": [1, 2]}}))
        assert "InvalidFilter" in text


async def test_export_and_forget_an_owner(target: Target) -> None:
    who = _owner()
    async with target.connect(None) as c:
        ok(await c.call_tool("add_rule", {"owner": who, "content": "Reply in Chinese"}))
        ok(await c.call_tool("store", {"owner": who, "content": "went live on Kubernetes"}))
        lines = ok(await c.call_tool("export_owner", {"owner": who}))["lines"]
        header = json.loads(lines[0])
        assert header["owner"] == who and json.loads(lines[-1])["type"] == "end"
        assert any(json.loads(line)["type"] == "memory" for line in lines)
        tomb = ok(await c.call_tool("forget_owner", {"owner": who}))["tombstone"]
        assert tomb["by"] == target.by and tomb["counts"]["memories"] == 1
        assert tomb["counts"]["rules"] == 1 and who not in json.dumps(tomb)
        snap = ok(await c.call_tool("read_snapshot", {"owner": who}))
        assert snap["version"] == 0 and snap["rules"] == []
        assert ok(await c.call_tool("list_memories", {"owner": who}))["memories"] == []


async def test_conversation_extraction_pending_and_audit(target: Target) -> None:
    who = _owner()
    async with target.connect(None) as c:
        appended = ok(await c.call_tool("append_messages", {
            "owner": who, "conversation": "chat-1", "messages": [
                {"role": "user", "content": "From now on, answer in French."},
                {"role": "assistant", "content": "D'accord."},
                {"role": "user", "content": "I am a Java developer. I'm a night owl."}]}))
        assert len(appended["window"]) == 3
        ended = ok(await c.call_tool("end_conversation", {"owner": who,
                                                          "conversation": "chat-1"}))
        results = {o["item"]["content"]: o["result"] for o in ended["report"]["outcomes"]}
        assert "written" in results.values() and "queued" in results.values(), results
        assert ok(await c.call_tool("end_conversation", {"owner": who,
                                                         "conversation": "chat-1"}))[
            "report"] is None
        snap = ok(await c.call_tool("read_snapshot", {"owner": who}))
        assert snap["rules"], snap
        pending = ok(await c.call_tool("list_pending", {"owner": who}))["pending"]
        assert len(pending) == 2 and all(p["description"] for p in pending)
        keep, drop = pending
        done = ok(await c.call_tool("confirm_pending", {
            "owner": who, "pending_id": keep["id"], "edited_content": "The user writes Java"}))
        assert done["applied"] and done["entry"]["by"] == target.by
        gone = ok(await c.call_tool("reject_pending", {"owner": who, "pending_id": drop["id"]}))
        assert gone["entry"]["action"] == "rejected"
        assert not ok(await c.call_tool("reject_pending", {"owner": who,
                                                           "pending_id": drop["id"]}))["applied"]
        assert "PendingItemDecided" in error_text(await c.call_tool(
            "confirm_pending", {"owner": who, "pending_id": drop["id"]}))
        trail = ok(await c.call_tool("audit", {"owner": who}))["entries"]
        assert {(e["pending_id"], e["action"]) for e in trail} == {
            (keep["id"], "confirmed"), (drop["id"], "rejected")}
        snap = ok(await c.call_tool("read_snapshot", {"owner": who}))
        assert "The user writes Java" in [f["content"] for f in snap["facts"]]
        assert snap["pending"] == []


async def test_consolidation_tools(target: Target) -> None:
    """Through every server: a pass over memories the store judged already proposes
    nothing; an unknown proposal cannot be undone. (The proposals themselves:
    tests/mcp/test_consolidation.py.)"""
    who = _owner()
    async with target.connect(None) as c:
        ok(await c.call_tool("store_many", {"owner": who, "items": [
            "t1: went live on Kubernetes with helm", "t2: the team prefers short answers"]}))
        done = ok(await c.call_tool("consolidate", {"owner": who}))
        assert done["proposals"] == [] and done["applied"] == done["refused"] == 0
        assert done["counts"] == {"merge": 0, "supersede": 0, "expire": 0,
                                  "correction": 0, "status_expiry": 0}
        assert ok(await c.call_tool("consolidate", {"owner": who, "apply_all": True}))[
            "proposals"] == []
        text = error_text(await c.call_tool("undo_proposal", {"owner": who,
                                                              "pending_id": "no-such"}))
        assert "ProposalNotApplied" in text
        assert "InvalidOwnerId" in error_text(await c.call_tool("consolidate",
                                                                {"owner": "not valid"}))
        assert ok(await c.call_tool("audit", {"owner": who}))["entries"] == []


async def test_bad_input_is_a_typed_error_and_writes_nothing(target: Target) -> None:
    who = _owner()
    cases: list[tuple[str, dict[str, Any], str]] = [
        ("add_rule", {"owner": who, "content": "  "}, "InvalidContent"),
        ("add_fact", {"owner": who, "content": "x", "source": ""}, "InvalidQuery"),
        ("set_status", {"owner": who, "key": "bad key", "value": "v"}, "InvalidStatusKey"),
        ("set_status", {"owner": who, "key": "k", "value": "v", "ttl_s": -1}, "InvalidQuery"),
        ("store", {"owner": who, "content": "a\x00b"}, "InvalidContent"),
        ("list_memories", {"owner": who, "offset": -1}, "InvalidQuery"),
        ("audit", {"owner": who, "limit": 0}, "InvalidQuery"),
        ("append_messages", {"owner": who, "conversation": "bad id", "messages": [
            {"role": "user", "content": "hi"}]}, "InvalidQuery"),
        ("append_messages", {"owner": who, "conversation": "c", "messages": []},
         "InvalidQuery"),
        ("remove_rule", {"owner": who, "rule_id": "nope"}, "RuleNotFound"),
        ("read_snapshot", {"owner": "not valid"}, "InvalidOwnerId"),
    ]
    async with target.connect(None) as c:
        for tool, args, expected in cases:
            assert expected in error_text(await c.call_tool(tool, args)), (tool, args)
        snap = ok(await c.call_tool("read_snapshot", {"owner": who}))
        assert snap["version"] == 0 and snap["status"] == {}
        assert ok(await c.call_tool("list_memories", {"owner": who}))["memories"] == []


async def test_a_token_reaches_its_owners_only(target: Target) -> None:
    if not target.tokens:
        pytest.skip("over stdio the local user owns the process: there are no tokens")
    other = _owner()
    calls: list[tuple[str, dict[str, Any]]] = [
        ("read_snapshot", {}), ("search", {"query": "x"}), ("list_memories", {}),
        ("list_pending", {}), ("audit", {}), ("store", {"content": "x"}),
        ("add_rule", {"content": "x"}), ("add_fact", {"content": "x"}),
        ("set_status", {"key": "k", "value": "v"}), ("delete_status", {"key": "k"}),
        ("remove_rule", {"rule_id": "r"}), ("remove_fact", {"fact_id": "f"}),
        ("delete_memory", {"memory_id": "m"}), ("confirm_pending", {"pending_id": "p"}),
        ("reject_pending", {"pending_id": "p"}),
        ("append_messages", {"conversation": "c", "messages": [
            {"role": "user", "content": "From now on, answer in French."}]}),
        ("end_conversation", {"conversation": "c"}),
        ("export_owner", {}), ("forget_owner", {}),
        ("supersede", {"item_id": "r", "content": "x"}), ("history", {"item_id": "r"}),
        ("status_history", {"key": "k"}),
        ("update_memory", {"memory_id": "m", "content": "x"}), ("store_many", {"items": ["x"]}),
        ("memory_history", {"memory_id": "m"}), ("consolidate", {"apply_all": True}),
        ("undo_proposal", {"pending_id": "p"}),
    ]
    assert {t for t, _ in calls} == {e.name for e in TOOLS}
    async with target.connect(NARROW) as c:
        for tool, args in calls:
            text = error_text(await c.call_tool(tool, {"owner": other, **args}))
            assert "AccessDenied" in text and other in text, (tool, text)
        with pytest.raises(Exception, match="AccessDenied"):
            await c.read_resource(f"memory://{other}/snapshot")
        with pytest.raises(Exception, match="AccessDenied"):
            await c.get_prompt("memory_prompt", {"owner": other})
        ok(await c.call_tool("read_snapshot", {"owner": "alice"}))
    async with target.connect(ADMIN) as c:
        snap = ok(await c.call_tool("read_snapshot", {"owner": other}))
        assert snap["version"] == 0 and snap["rules"] == []


@pytest.mark.postgres
@pytest.mark.slow
async def test_a_ray_mcp_process_serves_its_metrics(ray_suite_system: str,
                                                    tmp_path: Any) -> None:
    """``--ray-system`` with ``--metrics-port``: the counts of what its clients did."""
    import asyncio
    import subprocess

    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client
    from prometheus_client.parser import text_string_to_metric_families

    f = tmp_path / "tokens.json"
    f.write_text(json.dumps({"tokens": {hash_token(ADMIN): ["*"]}}), encoding="utf-8")
    port, metrics_port = free_ports(2)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DREAM_MEMORY_")}
    env["PYTHONPATH"] = os.getcwd()
    proc = subprocess.Popen(
        [sys.executable, "-m", "dream_memory_actor.mcp", "--transport", "http",
         "--port", str(port), "--tokens", str(f), "--ray-system", SYSTEM,
         "--ray-address", ray_suite_system, "--metrics-port", str(metrics_port)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}/mcp"
    who = _owner()
    try:
        async with create_mcp_http_client() as http:
            for _ in range(600):
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                try:
                    if (await http.post(url, json={})).status_code == 401:
                        break
                except Exception:
                    await asyncio.sleep(0.1)
        async with create_mcp_http_client(headers={"Authorization": f"Bearer {ADMIN}"}) as h, \
                Client(streamable_http_client(url, http_client=h)) as c:
            ok(await c.call_tool("store", {"owner": who, "content": "went live on Kubernetes"}))
            ok(await c.call_tool("read_snapshot", {"owner": who}))
            ok(await c.call_tool("search", {"owner": who, "query": "Kubernetes"}))
        async with create_mcp_http_client() as http:
            text = (await http.get(f"http://127.0.0.1:{metrics_port}/metrics")).text
    finally:
        proc.terminate()
        proc.wait(30)
        if proc.stderr:
            proc.stderr.close()
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for fam in text_string_to_metric_families(text) for s in fam.samples}

    def total(name: str, **labels: str) -> float:
        return sum(v for (n, lab), v in samples.items()
                   if n == name and labels.items() <= dict(lab).items())

    assert total("dream_memory_operations_total", kind="store") >= 1
    assert total("dream_memory_operations_total", kind="search") >= 1
    assert total("dream_memory_snapshot_reads_total", source="actor") >= 1
    assert total("dream_memory_mcp_tool_calls_total", tool="store", outcome="ok") >= 1
    assert total("dream_memory_store_seconds_count") >= 1
