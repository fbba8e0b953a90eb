"""Metrics: the engine and the extraction service move the counters; an HTTP scrape sees them."""

from __future__ import annotations

import socket
import urllib.request

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

    before = _scrape(port)
    engine = await MemoryEngine.open(MemorySettings(backend="memory"))
    try:
        service = ExtractionService.for_engine(engine)
        report = await service.extract("bob", [
            ChatMessage(role="user", content="From now on, reply in Chinese."),
            ChatMessage(role="user", content="I am a Java developer."),
        ])
        pending = await service.pending("bob")
        assert pending, "the rule-based extractor queues \"I am a Java developer.\""
        mid = _scrape(port)
        for p in pending:
            await service.reject("bob", p.id, by="tester")
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
