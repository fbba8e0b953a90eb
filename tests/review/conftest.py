"""The review pages under test: a served app on a free port, tokens, seeded queues."""

from __future__ import annotations

import asyncio
import os
import re
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import uvicorn

from dream_memory_actor.engine.auth import TokenMap, hash_token
from dream_memory_actor.models import MemoryPendingItem, utcnow

TOKEN_ALICE = "review-alice-3f9c2b7d"
TOKEN_OSCAR = "review-oscar-8e1a4c6f"
TOKEN_ADMIN = "review-admin-5d7b9e2a"
#: Debian's Chromium: the browser the page tests drive (browser downloads are not used).
CHROMIUM = os.environ.get("REVIEW_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def tokens() -> TokenMap:
    return TokenMap.parse(
        {
            hash_token(TOKEN_ALICE): {"owners": ["alice"], "name": "ana"},
            hash_token(TOKEN_OSCAR): {"owners": ["oscar"], "name": "olga"},
            hash_token(TOKEN_ADMIN): {"owners": ["*"], "name": "ops"},
        }
    )


def queue() -> dict[str, list[MemoryPendingItem]]:
    """What waits: for alice a rule, a fact, a status change and a semantic memory;
    for oscar one rule."""
    return {
        "alice": [
            MemoryPendingItem(
                kind="rule",
                content="Prefer pytest over unittest in examples",
                confidence=0.62,
                evidence="user: we use pytest everywhere, please stop writing unittest classes",
            ),
            MemoryPendingItem(
                kind="fact",
                content="Alice moved the team to Berlin",
                confidence=0.41,
                evidence="user: the office is in Berlin now",
            ),
            MemoryPendingItem(
                kind="status",
                key="deploy",
                value="frozen until Friday",
                confidence=0.57,
                evidence="user: no deploys until Friday",
            ),
            MemoryPendingItem(
                kind="memory",
                content="The staging cluster is rebuilt every Monday morning",
                confidence=0.48,
                source="llm",
                expires_at=utcnow() + timedelta(days=7),
                evidence="assistant: staging was rebuilt again this Monday",
            ),
        ],
        "oscar": [
            MemoryPendingItem(kind="rule", content="Oscar wants answers in German", confidence=0.55)
        ],
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def served(app: Any) -> Iterator[str]:
    """``app`` served by uvicorn on 127.0.0.1 in a thread of its own; yields the base URL."""
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    )
    thread = threading.Thread(target=lambda: asyncio.run(server.serve()), daemon=True)
    thread.start()
    for _ in range(500):
        if server.started or not thread.is_alive():
            break
        threading.Event().wait(0.02)
    assert server.started, "the review server did not start"
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def hidden(html: str, name: str, after: str = "") -> str:
    """The value of the hidden field ``name`` (the first one after the text ``after``)."""
    start = html.index(after) if after else 0
    found = re.search(rf'name="{name}" value="([^"]*)"', html[start:])
    assert found, f"no hidden field {name!r} in the page"
    return found.group(1)
