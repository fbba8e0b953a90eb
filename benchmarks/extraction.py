"""Extraction throughput: candidates/s through the extractor pool against a fixed-delay server.

A tiny OpenAI-compatible server in this process answers every chat completion
after a fixed delay with the same ``--items`` candidates, so the figures
measure our overhead and parallelism, not a model. ``calls`` extractions run
with ``concurrency`` in flight, through the Ray pool (``--mode pool``) and/or an
``LLMExtractor`` in this process (``--mode local``).

Each call's time at the caller is split (means, and shares of the total):
the server's fixed delay; litellm and HTTP (time in ``acompletion`` and
``completion_cost`` minus the delay); our code (prompt building, parsing and
validation: the extraction's own time outside litellm); and Ray and queueing
(time at the caller outside the extraction: scheduling, serialization, and
waiting for a busy actor's event loop; zero in local mode but for the loop).

On a small machine the figures are CPU-bound in litellm (its per-call work
is milliseconds of CPU), so ``litellm_http`` grows with ``--concurrency``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from pydantic import SecretStr

from dream_memory_actor.config import MemorySettings
from dream_memory_actor.models import ChatMessage

from .stats import command, machine, percentiles_ms

_MESSAGES = [
    ChatMessage(role="user", content="From now on, review for security first."),
    ChatMessage(role="assistant", content="Understood: security first in every review."),
    ChatMessage(role="user", content="I am a Java developer working on dream-saas."),
    ChatMessage(role="user", content="We went live on Kubernetes with helm yesterday."),
]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--mode", choices=["pool", "local", "both"], default="both")
    p.add_argument("--pool-size", type=int, default=2)
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--delay-ms", type=float, default=50.0, help="the server's fixed delay")
    p.add_argument("--items", type=int, default=5, help="candidates in each reply")


class FixedDelayServer:
    """``POST /v1/chat/completions`` answered after ``delay_s`` with ``items`` candidates."""

    def __init__(self, delay_s: float, items: int) -> None:
        content = json.dumps({"items": [
            {"kind": "fact", "content": f"The user knows topic {i}", "confidence": 0.9,
             "evidence": "I am a Java developer working on dream-saas."}
            for i in range(items)]})
        body = json.dumps({
            "id": "chatcmpl-bench", "object": "chat.completion", "created": 0,
            "model": "bench-model",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": 400, "completion_tokens": 40 * items,
                      "total_tokens": 400 + 40 * items}}).encode()

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                time.sleep(delay_s)
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


async def _drive(extract: Any, calls: int, concurrency: int, delay_s: float) -> dict[str, Any]:
    gate = asyncio.Semaphore(concurrency)
    seen: list[tuple[float, Any]] = []

    async def one() -> None:
        async with gate:
            t0 = time.perf_counter()
            result = await extract(_MESSAGES)
            seen.append((time.perf_counter() - t0, result))

    for _ in range(min(concurrency, 4)):  # warm-up: connections, first-call costs
        await one()
    seen.clear()
    start = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(calls)))
    wall = time.perf_counter() - start
    n = len(seen)
    caller = sum(s for s, _ in seen) / n
    llm = sum(r.llm_s for _, r in seen) / n
    total = sum(r.total_s for _, r in seen) / n
    parts = {"server_delay": delay_s, "litellm_http": max(llm - delay_s, 0.0),
             "our_code": max(total - llm, 0.0),
             "ray_and_queue": max(caller - total, 0.0)}
    return {
        "calls": n,
        "wall_s": round(wall, 3),
        "calls_per_s": round(n / wall, 1),
        "candidates_per_s": round(sum(len(r.items) for _, r in seen) / wall, 1),
        "ideal_calls_per_s": round(concurrency / delay_s, 1),
        "latency": percentiles_ms([s for s, _ in seen]),
        "mean_ms": {k: round(v * 1000, 3) for k, v in parts.items()},
        "share": {k: round(v / caller, 4) for k, v in parts.items()},
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from dream_memory_actor.extraction.llm import LLMExtractor
    from dream_memory_actor.runtime.extractor_pool import ExtractorPool

    delay_s = args.delay_ms / 1000.0
    server = FixedDelayServer(delay_s, args.items)
    settings = MemorySettings(
        backend="memory", extraction_model="openai/bench-model",
        extraction_api_base=server.base_url, extraction_api_key=SecretStr("sk-bench"),
        extraction_timeout_s=30.0, extraction_max_retries=0)
    out: dict[str, Any] = {
        "benchmark": "extraction", "machine": machine(), "delay_ms": args.delay_ms,
        "items_per_call": args.items, "concurrency": args.concurrency,
        "messages_per_call": len(_MESSAGES), "command": command(),
    }
    try:
        if args.mode in ("local", "both"):
            local = LLMExtractor.from_settings(settings)
            await local.prepare()
            out["local"] = await _drive(local.extract, args.calls, args.concurrency, delay_s)
        if args.mode in ("pool", "both"):
            import ray

            started = not ray.is_initialized()
            if started:
                ray.init(address="local", num_cpus=2, include_dashboard=False,
                         logging_level=logging.WARNING)
            try:
                t0 = time.perf_counter()
                pool = ExtractorPool(settings, size=args.pool_size)
                start_s = time.perf_counter() - t0
                try:
                    out["pool"] = await _drive(pool.extract_async, args.calls,
                                               args.concurrency, delay_s)
                    out["pool"]["pool_size"] = args.pool_size
                    out["pool"]["start_s"] = round(start_s, 2)
                finally:
                    pool.shutdown()
            finally:
                if started:
                    ray.shutdown()
    finally:
        server.stop()
    return out
