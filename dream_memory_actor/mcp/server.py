"""The MCP server: memory as tools, over stdio or streamable HTTP.

Tools: ``read_snapshot``, ``search``, ``store``, ``list_pending``, ``confirm_pending``,
``reject_pending``. Every owner argument is checked (``validation``) and then
authorized: over HTTP against the caller's bearer token (see :mod:`.auth`; no or an
unknown token is answered with HTTP 401 before any tool runs), over stdio not at
all (the local user owns the process). A server without a token map has no HTTP
app unless the caller opts in for loopback (``http_app(..., allow_unauthenticated=True)``).
Our typed errors become MCP tool errors
(``is_error``) whose text is ``"<ErrorType>: <message>"``; anything unexpected is
answered by the SDK with ``Error executing tool <name>``, never a traceback.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
from collections.abc import Iterator
from typing import Any, Literal

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from .. import validation as check
from ..config import MemorySettings
from ..errors import ConfigurationError, DreamMemoryError, InvalidQuery
from .auth import LOCAL, AccessDenied, Grant, TokenMap, hash_token
from .backend import LocalBackend, MemoryBackend, RayBackend

Transport = Literal["stdio", "http"]
SERVER_NAME = "dream-memory"
MCP_PATH = "/mcp"
_OWNERS_CLAIM = "dream_memory_owners"


class _Verifier:
    """The SDK's ``TokenVerifier`` over our token map."""

    def __init__(self, tokens: TokenMap) -> None:
        self.tokens = tokens

    async def verify_token(self, token: str) -> AccessToken | None:
        grant = self.tokens.verify(token)
        if grant is None:
            return None
        return AccessToken(token=hash_token(token), client_id=grant.name, scopes=[],
                           subject=grant.name,
                           claims={_OWNERS_CLAIM: sorted(grant.owners)})


@contextlib.contextmanager
def _tool_errors() -> Iterator[None]:
    """Our errors -> an MCP tool error with a clear message (no traceback, no chain)."""
    try:
        yield
    except DreamMemoryError as exc:
        raise ToolError(public_message(exc)) from None


def public_message(exc: BaseException) -> str:
    """``"<ErrorType>: <message>"`` without any traceback text.

    An error raised inside a Ray actor arrives as ``RayTaskError(<ErrorType>)``, an
    instance of both, whose text is the remote traceback: its ``cause`` is the original.
    """
    for _ in range(8):
        cause = getattr(exc, "cause", None)
        if not isinstance(cause, BaseException) or cause is exc:
            break
        exc = cause
    text = str(exc)
    if "Traceback" in text or '  File "' in text:  # never show frames, keep the last line
        last = next((ln for ln in reversed(text.splitlines()) if ln.strip()), "")
        text = last.split(": ", 1)[1] if ": " in last else "internal error"
    return f"{type(exc).__name__}: {text}"


def _dump(model: BaseModel) -> dict[str, Any]:
    out: dict[str, Any] = model.model_dump(mode="json")
    return out


def build_server(backend: MemoryBackend, token_map: TokenMap | None = None, *,
                 issuer_url: str = "http://127.0.0.1") -> MCPServer:
    """The MCP server over ``backend``. With ``token_map`` every call needs a bearer token
    (HTTP); without it every owner is allowed (stdio: the local user owns the process)."""
    auth = verifier = None
    if token_map is not None:
        if not len(token_map):
            raise ConfigurationError("the MCP token map is empty: no token could call the server")
        auth = AuthSettings(issuer_url=issuer_url, resource_server_url=None)
        verifier = _Verifier(token_map)
    server: MCPServer = MCPServer(
        SERVER_NAME, instructions=(
            "Shared long-term memory: read an owner's rules, facts and status "
            "(read_snapshot), search and store semantic memories, and work the "
            "human-in-the-loop queue (list_pending, confirm_pending, reject_pending)."),
        auth=auth, token_verifier=verifier, log_level="WARNING")

    def grant() -> Grant:
        if token_map is None:
            return LOCAL
        token = get_access_token()
        claims = token.claims if token is not None else None
        if token is None or not claims or _OWNERS_CLAIM not in claims:
            raise AccessDenied("authentication required")  # fail closed
        return Grant(name=token.client_id, owners=frozenset(claims[_OWNERS_CLAIM]))

    def owner_ok(owner: str) -> tuple[str, Grant]:
        checked = check.owner_id(owner)
        who = grant()
        who.check([checked])
        return checked, who

    @server.tool()
    async def read_snapshot(owner: str) -> dict[str, Any]:
        """The owner's structured memory: rules, facts, status, pending items, and the
        prompt text an agent would put in its system prompt."""
        with _tool_errors():
            who, _ = owner_ok(owner)
            snap = await backend.snapshot(who)
            return {**_dump(snap), "prompt": snap.to_prompt()}

    @server.tool()
    async def search(query: str, owner: str | None = None, owners: list[str] | None = None,
                     limit: int = 10) -> dict[str, Any]:
        """Hybrid search over the semantic memories of one owner (``owner``) or several
        (``owners``), best first."""
        with _tool_errors():
            if (owner is None) == (owners is None):
                raise InvalidQuery("give exactly one of owner or owners")
            who = check.owner_ids(owner if owner is not None else owners)
            check.limit(limit)
            grant().check(who)
            hits = await backend.search(who, query, limit)
            return {"hits": [_dump(h) for h in hits]}

    @server.tool()
    async def store(owner: str, content: str, metadata: dict[str, Any] | None = None
                    ) -> dict[str, Any]:
        """Store a semantic memory for the owner (merged into a near-duplicate if any)."""
        with _tool_errors():
            who, _ = owner_ok(owner)
            check.content(content, backend.settings.max_content_bytes)
            meta = check.metadata(metadata, backend.settings.limits)
            return _dump(await backend.store(who, content, meta))

    @server.tool()
    async def list_pending(owner: str) -> dict[str, Any]:
        """Extracted memories waiting for a person to confirm or reject them."""
        with _tool_errors():
            who, _ = owner_ok(owner)
            items = await backend.pending(who)
            return {"pending": [{**_dump(p), "description": p.describe()} for p in items]}

    @server.tool()
    async def confirm_pending(owner: str, pending_id: str, edited_content: str | None = None
                              ) -> dict[str, Any]:
        """Write a pending item (``edited_content`` replaces its text) and remove it from
        the queue. Idempotent; an error if it was rejected."""
        with _tool_errors():
            who, by = owner_ok(owner)
            check.ids([pending_id], "pending item id")
            if edited_content is not None:
                check.content(edited_content, backend.settings.max_content_bytes,
                              "edited content")
            return _dump(await backend.confirm(who, pending_id, by.name, edited_content))

    @server.tool()
    async def reject_pending(owner: str, pending_id: str) -> dict[str, Any]:
        """Drop a pending item. Idempotent; an error if it was confirmed."""
        with _tool_errors():
            who, by = owner_ok(owner)
            check.ids([pending_id], "pending item id")
            return _dump(await backend.reject(who, pending_id, by.name))

    return server


