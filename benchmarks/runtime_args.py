"""The options every runtime benchmark takes, and the local system they describe."""

from __future__ import annotations

import argparse
import contextlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dream_memory_actor.runtime.client import MemorySystem


def add_runtime_arguments(parser: argparse.ArgumentParser) -> None:
    """``--backend``, ``--postgres-dsn``, ``--placement``, ``--shards``."""
    parser.add_argument("--backend", choices=["memory", "postgres"], default="memory",
                        help="postgres without --postgres-dsn uses the embedded server")
    parser.add_argument("--postgres-dsn", default=None)
    parser.add_argument("--placement", choices=["sharded", "dedicated"], default="sharded")
    parser.add_argument("--shards", type=int, default=2)


def system_from_args(args: argparse.Namespace, name: str, **settings: Any
                     ) -> contextlib.AbstractContextManager[MemorySystem]:
    """A ``local_system`` with the backend, placement and shards the options give."""
    from dream_memory_actor.runtime.local import local_system

    return local_system(backend=args.backend, placement=args.placement,
                        postgres_dsn=args.postgres_dsn, name=name,
                        shards=getattr(args, "shards", 2), **settings)
