"""Metrics: the engine and the extraction service move the counters; an HTTP scrape sees them."""

from __future__ import annotations

import socket
import urllib.request
import uuid

import pytest

from dream_memory_actor import MemoryEngine, MemorySettings
from dream_memory_actor.metrics import Metrics, get_metrics, start_http_server

prometheus_client = pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _v(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str,
       **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


@pytest.fixture(scope="module")
def port() -> int:
    p = _free_port()
    assert start_http_server(p, addr="127.0.0.1")
    return p


async def test_scrape_sees_store_search_merge_and_errors(port: int) -> None:
    before = _scrape(port)
    engine = await MemoryEngine.open(MemorySettings(backend="memory"))
    try:
        await engine.store("alice", "went live on Kubernetes with helm")
        merged = await engine.store("alice", "went live on Kubernetes with helm")
        assert merged.merged
        await engine.search("alice", "Kubernetes deployment")
        with pytest.raises(Exception):  # noqa: B017 - any validation error is counted
            await engine.search("alice", "")
        await engine.snapshot("alice")
    finally:
        await engine.close()
    after = _scrape(port)

    def delta(name: str, **labels: str) -> float:
        return _v(after, name, **labels) - _v(before, name, **labels)

    assert delta("dream_memory_operations_total", kind="store", backend="memory") == 2
    assert delta("dream_memory_operations_total", kind="search", backend="memory") == 2
    assert delta("dream_memory_operations_total", kind="snapshot", backend="memory") == 1
    assert delta("dream_memory_store_seconds_count", backend="memory") == 2
    assert delta("dream_memory_search_seconds_count", backend="memory") == 2
    assert delta("dream_memory_merges_total", backend="memory") == 1
    errors = {k: v for k, v in after.items() if k[0] == "dream_memory_errors_total"}
    assert any(dict(k[1]).get("kind") == "search" and v >= 1 for k, v in errors.items())
    # no owner id ever becomes a label value
    assert not any("alice" in str(k[1]) for k in after)


async def test_gate_outcomes_hitl_and_pending_gauge(port: int) -> None:
    from dream_memory_actor.extraction.service import ExtractionService
    from dream_memory_actor.models import ChatMessage

    owner = f"gauge-{uuid.uuid4().hex[:8]}"  # an owner no other test's metrics have seen
    before = _scrape(port)
    engine = await MemoryEngine.open(MemorySettings(backend="memory"))
    try:
        service = ExtractionService.for_engine(engine)
        report = await service.extract(owner, [
            ChatMessage(role="user", content="From now on, reply in Chinese."),
            ChatMessage(role="user", content="I am a Java developer."),
        ])
        pending = await service.pending(owner)
        assert pending, "the rule-based extractor queues \"I am a Java developer.\""
        mid = _scrape(port)
        for p in pending:
            await service.reject(owner, p.id, by="tester")
    finally:
        await engine.close()
    after = _scrape(port)
    moved = sum(_v(mid, "dream_memory_gate_outcomes_total", outcome=r)
                - _v(before, "dream_memory_gate_outcomes_total", outcome=r)
                for r in report.counts)
    assert moved == len(report.outcomes) > 0
    for r, n in report.counts.items():
        assert (_v(mid, "dream_memory_gate_outcomes_total", outcome=r)
                - _v(before, "dream_memory_gate_outcomes_total", outcome=r)) == n
    assert _v(mid, "dream_memory_pending_items") - _v(before, "dream_memory_pending_items") \
        == len(pending)
    assert (_v(after, "dream_memory_hitl_decisions_total", action="rejected")
            - _v(before, "dream_memory_hitl_decisions_total", action="rejected")) == len(pending)
    assert _v(after, "dream_memory_pending_items") == _v(before, "dream_memory_pending_items")


def test_api_helpers_on_a_private_registry() -> None:
    registry = prometheus_client.CollectorRegistry()
    m = Metrics(registry=registry)
    m.observe_search("redis", 0.01)
    m.observe_store("redis", 0.02, merged=True)
    m.extraction_usage(100, 20, 0.5)
    m.set_live_owners(3)
    m.observe_pending("o1", 2)
    m.observe_pending("o2", 5)
    m.observe_pending("o1", 0)

    def val(name: str, **labels: str) -> float | None:
        value: float | None = registry.get_sample_value(name, labels)
        return value

    assert val("dream_memory_operations_total", kind="search", backend="redis") == 1
    assert val("dream_memory_merges_total", backend="redis") == 1
    assert val("dream_memory_extraction_tokens_total", type="prompt") == 100
    assert val("dream_memory_extraction_cost_usd_total") == 0.5
    assert val("dream_memory_live_owner_actors") == 3
    assert val("dream_memory_pending_items") == 5


def test_off_is_a_no_op() -> None:
    m = Metrics("off")
    assert not m.enabled
    with m.operation("store", "memory"):
        pass
    m.observe_pending("x", 3)
    m.gate_outcomes({"written": 1})
    assert get_metrics().enabled


async def test_mcp_tool_calls_rejected_tokens_and_snapshot_reads() -> None:
    """Counted by the MCP server of this process; label values from fixed sets only."""
    from prometheus_client import REGISTRY

    from dream_memory_actor.mcp import LocalBackend, TokenMap, build_server, hash_token
    from dream_memory_actor.mcp.server import http_app
    from dream_memory_actor.metrics import _bounded
    from tests.mcp.conftest import HttpServer, free_port, serving

    def value(name: str, **labels: str) -> float:
        return REGISTRY.get_sample_value(name, labels) or 0.0

    calls = ("dream_memory_mcp_tool_calls_total", "dream_memory_mcp_rejected_tokens_total",
             "dream_memory_snapshot_reads_total")
    before = {c: value(c) for c in calls}
    ok0 = value(calls[0], tool="read_snapshot", outcome="ok")
    err0 = value(calls[0], tool="store", outcome="error")
    reads0 = value(calls[2], source="store")
    rejected0 = value(calls[1])
    backend = await LocalBackend.open(MemorySettings(backend="memory"))
    port = free_port()
    tokens = TokenMap.parse({hash_token("tok-metrics-0123456789"): ["alice"]})
    app = http_app(build_server(backend, tokens, issuer_url=f"http://127.0.0.1:{port}"))
    try:
        async with serving(app, port):
            server = HttpServer(f"http://127.0.0.1:{port}/mcp", backend)
            async with server.client("tok-metrics-0123456789") as c:
                assert not (await c.call_tool("read_snapshot", {"owner": "alice"})).is_error
                assert (await c.call_tool("store", {"owner": "bob", "content": "x"})).is_error
                assert (await c.call_tool("no_such_tool", {})).is_error  # not ours: not counted
            import httpx

            async with httpx.AsyncClient() as http:
                for header in ({}, {"Authorization": "Bearer wrong"}):
                    r = await http.post(server.url, json={}, headers=header)
                    assert r.status_code == 401
    finally:
        await backend.close()
    assert value(calls[0], tool="read_snapshot", outcome="ok") == ok0 + 1
    assert value(calls[0], tool="store", outcome="error") == err0 + 1
    assert value(calls[2], source="store") == reads0 + 1
    assert value(calls[1]) == rejected0 + 2
    assert before  # every series above exists with prometheus-client installed
    assert _bounded("anything-else", frozenset({"a"})) == "other"
    tools = {s.labels["tool"] for fam in REGISTRY.collect() for s in fam.samples
             if s.name == "dream_memory_mcp_tool_calls_total"}
    from dream_memory_actor.mcp.tools import TOOLS

    assert tools <= {e.name for e in TOOLS} | {"other"}


async def test_live_owners_are_counted_in_sharded_placement() -> None:
    """The registry sets the gauge from its hosts' counts (the owners live in the hosts)."""
    import asyncio

    pytest.importorskip("ray", reason="the registry is part of the Ray runtime")
    from prometheus_client import CollectorRegistry

    from dream_memory_actor.metrics import set_metrics
    from dream_memory_actor.runtime import registry as reg
    from dream_memory_actor.runtime.spec import SystemSpec

    class Host:
        def __init__(self, live: int) -> None:
            self.live = live
            self.info = self

        async def remote(self) -> dict[str, int]:
            return {"live": self.live, "high_water": self.live, "passivated": 0}

    collected = CollectorRegistry()
    before = get_metrics()
    set_metrics(Metrics("prometheus", registry=collected))
    try:
        r = reg.Registry(SystemSpec("m", MemorySettings(backend="memory", placement="sharded")))
        r._hosts = [Host(3), Host(4)]
        task = asyncio.create_task(r._count_live())
        try:
            for _ in range(100):
                if collected.get_sample_value("dream_memory_live_owner_actors") == 7:
                    break
                await asyncio.sleep(0.02)
            assert collected.get_sample_value("dream_memory_live_owner_actors") == 7
        finally:
            task.cancel()
    finally:
        set_metrics(before)
