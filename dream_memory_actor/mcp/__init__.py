"""The MCP server of dream-memory-actor: memory as MCP tools over stdio or streamable HTTP.

Run it with ``python -m dream_memory_actor.mcp`` (see :mod:`.entry`), or from code::

    from dream_memory_actor.mcp import serve, TokenMap
    serve(MemorySettings(), "http", "127.0.0.1", 8765, TokenMap.load("tokens.json"))

Over HTTP a bearer token maps to the owners it may read and write (:mod:`.auth`);
over stdio there is no token: the local user who started the process owns it.
"""

from .auth import AccessDenied, Grant, TokenMap, hash_token
from .backend import LocalBackend, MemoryBackend, RayBackend
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
