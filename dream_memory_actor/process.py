"""What every entry point (the CLI, the MCP server, the review page) shares about its
process: the installed version, the environment variable naming the running memory
system, and the platform notes it silences."""

from __future__ import annotations

import warnings

#: The environment variable naming the running memory system the doors go through.
SYSTEM_ENV = "DREAM_MEMORY_SYSTEM"


def version() -> str:
    """The installed distribution's version (the package's own when not installed)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("dream-memory-actor")
    except PackageNotFoundError:
        from . import __version__

        return __version__


def quiet_platform_warnings() -> None:
    """Silence the platform's note that XDG_RUNTIME_DIR is unset (a headless host):
    the embedded server falls back to a private directory, nothing for a user to do."""
    warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
