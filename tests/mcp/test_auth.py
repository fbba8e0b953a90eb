"""The token map, and the entry point outside a transport."""

from __future__ import annotations

import asyncio
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from mcp.shared._httpx_utils import create_mcp_http_client

from dream_memory_actor.errors import ConfigurationError
from dream_memory_actor.mcp import AccessDenied, TokenMap, hash_token, main
from tests.support.servers import free_ports


def test_token_map_grants() -> None:
    tokens = TokenMap.parse({hash_token("a"): ["alice", "team"],
                             hash_token("b").upper(): {"owners": ["*"], "name": "ops"}})
    a, b = tokens.verify("a"), tokens.verify("b")
    assert a is not None and b is not None and tokens.verify("c") is None
    a.check(["alice", "team"])
    with pytest.raises(AccessDenied, match="bob"):
        a.check(["alice", "bob"])
    b.check(["anyone"])
    assert b.name == "ops" and a.name == f"token:{hash_token('a')[:8]}"


@pytest.mark.parametrize("data", [
    {"plain-token": ["alice"]},               # keys are hashes, never tokens
    {hash_token("a"): "alice"},               # a list, not a string
    {hash_token("a"): []},                    # grants nothing
    {hash_token("a"): ["bad owner"]},
    ["alice"],
])
def test_token_map_refuses_bad_config(data: object) -> None:
    with pytest.raises(ConfigurationError):
        TokenMap.parse(data)


def test_token_map_from_file_and_env(tmp_path: Path) -> None:
    f = tmp_path / "tokens.yaml"
    f.write_text(f"tokens:\n  {hash_token('t')}: [alice]\n", encoding="utf-8")
    assert TokenMap.load(f).verify("t") is not None
    env = {"DREAM_MEMORY_MCP_TOKENS": json.dumps({hash_token("t"): ["*"]})}
    grant = TokenMap.from_env(env).verify("t")  # type: ignore[union-attr]
    assert grant is not None and grant.all_owners
    assert TokenMap.from_env({}) is None
    with pytest.raises(ConfigurationError):
        TokenMap.load(tmp_path / "missing.json")


def test_hash_token_cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
                        ) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("s3cret\n"))
    assert main(["--hash-token"]) == 0
    assert capsys.readouterr().out.strip() == hash_token("s3cret")


def test_http_without_tokens_is_refused(monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("DREAM_MEMORY_MCP_TOKENS", raising=False)
    assert main(["--transport", "http", "--backend", "memory"]) == 2
    assert "token map" in capsys.readouterr().err


async def test_http_subprocess_with_token_file(tmp_path: Path) -> None:
    """``python -m dream_memory_actor.mcp --transport http --tokens FILE`` end to end."""
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    f = tmp_path / "tokens.json"
    f.write_text(json.dumps({"tokens": {hash_token("tok"): ["alice"]}}), encoding="utf-8")
    port, metrics_port = free_ports(2)
    proc = subprocess.Popen(
        [sys.executable, "-m", "dream_memory_actor.mcp", "--transport", "http",
         "--port", str(port), "--tokens", str(f), "--backend", "memory",
         "--metrics-port", str(metrics_port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        async with create_mcp_http_client() as http:
            for _ in range(300):
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                try:
                    resp = await http.post(url, json={})
                    break
                except Exception:
                    await asyncio.sleep(0.05)
            assert resp.status_code == 401
        async with create_mcp_http_client(headers={"Authorization": "Bearer tok"}) as http, \
                Client(streamable_http_client(url, http_client=http)) as c:
            r = await c.call_tool("store", {"owner": "alice", "content": "hello"})
            assert not r.is_error
            r = await c.call_tool("read_snapshot", {"owner": "bob"})
            assert r.is_error and "AccessDenied" in r.content[0].text  # type: ignore[union-attr]
        # the server process exports its own metrics: the store above is counted
        from prometheus_client.parser import text_string_to_metric_families

        async with create_mcp_http_client() as http:
            scraped = (await http.get(f"http://127.0.0.1:{metrics_port}/metrics")).text
        stores = [s.value for fam in text_string_to_metric_families(scraped)
                  for s in fam.samples if s.name == "dream_memory_operations_total"
                  and s.labels.get("kind") == "store"]
        assert stores and sum(stores) >= 1
    finally:
        proc.terminate()
        proc.wait(20)
        if proc.stderr:
            proc.stderr.close()


def test_public_message_strips_remote_tracebacks() -> None:
    from dream_memory_actor.errors import PendingItemDecided
    from dream_memory_actor.mcp.server import public_message

    class Wrapped(PendingItemDecided):  # how a RayTaskError(PendingItemDecided) looks
        def __init__(self, cause: BaseException) -> None:
            super().__init__('ray::A.f()\n  File "x.py", line 1, in f\n    raise X\nX: boom')
            self.cause = cause

    inner = PendingItemDecided("item 'p' was already confirmed")
    assert public_message(Wrapped(inner)) == "PendingItemDecided: item 'p' was already confirmed"
    bare = PendingItemDecided('Traceback (most recent call last):\n  File "x"\nE: the end')
    assert public_message(bare) == "PendingItemDecided: the end"
