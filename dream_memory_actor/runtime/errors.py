"""The runtime's errors, and the translation of Ray's errors into the hierarchy.

Two public classes join the tree of :mod:`dream_memory_actor.errors`::

    DreamMemoryError
    ├── RuntimeUnavailable       no Ray runtime, no such system, an actor unreachable
    └── RuntimeTimeout           a call or a ``min_version`` wait ran out of time
                                 (also a TimeoutError)

Our own errors raised inside an actor reach the caller as the same class (Ray
wraps them in ``RayTaskError``; :func:`unwrap` takes the wrapper off). Every Ray
call of the library runs inside :func:`ray_errors`, the one place where Ray's
errors become the project's::

    with ray_errors("extraction", ExtractionUnavailable):
        result = ray.get(ref, timeout=timeout_s)
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

from ray.exceptions import GetTimeoutError, RayActorError, RayError, RayTaskError

from ..errors import DreamMemoryError


class RuntimeUnavailable(DreamMemoryError):
    """No Ray runtime, no memory system of that name, or an actor stayed unreachable.

    Raised, for example, by a handle used in a process that is not connected to
    Ray, and after the bounded retries of a call whose actor kept failing.
    """


class RuntimeTimeout(DreamMemoryError, TimeoutError):
    """A call did not finish in time, or ``snapshot(min_version=v)`` never saw version v.

    A write that timed out may or may not have been applied: retry it with the
    same ``op_id`` and it is applied once.
    """


class OwnerMoved(DreamMemoryError):
    """Internal: the owner was passivated while the call waited; the client retries.

    Never reaches a caller: the client re-locates the owner and calls again.
    """


def unwrap(exc: BaseException) -> BaseException | None:
    """The project's error inside a ``RayTaskError`` (any depth), or ``None``."""
    seen = 0
    while isinstance(exc, RayTaskError) and seen < 8:
        cause = exc.cause
        if cause is None or cause is exc:
            return None
        exc = cause
        seen += 1
    return exc if isinstance(exc, DreamMemoryError) else None


def retryable(exc: BaseException) -> bool:
    """True for a failure another attempt (same op id) may get past: the actor
    restarted, died, was passivated, or its node went away."""
    if isinstance(exc, RayTaskError):
        return isinstance(unwrap(exc), OwnerMoved)
    if isinstance(exc, OwnerMoved):
        return True
    return isinstance(exc, RayActorError) or (
        isinstance(exc, RayError) and not isinstance(exc, GetTimeoutError)
    )


def translate(exc: BaseException, what: str,
              as_error: type[DreamMemoryError] | None = None) -> BaseException:
    """The error to raise for ``exc`` (chain it with ``from exc``); ``exc`` itself when it
    is no Ray error. ``as_error`` replaces the class of a translated error (a call that
    ran out of time, failed in the actor, or found no actor)."""
    # Unwrap first: Ray's RayTaskError(X) is also an instance of X, and returned as
    # is it would carry Ray's remote traceback as its message.
    inner = unwrap(exc)
    if inner is not None:
        return inner
    if isinstance(exc, DreamMemoryError):
        return exc
    if isinstance(exc, (GetTimeoutError, TimeoutError, asyncio.TimeoutError)):
        return (as_error or RuntimeTimeout)(f"{what} did not finish in time")
    if isinstance(exc, RayTaskError):
        return (as_error or DreamMemoryError)(f"{what} failed inside the actor: {exc.cause!r}")
    if isinstance(exc, RayError):
        return (as_error or RuntimeUnavailable)(
            f"{what}: the actor is unavailable ({type(exc).__name__})")
    return exc


def reraise(exc: BaseException, what: str, as_error: type[DreamMemoryError] | None = None
            ) -> NoReturn:
    """Raise the translated error ``from exc``, or ``exc`` itself when it needs none."""
    err = translate(exc, what, as_error)
    if err is exc:
        raise exc
    raise err from exc


@contextmanager
def ray_errors(what: str, as_error: type[DreamMemoryError] | None = None) -> Iterator[None]:
    """Run Ray calls; what they raise leaves as the project's error (see :func:`translate`)."""
    try:
        yield
    except Exception as exc:
        reraise(exc, what, as_error)
