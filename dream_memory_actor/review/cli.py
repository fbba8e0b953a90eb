"""``dream-memory review``: serve the review pages (what it does and its options:
:data:`HELP`, its ``--help``)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from typing import Any

from ..engine.auth import is_loopback
from ..process import route_options

DEFAULT_PORT = 8780

#: What ``dream-memory review --help`` says, as plain text.
HELP = """\
Serve the review pages of the human-in-the-loop queue.

  dream-memory review                                # http://127.0.0.1:8780, local user
  dream-memory review --tokens tokens.json --system prod --host 0.0.0.0 \\
      --allowed-host review.example.org --ssl-certfile cert.pem --ssl-keyfile key.pem

Decisions go through the running memory system --system NAME (or
DREAM_MEMORY_SYSTEM) when one is named, otherwise through the storage opened in
this process. --tokens (default $DREAM_MEMORY_MCP_TOKENS) is the MCP server's
token map: each token sees and decides only its owners. Without one the pages serve
the local user and may only be bound to a loopback address.
"""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``review`` to ``sub`` (the ``dream-memory`` program's subcommands)."""
    p = sub.add_parser(
        "review",
        parents=[route_options()],
        help="serve the review pages of the human-in-the-loop queue",
        description=HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    p.add_argument(
        "--allowed-host",
        dest="allowed_hosts",
        action="append",
        default=[],
        metavar="NAME",
        help="a host name the pages answer to besides localhost, 127.0.0.1, ::1 and the "
             "--host address (repeatable; e.g. the name reviewers type); others get 421",
    )
    p.add_argument(
        "--tokens",
        metavar="FILE",
        help="token map, as for the MCP server (default: $DREAM_MEMORY_MCP_TOKENS)",
    )
    p.add_argument(
        "--owner",
        dest="owners",
        action="append",
        default=[],
        metavar="OWNER",
        help="list OWNER on the overview of a token granting every owner (repeatable)",
    )
    p.add_argument("--config", metavar="FILE", help="memory settings YAML file")
    p.add_argument(
        "--session-idle-min",
        type=float,
        default=30.0,
        metavar="MIN",
        help="log a reviewer out after MIN minutes without a request (default 30)",
    )
    p.add_argument("--ssl-certfile", metavar="FILE", help="serve https with this certificate")
    p.add_argument("--ssl-keyfile", metavar="FILE", help="the certificate's private key")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Serve until interrupted; 2 on a configuration error."""
    import sys

    from ..config import MemorySettings
    from ..engine.auth import TokenMap
    from ..errors import DreamMemoryError

    try:
        settings = MemorySettings.from_yaml(args.config) if args.config else MemorySettings()
        tokens = TokenMap.load(args.tokens) if args.tokens else TokenMap.from_env()
        serve(
            settings,
            args.host,
            args.port,
            tokens,
            system=args.system,
            ray_address=args.route_ray_address,
            owners=args.owners,
            idle_s=args.session_idle_min * 60,
            ssl=(args.ssl_certfile, args.ssl_keyfile),
            allowed_hosts=args.allowed_hosts,
        )
    except DreamMemoryError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0


def serve(
    settings: Any,
    host: str,
    port: int,
    tokens: Any,
    *,
    system: str | None = None,
    ray_address: str | None = "auto",
    owners: Sequence[str] = (),
    idle_s: float = 1800.0,
    ssl: tuple[str | None, str | None] = (None, None),
    allowed_hosts: Sequence[str] = (),
) -> None:
    """Serve the review pages on ``host``:``port`` until interrupted. They answer to the
    loopback names, ``host`` (unless a wildcard address) and ``allowed_hosts``."""
    import asyncio

    from ..errors import ConfigurationError

    if tokens is None and not is_loopback(host):
        raise ConfigurationError(
            f"refusing to serve the review pages on {host!r} without a token map: anyone "
            "reaching it could decide for every owner. Give --tokens FILE (or "
            "$DREAM_MEMORY_MCP_TOKENS), or bind 127.0.0.1."
        )
    if bool(ssl[0]) != bool(ssl[1]):
        raise ConfigurationError("--ssl-certfile and --ssl-keyfile go together")
    if ssl[0] and not os.path.exists(ssl[0]):
        raise ConfigurationError(f"no certificate file {ssl[0]!r}")
    import uvicorn

    from ..engine.doors import LocalBackend, MemoryBackend
    from .app import LOOPBACK_HOSTS, create_app
    from .sessions import SessionStore

    names = [*LOOPBACK_HOSTS, *([] if host in ("0.0.0.0", "::", "") else [host]),
             *allowed_hosts]

    async def run() -> None:
        backend: MemoryBackend
        if system:
            from ..runtime.doors import RayBackend

            backend = RayBackend.connect(system, ray_address)
        else:
            backend = await LocalBackend.open(settings)
        try:
            app = create_app(backend, tokens, owners=owners,
                             sessions=SessionStore(idle_s=idle_s), allowed_hosts=names)
            scheme = "https" if ssl[0] else "http"
            print(
                f"review pages on {scheme}://{host}:{port}/ (decisions through the "
                f"{backend.route})",
                flush=True,
            )
            config = uvicorn.Config(
                app,
                host=host,
                port=port,
                log_level="warning",
                lifespan="off",
                ssl_certfile=ssl[0],
                ssl_keyfile=ssl[1],
            )
            await uvicorn.Server(config).serve()
        finally:
            await backend.close()

    asyncio.run(run())