class UnauthenticatedHTTP(ConfigurationError):
    """An HTTP app of a server without a token map, not explicitly allowed on loopback:
    it would serve every owner's memory to whoever can reach it."""


def is_loopback(host: str) -> bool:
    """``localhost`` or a loopback address (127.0.0.0/8, ::1)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class _LoopbackOnly:
    """ASGI middleware answering 403 to every peer that is not on this machine's loopback,
    whatever address the app was bound to."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        client = scope.get("client")
        if scope["type"] in ("http", "websocket") and not (client and is_loopback(client[0])):
            await PlainTextResponse("loopback clients only", status_code=403)(
                scope, receive, send)
            return
        await self.app(scope, receive, send)


def http_app(server: MCPServer, host: str = "127.0.0.1", *,
             allow_unauthenticated: bool = False) -> Starlette:
    """The streamable HTTP ASGI app (endpoint ``/mcp``); run it with uvicorn.

    ``server`` must have been built with a token map: a server without one grants
    every owner to every caller, so its app is refused (``UnauthenticatedHTTP``)
    unless ``allow_unauthenticated=True`` and ``host`` is a loopback address; that
    app then answers 403 to any peer not on loopback.
    """
    authenticated = server.settings.auth is not None
    if not authenticated:
        if not allow_unauthenticated:
            raise UnauthenticatedHTTP(
                "this MCP server has no token map: over HTTP it would serve every owner "
                "to anyone; build it with a TokenMap, or pass allow_unauthenticated=True "
                "to serve on loopback only")
        if not is_loopback(host):
            raise UnauthenticatedHTTP(
                f"an MCP server without a token map serves loopback only, not {host!r}")
    app = server.streamable_http_app(streamable_http_path=MCP_PATH, host=host)
    if not authenticated:
        app.add_middleware(_LoopbackOnly)
    return app


async def open_backend(settings: MemorySettings, ray_system: str | None = None,
                       ray_address: str | None = "auto") -> MemoryBackend:
    """In-process memory (default), or the running Ray memory system ``ray_system``."""
    if ray_system is not None:
        return RayBackend.connect(ray_system, ray_address)
    return await LocalBackend.open(settings)


def listen_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host``:``port`` and listening, or ``ConfigurationError``
    (bad port, unknown host, address in use), before anything else is opened."""
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise ConfigurationError(f"the MCP HTTP port must be 1-65535, got {port!r}")
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        raise ConfigurationError(f"cannot listen on {host}:{port}: {exc}") from exc
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise ConfigurationError(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    return sock


async def serve_async(settings: MemorySettings, transport: Transport = "stdio",
                      host: str = "127.0.0.1", port: int = 8765,
                      token_map: TokenMap | None = None, *, ray_system: str | None = None,
                      ray_address: str | None = "auto") -> None:
    """Serve until stopped (end of stdin, or SIGINT/SIGTERM over HTTP).

    Over HTTP the port is bound before the memory is opened: a port in use is a
    ``ConfigurationError`` and no storage (no embedded PostgreSQL) was started.
    """
    if transport == "http" and token_map is None:
        raise ConfigurationError(
            "the HTTP transport needs a token map (--tokens FILE or DREAM_MEMORY_MCP_TOKENS)")
    if transport not in ("stdio", "http"):
        raise ConfigurationError(f"unknown MCP transport {transport!r}: use stdio or http")
    sock = listen_socket(host, port) if transport == "http" else None
    try:
        backend = await open_backend(settings, ray_system, ray_address)
        try:
            if sock is None:
                await build_server(backend).run_stdio_async()
                return
            import uvicorn

            server = build_server(backend, token_map, issuer_url=f"http://{host}:{port}")
            config = uvicorn.Config(http_app(server, host), host=host, port=port,
                                    log_level="warning")
            await uvicorn.Server(config).serve(sockets=[sock])
        finally:
            await backend.close()
    finally:
        if sock is not None:
            sock.close()


def serve(settings: MemorySettings, transport: Transport = "stdio", host: str = "127.0.0.1",
          port: int = 8765, token_map: TokenMap | None = None, *,
          ray_system: str | None = None, ray_address: str | None = "auto") -> None:
    """Blocking entry point of ``dream-memory mcp`` and ``python -m dream_memory_actor.mcp``."""
    import anyio

    anyio.run(lambda: serve_async(settings, transport, host, port, token_map,
                                  ray_system=ray_system, ray_address=ray_address))
