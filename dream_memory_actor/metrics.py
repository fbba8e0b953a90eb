"""Prometheus metrics of the memory: operations, latencies, the gate, merges, the queue, costs.

Install the ``metrics`` extra (``prometheus-client``). Without it every call here
is a no-op, so instrumented code never needs to check. The metrics:

=============================================  =========  ==================================
name                                           type       labels
=============================================  =========  ==================================
``dream_memory_operations_total``              counter    ``kind`` (store, search, apply,
                                                          snapshot, delete, list, append,
                                                          extract, forget, import),
                                                          ``backend``
``dream_memory_search_seconds``                histogram  ``backend``
``dream_memory_store_seconds``                 histogram  ``backend``
``dream_memory_errors_total``                  counter    ``type`` (exception class),
                                                          ``kind``
``dream_memory_merges_total``                  counter    ``backend``
``dream_memory_store_judgements_total``        counter    ``backend``, ``judgement``
                                                          (duplicate, update, distinct,
                                                          unsure, new)
``dream_memory_gate_outcomes_total``           counter    ``outcome`` (written, queued,
                                                          already_pending, duplicate,
                                                          skipped)
``dream_memory_hitl_decisions_total``          counter    ``action`` (confirmed, rejected, undone)
``dream_memory_pending_items``                 gauge      none
``dream_memory_live_owner_actors``             gauge      none
``dream_memory_snapshot_reads_total``          counter    ``source`` (actor: served by an
                                                          owner actor; store: read from
                                                          the storage in this process)
``dream_memory_mcp_tool_calls_total``          counter    ``tool`` (the server's own tool
                                                          names), ``outcome`` (ok, error)
``dream_memory_mcp_rejected_tokens_total``     counter    none
``dream_memory_extraction_tokens_total``       counter    ``type`` (prompt, completion)
``dream_memory_extraction_cost_usd_total``     counter    none
``dream_memory_consolidation_proposals_total`` counter    ``outcome`` (proposed; applied;
                                                          refused: its memories changed
                                                          before it was applied)
``dream_memory_judge_replies_total``           counter    ``outcome`` (duplicate, update,
                                                          distinct: the model's verdict
                                                          on an unsure pair; phrased: a
                                                          merge's text; refused: a
                                                          reply without one; failed: no
                                                          reply)
=============================================  =========  ==================================

Label values come from small fixed sets (a value outside its set is counted as
``other``); owner ids are never labels (one series
per owner would explode). ``dream_memory_pending_items`` is the sum of the pending
queue lengths of the owners this process has seen (each as of the last snapshot
or write it saw; at most 10,000 owners are remembered).

Scraping
--------
*One process* (a script, the MCP server): call :func:`start_http_server` once
(``start_http_server(9464)``) and let Prometheus scrape ``http://host:9464/metrics``.

*A Ray cluster*: the engines run inside owner actors, in worker processes on many
nodes, which no Prometheus can reach one by one. Set ``DREAM_MEMORY_METRICS=ray``
in the actors' environment (e.g. ``runtime_env={"env_vars": {...}}``) and the same
metrics go through ``ray.util.metrics``: Ray's metrics agent on each node exports
them (with a ``ray_`` prefix) on the node's metrics export port
(``ray start --metrics-export-port=8080``), and Prometheus scrapes every node,
discovering them from the service-discovery file Ray writes on the head
(``/tmp/ray/prom_metrics_service_discovery.json``).
``DREAM_MEMORY_METRICS=off`` turns metrics off; the default is ``prometheus``.

Usage::

    from dream_memory_actor.metrics import get_metrics, start_http_server
    start_http_server(9464)
    m = get_metrics()
    m.observe_search("postgres", 0.004)
"""

from __future__ import annotations

import os
import time
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

#: Search and store latencies: 0.5 ms to 10 s.
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                   2.5, 5.0, 10.0)
#: Owners whose pending-queue length is remembered for the pending gauge.
MAX_TRACKED_OWNERS = 10_000
PREFIX = "dream_memory_"


class _Noop:
    """A metric that records nothing (prometheus-client missing, or metrics turned off)."""

    def labels(self, *values: str) -> _Noop:
        return self

    def inc(self, amount: float = 1.0) -> None:
        pass

    def dec(self, amount: float = 1.0) -> None:
        pass

    def set(self, value: float) -> None:
        pass

    def observe(self, value: float) -> None:
        pass


class _RayBound:
    """A ``ray.util.metrics`` metric with its tags bound (what ``labels`` returns)."""

    def __init__(self, metric: Any, kind: str, tags: Mapping[str, str]) -> None:
        self._metric = metric
        self._kind = kind
        self._tags = dict(tags)
        self._value = 0.0  # gauges: ray's Gauge has set() only

    def inc(self, amount: float = 1.0) -> None:
        if self._kind == "gauge":
            self.set(self._value + amount)
        elif amount > 0:
            self._metric.inc(amount, tags=self._tags or None)

    def dec(self, amount: float = 1.0) -> None:
        self.set(self._value - amount)

    def set(self, value: float) -> None:
        self._value = value
        self._metric.set(value, tags=self._tags or None)

    def observe(self, value: float) -> None:
        self._metric.observe(value, tags=self._tags or None)


