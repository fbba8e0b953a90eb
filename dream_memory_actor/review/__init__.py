"""The review pages: a person confirms or rejects what waits in the pending queue.

``dream-memory review`` serves them (:mod:`.cli`); from code,
``create_app(backend, tokens)`` (:mod:`.app`) is a Starlette app over the doors'
memory interface: ``engine.doors.LocalBackend`` (the storage in this process) or
``runtime.doors.RayBackend`` (a running memory system's owner actors). Pages are
rendered on the server (:mod:`.render`, ``templates/``); a small script makes the
decisions happen in place. Access, sessions and CSRF: :mod:`.sessions`.
"""

from __future__ import annotations

from typing import Any

__all__ = ["create_app"]


def __getattr__(name: str) -> Any:  # the web stack is imported when first used
    if name == "create_app":
        from .app import create_app

        return create_app
    raise AttributeError(name)
