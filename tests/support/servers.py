"""Real servers for the test session: started here, or named by an environment variable.

A test that needs a server gets it from these helpers or fails loudly; nothing
is silently skipped.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_ports(n: int) -> list[int]:
    """``n`` different free ports (each held until all are chosen: two calls of
    :func:`free_port` may return the same one)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


@contextmanager
def embedded_postgres() -> Iterator[str]:
    """A PostgreSQL 18 + pgvector server in a temporary directory; yields its DSN.

    ``DREAM_MEMORY_TEST_PG_DSN`` points the tests at another server instead.
    """
    dsn = os.environ.get("DREAM_MEMORY_TEST_PG_DSN")
    if dsn:
        yield dsn
        return
    from dream_memory_actor.storage.postgres.embedded import start_embedded

    data = tempfile.mkdtemp(prefix="dm-test-pg-")
    server = start_embedded(data, cleanup="delete")
    try:
        yield server.get_uri()
    finally:
        server.cleanup()
        shutil.rmtree(data, ignore_errors=True)
