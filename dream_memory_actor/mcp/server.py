"""The MCP server: memory as tools, a resource and a prompt, over stdio or streamable HTTP.

Tools: the table of :mod:`.tools` (read_snapshot, search, store, add_rule, ...), each
with a title, hints (read-only, destructive, idempotent), described and bounded
parameters (:mod:`.params`) and a typed output schema. Resource: the snapshot of
every owner, ``memory://{owner}/snapshot`` (JSON). Prompt: ``memory_prompt``, the
owner's rules, facts and status as a system-prompt block.

Every owner argument is checked (``validation``) and then authorized: over HTTP
against the caller's bearer token (see :mod:`..engine.auth`; no or an unknown token is
answered with HTTP 401 before any tool runs), over stdio not at all (the local user
owns the process). A server without a token map has no HTTP app unless the caller
opts in for loopback (``http_app(..., allow_unauthenticated=True)``). Our typed
errors become MCP tool errors (``is_error``) whose text is ``"<ErrorType>: <message>"``;
anything unexpected is answered by the SDK with ``Error executing tool <name>``, never
a traceback.
"""

from __future__ import annotations

import inspect
import json
import socket
from typing import Any, Literal

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.server.mcpserver.tools.base import Tool
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, ToolAnnotations
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..config import MemorySettings
from ..engine.auth import LOCAL, AccessDenied, Grant, TokenMap, hash_token, is_loopback
from ..engine.doors import LocalBackend, MemoryBackend
from ..errors import ConfigurationError, DreamMemoryError
from ..metrics import get_metrics
from ..process import version
from .params import document, plain, plain_schema
from .tools import TOOLS, Door, ToolEntry

Transport = Literal["stdio", "http"]
SERVER_NAME = "dream-memory"
MCP_PATH = "/mcp"
SNAPSHOT_URI = "memory://{owner}/snapshot"
_OWNERS_CLAIM = "dream_memory_owners"
INSTRUCTIONS = (
    "Shared long-term memory of the owners (users, teams) this connection may use. "
    "At the start of a conversation read the owner's rules, facts and status "
    "(read_snapshot, or the memory_prompt prompt) and follow the rules. When the user "
    "says how agents should behave from now on, record it with add_rule; lasting facts "
    "with add_fact; what is going on now with set_status. Store what is worth finding "
    "later with store and find it with search. Send the conversation with "
    "append_messages and end_conversation so that what the user said is extracted; "
    "uncertain extractions wait for a person in list_pending, as do the merges, "
    "supersessions and expiries consolidate proposes.")


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


def make_tool(entry: ToolEntry, door: Door, settings: MemorySettings) -> Tool:
    """The SDK tool of ``entry``: its function with the door bound, errors made tool
    errors, each call counted; parameters described and bounded, descriptions plain."""
    fn = entry.fn
    known = frozenset(e.name for e in TOOLS)
    metrics = get_metrics()

    async def run(**kwargs: Any) -> Any:
        ok = False
        try:
            result = await fn(door, **kwargs)
            ok = True
            return result
        except DreamMemoryError as exc:  # a tool error with a clear message, no traceback
            raise ToolError(public_message(exc)) from None
        finally:
            metrics.tool_call(entry.name, ok, known)

    sig = inspect.signature(fn, eval_str=True)
    run.__signature__ = sig.replace(parameters=list(sig.parameters.values())[1:])  # type: ignore[attr-defined]
    run.__name__ = entry.name
    run.__doc__ = fn.__doc__
    tool = Tool.from_function(run, name=entry.name, title=entry.title,
                              description=plain(inspect.cleandoc(fn.__doc__ or "")),
                              annotations=ToolAnnotations(
                                  readOnlyHint=entry.effect == "read",
                                  destructiveHint=entry.effect == "destructive",
                                  idempotentHint=entry.idempotent, openWorldHint=False))
    document(tool.parameters, settings, entry.params)
    plain_schema(tool.parameters)
    if tool.output_schema is not None:
        plain_schema(tool.output_schema)
    return tool


def build_server(backend: MemoryBackend, token_map: TokenMap | None = None, *,
                 issuer_url: str = "http://127.0.0.1",
                 tools: tuple[ToolEntry, ...] = TOOLS) -> MCPServer:
    """The MCP server over ``backend``. With ``token_map`` every call needs a bearer token
    (HTTP); without it every owner is allowed (stdio: the local user owns the process)."""
    auth = verifier = None
    if token_map is not None:
        if not len(token_map):
            raise ConfigurationError("the MCP token map is empty: no token could call the server")
        auth = AuthSettings(issuer_url=issuer_url, resource_server_url=None)
        verifier = _Verifier(token_map)

    def grant() -> Grant:
        if token_map is None:
            return LOCAL
        token = get_access_token()
        claims = token.claims if token is not None else None
        if token is None or not claims or _OWNERS_CLAIM not in claims:
            raise AccessDenied("authentication required")  # fail closed
        return Grant(name=token.client_id, owners=frozenset(claims[_OWNERS_CLAIM]))

    door = Door(backend, grant)
    server: MCPServer = MCPServer(
        SERVER_NAME, title="dream-memory", version=version(),
        description="Shared long-term memory for LLM agents: rules, facts, status, "
                    "semantic search and a human-in-the-loop queue.",
        instructions=INSTRUCTIONS, auth=auth, token_verifier=verifier, log_level="WARNING",
        tools=[make_tool(e, door, backend.settings) for e in tools])
    _add_snapshot_resource(server, door)
    _add_prompt(server, door)
    return server


def _add_snapshot_resource(server: MCPServer, door: Door) -> None:
    @server.resource(SNAPSHOT_URI, name="snapshot", title="An owner's memory",
                     description="The owner's rules, facts, status and pending items, "
                                 "as JSON (what read_snapshot returns).",
                     mime_type="application/json")
    async def snapshot(owner: str) -> str:
        try:
            snap = await door.backend.snapshot(door.owner(owner))
        except DreamMemoryError as exc:
            raise ResourceError(public_message(exc)) from None
        return json.dumps({**snap.model_dump(mode="json"), "prompt": snap.to_prompt()})


def _add_prompt(server: MCPServer, door: Door) -> None:
    @server.prompt(name="memory_prompt", title="The owner's memory for a system prompt",
                   description="The owner's rules, facts and current status as the block "
                               "to put in a system prompt.")
    async def memory_prompt(owner: str) -> str:
        try:
            snap = await door.backend.snapshot(door.owner(owner))
        except DreamMemoryError as exc:
            raise MCPError(INVALID_PARAMS, public_message(exc)) from None
        return snap.to_prompt()


class UnauthenticatedHTTP(ConfigurationError):
    """An HTTP app of a server without a token map, not explicitly allowed on loopback:
    it would serve every owner's memory to whoever can reach it."""


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


class _CountRejected:
    """ASGI middleware counting the requests answered 401 (no token, or an unknown one)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def counted(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] == 401:
                get_metrics().rejected_token()
            await send(message)

        await self.app(scope, receive, counted)


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
    else:
        app.add_middleware(_CountRejected)
    return app


async def open_backend(settings: MemorySettings, ray_system: str | None = None,
                       ray_address: str | None = "auto") -> MemoryBackend:
    """In-process memory (default), or the running Ray memory system ``ray_system``."""
    if ray_system is not None:
        from ..runtime.doors import RayBackend

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