class _RayMetric(_RayBound):
    """A ``ray.util.metrics`` metric: used as it is without labels, or through ``labels``."""

    def __init__(self, metric: Any, kind: str, label_names: Sequence[str]) -> None:
        super().__init__(metric, kind, {})
        self._names = tuple(label_names)
        self._bound: dict[tuple[str, ...], _RayBound] = {}

    def labels(self, *values: str) -> _RayBound:
        b = self._bound.get(values)
        if b is None:
            b = self._bound[values] = _RayBound(self._metric, self._kind,
                                               dict(zip(self._names, values, strict=True)))
        return b


def _factory(mode: str, registry: Any) -> Any:
    """``make(kind, name, doc, labels)`` for ``mode``, or ``None`` when it is unavailable."""
    if mode == "off":
        return None
    if mode == "ray":
        try:
            from ray.util import metrics as rm
        except ImportError:
            return None

        def make_ray(kind: str, name: str, doc: str, labels: Sequence[str]) -> Any:
            if kind == "counter":
                m: Any = rm.Counter(name, doc, tag_keys=tuple(labels))
            elif kind == "histogram":
                m = rm.Histogram(name, doc, boundaries=list(LATENCY_BUCKETS),
                                 tag_keys=tuple(labels))
            else:
                m = rm.Gauge(name, doc, tag_keys=tuple(labels))
            return _RayMetric(m, kind, labels)

        return make_ray
    try:
        import prometheus_client as pc
    except ImportError:
        return None
    reg = registry if registry is not None else pc.REGISTRY

    def make_prom(kind: str, name: str, doc: str, labels: Sequence[str]) -> Any:
        if kind == "counter":
            return pc.Counter(name, doc, labels, registry=reg)
        if kind == "histogram":
            return pc.Histogram(name, doc, labels, registry=reg, buckets=LATENCY_BUCKETS)
        return pc.Gauge(name, doc, labels, registry=reg)

    return make_prom


