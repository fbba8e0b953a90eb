"""Ray's face of an asyncio object: a threaded actor with one private event loop.

Ray runs a class with any ``async def`` method as an async actor, and every call
then goes through its event loop, plain methods included: measured here, a no-op
call on an async actor runs at about 0.7x the rate of the same call on a plain
actor, while a threaded actor (``max_concurrency`` > 1, plain methods) runs at
1.0x. The owner-holding actors are asyncio inside (backend I/O, per-owner locks,
bounded waits), but their hottest call, the snapshot read, is a lookup in memory.

So the class Ray sees is a threaded actor built around the asyncio object: plain
public methods (the read) run directly on Ray's call threads; coroutine methods
are handed to one event loop thread owned by the actor, where all asyncio state
lives, and the call thread waits for their result. Whatever a plain method
touches must therefore be safe to read from another thread (see ``LiveSet``).
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Callable
from typing import Any

#: Ray call threads per actor: calls in flight at once (a blocked ``min_version`` wait
#: or a slow extraction holds one). Each costs about 25 KB; ``actor_options`` may
#: override it with ``max_concurrency``.
CALL_THREADS = 64


def _on_loop(name: str) -> Callable[..., Any]:
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        coro = getattr(self._impl, name)(*args, **kwargs)
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    method.__name__ = name
    return method


def _direct(name: str) -> Callable[..., Any]:
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        return getattr(self._impl, name)(*args, **kwargs)

    method.__name__ = name
    return method


def threaded_actor(impl: type) -> type:
    """A plain class, for ``ray.remote(max_concurrency=...)``, serving ``impl``'s
    public methods: coroutine methods on the actor's event loop, the others directly."""
    methods: dict[str, Any] = {}
    for name, fn in inspect.getmembers(impl, inspect.isfunction):
        if not name.startswith("_"):
            methods[name] = (_on_loop if inspect.iscoroutinefunction(fn) else _direct)(name)

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        self._loop = asyncio.new_event_loop()
        threading.Thread(target=self._loop.run_forever, name=f"{impl.__name__}-loop",
                         daemon=True).start()

        async def make() -> Any:  # built on its loop: its asyncio objects belong there
            return impl(*args, **kwargs)

        self._impl = asyncio.run_coroutine_threadsafe(make(), self._loop).result()

    return type(impl.__name__, (), {"__init__": __init__, "__doc__": impl.__doc__,
                                    "__module__": impl.__module__, **methods})
