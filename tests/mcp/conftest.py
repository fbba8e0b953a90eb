"""Fixtures of the MCP server tests: a streamable HTTP server on a free port, in this loop."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import pytest
import uvicorn
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from dream_memory_actor.config import MemorySettings
from dream_memory_actor.mcp import LocalBackend, TokenMap, build_server, hash_token, http_app
from tests.support.servers import free_port

TOKEN_ALICE = "tok-alice-0123456789"
TOKEN_ADMIN = "tok-admin-9876543210"


@dataclass
class HttpServer:
    url: str
    backend: LocalBackend

    @asynccontextmanager
    async def client(self, token: str | None) -> AsyncIterator[Client]:
        headers = {"Authorization": f"Bearer {token}"} if token else None
        async with create_mcp_http_client(headers=headers) as http, \
                Client(streamable_http_client(self.url, http_client=http)) as client:
            yield client


@asynccontextmanager
async def serving(app: Any, port: int) -> AsyncIterator[None]:
    """``app`` served by uvicorn on 127.0.0.1:``port`` in this loop."""
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                           log_level="warning", lifespan="on"))
    task = asyncio.create_task(server.serve())
    try:
        for _ in range(200):
            if server.started:
                break
            if task.done():
                task.result()
            await asyncio.sleep(0.02)
        assert server.started, "the MCP HTTP server did not start"
        yield
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 15)


@asynccontextmanager
async def http_server_on(settings: MemorySettings, alice: Any = ("alice",)
                         ) -> AsyncIterator[HttpServer]:
    """The HTTP server over in-process memory of ``settings``; ``TOKEN_ALICE`` granted as
    ``alice`` says (its owners, or a grant with a name), ``TOKEN_ADMIN`` every owner."""
    backend = await LocalBackend.open(settings)
    tokens = TokenMap.parse({"tokens": {
        hash_token(TOKEN_ALICE): alice if isinstance(alice, dict) else list(alice),
        hash_token(TOKEN_ADMIN): {"owners": ["*"], "name": "admin"},
    }})
    port = free_port()
    app = http_app(build_server(backend, tokens, issuer_url=f"http://127.0.0.1:{port}"))
    try:
        async with serving(app, port):
            yield HttpServer(f"http://127.0.0.1:{port}/mcp", backend)
    finally:
        await backend.close()


@pytest.fixture
async def http_server() -> AsyncIterator[HttpServer]:
    async with http_server_on(MemorySettings(backend="memory")) as server:
        yield server