class Metrics:
    """The memory's metrics; every method is cheap and never raises.

    ``mode`` is ``prometheus`` (prometheus-client, the default), ``ray``
    (``ray.util.metrics``) or ``off``; a missing library means ``off``.
    """

    def __init__(self, mode: str = "prometheus", registry: Any = None) -> None:
        make = _factory(mode, registry)
        self.mode = mode if make is not None else "off"
        self.enabled = make is not None

        def m(kind: str, name: str, doc: str, *labels: str) -> Any:
            return _Noop() if make is None else make(kind, PREFIX + name, doc, labels)

        self.operations = m("counter", "operations_total",
                            "Memory operations by kind and backend", "kind", "backend")
        self.search_seconds = m("histogram", "search_seconds",
                                "Latency of search (embedding included)", "backend")
        self.store_seconds = m("histogram", "store_seconds",
                               "Latency of store (embedding included)", "backend")
        self.errors = m("counter", "errors_total", "Failed operations by error type",
                        "type", "kind")
        self.merges = m("counter", "merges_total",
                        "Stores merged into a near-duplicate memory", "backend")
        self.judgements = m("counter", "store_judgements_total",
                            "Stores by what the new memory was to its nearest one",
                            "backend", "judgement")
        self.gate = m("counter", "gate_outcomes_total",
                      "Extracted items by what the gate and the writer did with them",
                      "outcome")
        self.hitl = m("counter", "hitl_decisions_total",
                      "Pending items decided by a person", "action")
        self.pending = m("gauge", "pending_items",
                         "Pending items of the owners this process has seen")
        self.live_owners = m("gauge", "live_owner_actors", "Live owner actors")
        self.snapshot_reads = m("counter", "snapshot_reads_total",
                                "Snapshot reads by where they were served", "source")
        self.tool_calls = m("counter", "mcp_tool_calls_total",
                            "MCP tool calls by tool and outcome", "tool", "outcome")
        self.rejected_tokens = m("counter", "mcp_rejected_tokens_total",
                                 "MCP HTTP requests refused for a missing or unknown token")
        self.tokens = m("counter", "extraction_tokens_total",
                        "LLM tokens spent on extraction", "type")
        self.cost = m("counter", "extraction_cost_usd",
                      "LLM cost of extraction in US dollars (where litellm knows the price)")
        self.proposals = m("counter", "consolidation_proposals_total",
                           "Consolidation proposals by what became of them", "outcome")
        self.judge_replies = m("counter", "judge_replies_total",
                               "Unsure pairs put to the judge model, by its outcome", "outcome")
        self._queues: OrderedDict[str, int] = OrderedDict()
        self._queued_total = 0

    # -- operations ----------------------------------------------------------------

    @contextmanager
    def operation(self, kind: str, backend: str) -> Iterator[None]:
        """Count one operation of ``kind``, time it (search and store) and count its error."""
        t0 = time.perf_counter()
        try:
            yield
        except BaseException as exc:
            self.error(type(exc).__name__, kind)
            raise
        finally:
            self.operations.labels(kind, backend).inc()
            if kind == "search":
                self.search_seconds.labels(backend).observe(time.perf_counter() - t0)
            elif kind == "store":
                self.store_seconds.labels(backend).observe(time.perf_counter() - t0)

    def observe_search(self, backend: str, seconds: float) -> None:
        self.operations.labels("search", backend).inc()
        self.search_seconds.labels(backend).observe(seconds)

    def observe_store(self, backend: str, seconds: float, *, merged: bool = False) -> None:
        self.operations.labels("store", backend).inc()
        self.store_seconds.labels(backend).observe(seconds)
        if merged:
            self.merge(backend)

    def merge(self, backend: str) -> None:
        self.merges.labels(backend).inc()

    def judged(self, backend: str, judgement: str | None) -> None:
        """Count one store's judgement (``StoreResult.judgement``; ``None``: nothing near)."""
        self.judgements.labels(backend, judgement or "new").inc()
        if judgement == "duplicate":
            self.merge(backend)

    def error(self, error_type: str, kind: str = "other") -> None:
        self.errors.labels(error_type, kind).inc()

    # -- extraction and the pending queue ------------------------------------------

    def gate_outcomes(self, counts: Mapping[str, int]) -> None:
        """Add one extraction's outcome counts (``ExtractionReport.counts``)."""
        for outcome, n in counts.items():
            if n:
                self.gate.labels(outcome).inc(n)

    def hitl_decision(self, action: str) -> None:
        self.hitl.labels(action).inc()

    def consolidation(self, proposed: int, applied: int, refused: int) -> None:
        for outcome, n in (("proposed", proposed), ("applied", applied),
                           ("refused", refused)):
            if n:
                self.proposals.labels(outcome).inc(n)

    def extraction_usage(self, prompt_tokens: int, completion_tokens: int,
                         cost_usd: float | None) -> None:
        if prompt_tokens:
            self.tokens.labels("prompt").inc(prompt_tokens)
        if completion_tokens:
            self.tokens.labels("completion").inc(completion_tokens)
        if cost_usd:
            self.cost.inc(cost_usd)

    def observe_pending(self, owner: str, queued: int) -> None:
        """``owner``'s pending queue now holds ``queued`` items (the owner is no label)."""
        queues = self._queues
        before = queues.pop(owner, 0)
        queues[owner] = queued
        self._queued_total += queued - before
        while len(queues) > MAX_TRACKED_OWNERS:
            _, n = queues.popitem(last=False)
            self._queued_total -= n
        self.pending.set(self._queued_total)

    def set_live_owners(self, n: int) -> None:
        self.live_owners.set(n)

    # -- reads and the MCP server ------------------------------------------------------

    def snapshot_read(self, source: str) -> None:
        """One snapshot read, served by an owner actor (``actor``) or from the storage
        in this process (``store``)."""
        self.snapshot_reads.labels(_bounded(source, SNAPSHOT_SOURCES)).inc()

    def tool_call(self, tool: str, ok: bool, known: frozenset[str]) -> None:
        """One call of MCP tool ``tool`` (one of ``known``, the server's tool names)."""
        self.tool_calls.labels(_bounded(tool, known), "ok" if ok else "error").inc()

    def rejected_token(self) -> None:
        self.rejected_tokens.inc()

    def judge_reply(self, outcome: str) -> None:
        """One call of the judge model: its verdict, ``refused`` or ``failed``."""
        self.judge_replies.labels(_bounded(outcome, JUDGE_OUTCOMES)).inc()


#: The label values of ``snapshot_reads_total``.
SNAPSHOT_SOURCES = frozenset({"actor", "store"})
#: The label values of ``judge_replies_total``.
JUDGE_OUTCOMES = frozenset({"duplicate", "update", "distinct", "phrased", "refused",
                            "failed"})


def _bounded(value: str, allowed: frozenset[str]) -> str:
    """``value`` if it is one of ``allowed``, else ``other``: a label set stays bounded."""
    return value if value in allowed else "other"


_metrics: Metrics | None = None


def get_metrics() -> Metrics:
    """The process's metrics (created on first use; ``DREAM_MEMORY_METRICS`` picks the mode)."""
    global _metrics
    if _metrics is None:
        mode = os.environ.get("DREAM_MEMORY_METRICS", "prometheus").strip().lower()
        _metrics = Metrics(mode if mode in ("prometheus", "ray", "off") else "prometheus")
    return _metrics


def set_metrics(metrics: Metrics | None) -> None:
    """Replace the process's metrics (``Metrics("off")`` silences them; ``None`` resets)."""
    global _metrics
    _metrics = metrics


def start_http_server(port: int, addr: str = "0.0.0.0") -> bool:
    """Serve ``/metrics`` on ``addr:port`` from a daemon thread; False without prometheus-client.

    It serves the default registry (the one :func:`get_metrics` uses in ``prometheus``
    mode), plus the process and platform collectors prometheus-client registers.
    """
    try:
        import prometheus_client
    except ImportError:
        return False
    get_metrics()
    prometheus_client.start_http_server(port, addr=addr)
    return True
