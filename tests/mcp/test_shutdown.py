"""``dream-memory mcp --transport http`` as a service manager runs it: a real process on the
embedded PostgreSQL, stopped with SIGTERM, killed, or unable to bind its port."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from dream_memory_actor.mcp import hash_token

from .conftest import free_port

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

STARTUP_S = 120.0


@pytest.fixture
def data() -> Iterator[Path]:
    """A data directory the PostgreSQL user can reach (pytest's base temp dir is 0700)."""
    path = Path(tempfile.mkdtemp(prefix="dm-test-shutdown-"))
    path.chmod(0o755)
    try:
        yield path / "data"
    finally:
        pid_file = path / "data" / "pg" / "postmaster.pid"
        if pid_file.exists():  # a failed test: stop what it left running
            with contextlib.suppress(psutil.Error):
                psutil.Process(int(pid_file.read_text().split()[0])).terminate()
        shutil.rmtree(path, ignore_errors=True)


def _env(data_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DREAM_MEMORY_")}
    env.update(DREAM_MEMORY_BACKEND="postgres", DREAM_MEMORY_DATA_DIR=str(data_dir),
               PYTHONPATH=os.getcwd())
    return env


def _tokens(tmp_path: Path) -> Path:
    path = tmp_path / "tokens.json"
    path.write_text(json.dumps({"tokens": {hash_token("tok-shutdown-0123456789"): ["a"]}}))
    return path


def _start(tmp_path: Path, data_dir: Path, port: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "dream_memory_actor.cli", "mcp", "--transport", "http",
         "--port", str(port), "--tokens", str(_tokens(tmp_path))],
        env=_env(data_dir), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        # As from a terminal: a test run started in the background (``cmd &``) ignores
        # SIGINT, and an ignored signal stays ignored in the children it starts.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _serving(proc: subprocess.Popen[str], port: int) -> None:
    deadline = time.monotonic() + STARTUP_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(_messages(proc.communicate()[1])[-3:])
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/mcp", timeout=2)
        except urllib.error.HTTPError as exc:
            assert exc.code == 401  # up, and asking for a token
            return
        except OSError:
            time.sleep(0.3)
    raise AssertionError("the MCP HTTP server did not start")


def _postmaster(data_dir: Path) -> int:
    return int((data_dir / "pg" / "postmaster.pid").read_text().split()[0])


def _handles(data_dir: Path) -> list[int]:
    path = data_dir / "pg" / ".handle_pids.json"
    return json.loads(path.read_text()) if path.exists() else []


def _gone(pid: int, within_s: float = 30.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
            return True
        time.sleep(0.2)
    return False


def _messages(stderr: str) -> list[str]:
    """What the process said, without the platform's warning about a missing runtime dir."""
    return [line for line in stderr.splitlines() if line.strip()
            and "RuntimeDirWarning" not in line and "user_runtime_dir" not in line]


def _stop(proc: subprocess.Popen[str], sig: int) -> tuple[int, str]:
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    return proc.returncode, err


def test_sigterm_stops_the_embedded_postgres(tmp_path: Path, data: Path) -> None:
    port = free_port()
    proc = _start(tmp_path, data, port)
    try:
        _serving(proc, port)
        postmaster = _postmaster(data)
        assert _handles(data) == [proc.pid]
        code, err = _stop(proc, signal.SIGTERM)
    finally:
        proc.kill()
    assert code == 0, err
    assert "Traceback" not in err
    assert _gone(postmaster), "the embedded PostgreSQL outlived the SIGTERM"
    assert _handles(data) == []


def test_sigint_stops_the_embedded_postgres(tmp_path: Path, data: Path) -> None:
    port = free_port()
    proc = _start(tmp_path, data, port)
    try:
        _serving(proc, port)
        postmaster = _postmaster(data)
        code, err = _stop(proc, signal.SIGINT)
    finally:
        proc.kill()
    assert code == 130, err
    assert _gone(postmaster) and _handles(data) == []


def test_a_dead_users_handle_is_recovered_by_the_next_start(tmp_path: Path, data: Path
                                                            ) -> None:
    port = free_port()
    first = _start(tmp_path, data, port)
    try:
        _serving(first, port)
        orphan = _postmaster(data)
        _stop(first, signal.SIGKILL)  # no handler runs: the pid stays in the handle file
    finally:
        first.kill()
    assert _handles(data) == [first.pid] and psutil.pid_exists(orphan)
    second = _start(tmp_path, data, port)
    try:
        _serving(second, port)
        assert _postmaster(data) == orphan  # joined, not started twice
        assert _handles(data) == [second.pid]
        code, err = _stop(second, signal.SIGTERM)
    finally:
        second.kill()
    assert code == 0, err
    assert _gone(orphan), "the orphaned PostgreSQL was not stopped"
    assert _handles(data) == []


def test_a_port_in_use_is_a_one_line_error_and_starts_nothing(tmp_path: Path, data: Path
                                                             ) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        proc = _start(tmp_path, data, taken.getsockname()[1])
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    (line,) = _messages(err)
    assert line.startswith("error: cannot listen on 127.0.0.1:")
    assert not (data / "pg" / "postmaster.pid").exists() and _handles(data) == []


@pytest.mark.parametrize("port", ["-1", "0", "70000"])
def test_a_bad_port_is_a_one_line_error(tmp_path: Path, port: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "dream_memory_actor.cli", "mcp", "--transport", "http",
         "--port", port, "--tokens", str(_tokens(tmp_path))],
        env=_env(tmp_path / "data"), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert _messages(proc.stderr) == [f"error: the MCP HTTP port must be 1-65535, got {port}"]
