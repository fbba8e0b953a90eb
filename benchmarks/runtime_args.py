"""The options every runtime benchmark takes, and the local system they describe."""

from __future__ import annotations

import argparse
import contextlib
import uuid
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dream_memory_actor.runtime.client import MemorySystem


def add_runtime_arguments(parser: argparse.ArgumentParser, *,
                          backends: Sequence[str] = ("memory", "postgres"),
                          default: str = "memory") -> None:
    """``--backend``, ``--postgres-dsn``, ``--placement``, ``--shards``; ``--redis-url``
    too when ``backends`` holds ``redis``."""
    parser.add_argument("--backend", choices=list(backends), default=default,
                        help="postgres without --postgres-dsn uses the embedded server")
    parser.add_argument("--postgres-dsn", default=None)
    if "redis" in backends:
        parser.add_argument("--redis-url", default=None,
                            help="with --backend redis: the server (the run writes under a "
                                 "key prefix of its own, deleted afterwards)")
    parser.add_argument("--placement", choices=["sharded", "dedicated"], default="sharded")
    parser.add_argument("--shards", type=int, default=2)


def system_from_args(args: argparse.Namespace, name: str, **settings: Any
                     ) -> contextlib.AbstractContextManager[MemorySystem]:
    """A ``local_system`` with the backend, placement and shards the options give."""
    from dream_memory_actor.runtime.local import local_system

    if args.backend == "redis":
        return _on_redis(args, name, settings)
    return local_system(backend=args.backend, placement=args.placement,
                        postgres_dsn=args.postgres_dsn, name=name,
                        shards=getattr(args, "shards", 2), **settings)


@contextlib.contextmanager
def _on_redis(args: argparse.Namespace, name: str, settings: dict[str, Any]
              ) -> Iterator[MemorySystem]:
    """The system on ``--redis-url`` under a fresh key prefix, whose keys (and search
    indexes) are deleted afterwards."""
    from dream_memory_actor.runtime.local import local_system

    url = getattr(args, "redis_url", None)
    if not url:
        raise SystemExit("--backend redis needs --redis-url")
    prefix = f"bench_{uuid.uuid4().hex[:10]}"
    try:
        with local_system(backend="redis", placement=args.placement, name=name,
                          shards=getattr(args, "shards", 2), redis_url=url,
                          redis_prefix=prefix, **settings) as system:
            yield system
    finally:
        _drop_prefix(url, prefix)


def _drop_prefix(url: str, prefix: str) -> None:
    import redis

    client: Any = redis.Redis.from_url(url)
    try:
        try:
            for index in client.execute_command("FT._LIST"):
                if index.decode().startswith(f"{prefix}:"):
                    client.execute_command("FT.DROPINDEX", index)
        except redis.exceptions.ResponseError:
            pass  # a server without the search module has no indexes
        keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
        for i in range(0, len(keys), 500):
            client.unlink(*keys[i:i + 500])
    finally:
        client.close()
