"""Where the operator's commands go: a running memory system, or the storage directly.

A memory system's owner actors hold their owners' snapshots; a command that
writes through the system (``--system NAME``, or ``DREAM_MEMORY_SYSTEM``) is
applied by the actor that holds the owner, so agents read it at once. Without a
system named, the command opens the storage in this process (no Ray import): the
owner actors learn of the write from the store's change feed (``storage.changes``).
The system is joined with ``MemorySystem.connect`` on the Ray cluster at
``--ray-address`` (default ``$RAY_ADDRESS``, else ``auto``: the one of this node).
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from ..process import SYSTEM_ENV


def route_options() -> argparse.ArgumentParser:
    """A parent parser with ``--system`` and ``--ray-address``."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--system", default=os.environ.get(SYSTEM_ENV) or None, metavar="NAME",
                   help=f"go through the running memory system NAME (default: ${SYSTEM_ENV}; "
                        "none: open the storage in this process)")
    p.add_argument("--ray-address", dest="route_ray_address", metavar="ADDRESS",
                   default=os.environ.get("RAY_ADDRESS") or "auto",
                   help="the Ray cluster of --system (default: $RAY_ADDRESS, else auto)")
    return p


def owner_handle(args: argparse.Namespace) -> Any:
    """The handle on ``args.owner`` in the system ``args.system`` (joined here)."""
    from ..runtime import MemorySystem

    system = MemorySystem.connect(args.system, ray_address=args.route_ray_address)
    return system.owner(args.owner)

