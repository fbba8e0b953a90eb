"""The MCP server of dream-memory-actor: memory as MCP tools over stdio or streamable HTTP.

Run it with ``python -m dream_memory_actor.mcp`` (see :mod:`.entry`), or from code::

    from dream_memory_actor.mcp import serve, TokenMap
    serve(MemorySettings(), "http", "127.0.0.1", 8765, TokenMap.load("tokens.json"))

Tools, resource and prompt: see :mod:`.server` and :mod:`.tools`.
Over HTTP a bearer token maps to the owners it may read and write
(:mod:`..engine.auth`);
over stdio there is no token: the local user who started the process owns it.
"""

try:
    import mcp  # noqa: F401 - the SDK of the mcp extra
except ImportError as exc:  # pragma: no cover - exercised via the extras message
    from ..errors import missing_dependency

    raise missing_dependency("mcp", "mcp") from exc

from ..engine.auth import AccessDenied, Grant, TokenMap, hash_token
from ..engine.doors import LocalBackend, MemoryBackend
from .entry import main
from .server import UnauthenticatedHTTP, build_server, http_app, serve, serve_async

__all__ = [
    "AccessDenied",
    "Grant",
    "LocalBackend",
    "MemoryBackend",
    "RayBackend",
    "TokenMap",
    "UnauthenticatedHTTP",
    "build_server",
    "hash_token",
    "http_app",
    "main",
    "serve",
    "serve_async",
]


def __getattr__(name: str) -> object:
    if name == "RayBackend":  # the Ray runtime is an extra of its own: imported on use
        from ..runtime.doors import RayBackend

        return RayBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
