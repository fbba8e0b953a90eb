"""What every entry point (the CLI, the MCP server, the review page) shares about its
process: the installed version, the running memory system it goes through (named by an
environment variable, or by the routing options), the platform notes it silences, and
a clean exit on SIGTERM.

A memory system's owner actors hold their owners' snapshots; a command that writes
through the system (``--system NAME``, or ``DREAM_MEMORY_SYSTEM``) is applied by the
actor that holds the owner, so agents read it at once. Without a system named, the
command opens the storage in this process (no Ray import): the owner actors learn of
the write from the store's change feed (``storage.changes``). The system is joined on
the Ray cluster at ``--ray-address`` (default ``$RAY_ADDRESS``, else ``auto``: the one
of this node).

SIGTERM is the signal systemd, Docker and Kubernetes send to stop a process.
Python's default for SIGTERM ends the process at once: no ``finally`` block and no
``atexit`` handler runs, so an embedded PostgreSQL started here would keep running
with this process still listed as one of its users. :func:`exit_on_sigterm` makes
SIGTERM raise :class:`Terminated` (a ``SystemExit``) in the main thread instead, so
the process unwinds as it does on Ctrl-C. uvicorn captures SIGTERM while it serves
and raises it again once it has stopped, which then reaches this handler.
"""

from __future__ import annotations

import argparse
import os
import signal
import threading
import warnings
from types import FrameType

#: The package's version; the installed distribution's is what :func:`version` reports.
__version__ = "0.1.0"

#: The environment variable naming the running memory system the doors go through.
SYSTEM_ENV = "DREAM_MEMORY_SYSTEM"


def route_options() -> argparse.ArgumentParser:
    """A parent parser with ``--system`` and ``--ray-address`` (see the module docstring)."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--system", default=os.environ.get(SYSTEM_ENV) or None, metavar="NAME",
                   help=f"go through the running memory system NAME (default: ${SYSTEM_ENV}; "
                        "none: open the storage in this process)")
    p.add_argument("--ray-address", dest="route_ray_address", metavar="ADDRESS",
                   default=os.environ.get("RAY_ADDRESS") or "auto",
                   help="the Ray cluster of --system (default: $RAY_ADDRESS, else auto)")
    return p


def version() -> str:
    """The installed distribution's version (the package's own when not installed)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("dream-memory-actor")
    except PackageNotFoundError:
        return __version__


def quiet_platform_warnings() -> None:
    """Silence the platform's note that XDG_RUNTIME_DIR is unset (a headless host):
    the embedded server falls back to a private directory, nothing for a user to do."""
    warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")


class Terminated(SystemExit):
    """Raised in the main thread on SIGTERM; ``code`` is 128 + the signal number."""


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise Terminated(128 + signum)


def exit_on_sigterm() -> bool:
    """Make SIGTERM raise :class:`Terminated`, unless its handler was already changed
    (or this is not the main thread, where handlers cannot be set). True if installed."""
    if threading.current_thread() is not threading.main_thread():
        return False
    current = signal.getsignal(signal.SIGTERM)
    if current is _terminate:
        return True
    if current is not signal.SIG_DFL:
        return False
    signal.signal(signal.SIGTERM, _terminate)
    return True
