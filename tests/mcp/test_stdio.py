"""The MCP server over stdio: the SDK's client spawns ``python -m dream_memory_actor.mcp``."""

from __future__ import annotations

import os
import sys

from mcp import Client, StdioServerParameters

from .test_http import TOOLS, error_text, ok


def _params() -> StdioServerParameters:
    env = {k: v for k, v in os.environ.items() if k.startswith(("PATH", "PYTHON", "HOME"))}
    env["DREAM_MEMORY_BACKEND"] = "memory"
    return StdioServerParameters(command=sys.executable,
                                 args=["-m", "dream_memory_actor.mcp", "--transport", "stdio"],
                                 env=env, cwd=os.getcwd())


async def test_stdio_tools_store_search_read() -> None:
    async with Client(_params()) as c:
        assert {t.name for t in (await c.list_tools()).tools} == TOOLS
        stored = ok(await c.call_tool("store", {"owner": "alice",
                                                "content": "went live on Kubernetes with helm"}))
        # no token over stdio: the local user may use every owner
        ok(await c.call_tool("store", {"owner": "bob", "content": "helm charts live in infra/"}))
        hits = ok(await c.call_tool("search", {"owners": ["alice", "bob"], "query": "helm"}))
        assert stored["memory"]["id"] in {h["memory"]["id"] for h in hits["hits"]}
        assert len(hits["hits"]) == 2
        snap = ok(await c.call_tool("read_snapshot", {"owner": "alice"}))
        assert snap["owner"] == "alice" and snap["pending"] == []
        assert ok(await c.call_tool("list_pending", {"owner": "alice"})) == {"pending": []}
        text = error_text(await c.call_tool("store", {"owner": "alice", "content": "a\x00b"}))
        assert "InvalidContent" in text
