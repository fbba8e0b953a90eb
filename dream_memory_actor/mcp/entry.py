"""``python -m dream_memory_actor.mcp``: run the MCP server from a terminal.

::

    python -m dream_memory_actor.mcp                          # stdio, for a local MCP client
    python -m dream_memory_actor.mcp --transport http --port 8765 --tokens tokens.json
    echo -n "$TOKEN" | python -m dream_memory_actor.mcp --hash-token   # a token map key

Memory settings come from ``DREAM_MEMORY_*`` and ``--config FILE`` as everywhere else;
``--ray-system NAME`` (or ``DREAM_MEMORY_SYSTEM``) serves a running Ray memory system
instead of an in-process one; an in-process server's writes reach the system's owner
actors through the store's change feed.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from ..config import MemorySettings
from ..engine.auth import ENV_VAR, TokenMap, hash_token
from ..errors import DreamMemoryError
from ..process import SYSTEM_ENV, Terminated, exit_on_sigterm, quiet_platform_warnings, version
from .server import serve


def build_parser(prog: str = "python -m dream_memory_actor.mcp") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog,
                                description="Serve dream-memory over MCP (stdio or HTTP).")
    p.add_argument("--version", action="version", version=f"dream-memory MCP server {version()}")
    p.add_argument("--transport", choices=("stdio", "http"), default="stdio")
    p.add_argument("--host", default="127.0.0.1", help="HTTP: address to bind (default local)")
    p.add_argument("--port", type=int, default=8765, help="HTTP: port (default 8765)")
    p.add_argument("--tokens", metavar="FILE",
                   help=f"HTTP: token map (JSON/YAML; default: ${ENV_VAR})")
    p.add_argument("--config", metavar="FILE", help="memory settings YAML file")
    p.add_argument("--backend", choices=("memory", "postgres", "redis"),
                   help="override the configured storage backend")
    p.add_argument("--ray-system", metavar="NAME", default=os.environ.get(SYSTEM_ENV) or None,
                   help="serve the running Ray memory system NAME instead of in-process "
                        f"memory (default: ${SYSTEM_ENV})")
    p.add_argument("--ray-address", default=os.environ.get("RAY_ADDRESS") or "auto",
                   help="Ray address for --ray-system (default: $RAY_ADDRESS, else auto)")
    p.add_argument("--metrics-port", type=int, default=None, metavar="PORT",
                   help="serve Prometheus /metrics of this process on PORT (127.0.0.1)")
    p.add_argument("--hash-token", action="store_true",
                   help="print the SHA-256 of the token read on stdin (a token map key) and exit")
    return p


def main(argv: Sequence[str] | None = None, prog: str = "python -m dream_memory_actor.mcp"
         ) -> int:
    """The MCP server's command line; ``prog`` is how its help names it."""
    quiet_platform_warnings()
    args = build_parser(prog).parse_args(argv)
    if args.hash_token:
        token = sys.stdin.readline().rstrip("\r\n")
        if not token:
            print("error: no token on stdin", file=sys.stderr)
            return 2
        print(hash_token(token))
        return 0
    exit_on_sigterm()  # SIGTERM unwinds like Ctrl-C: the memory is closed, storage stopped
    try:
        overrides = {"backend": args.backend} if args.backend else {}
        settings = (MemorySettings.from_yaml(args.config, **overrides) if args.config
                    else MemorySettings(**overrides))
        tokens = TokenMap.load(args.tokens) if args.tokens else TokenMap.from_env()
        if args.transport == "stdio" and args.tokens:
            print("note: --tokens is ignored over stdio (the local user owns the process)",
                  file=sys.stderr)
        if args.metrics_port is not None:
            from ..metrics import start_http_server

            if not start_http_server(args.metrics_port, addr="127.0.0.1"):
                print("note: prometheus-client is not installed; no /metrics "
                      "(pip install 'dream-memory-actor[metrics]')", file=sys.stderr)
        serve(settings, args.transport, args.host, args.port,
              tokens if args.transport == "http" else None,
              ray_system=args.ray_system, ray_address=args.ray_address)
    except DreamMemoryError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Terminated:
        return 0  # asked to stop, and stopped cleanly
    return 0
