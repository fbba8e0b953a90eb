"""A pool of Ray actors running extractors (extra ``ray``): LLM calls off the owner actors.

``ExtractorPool`` is a plain object owning private actors, each wrapping the
configured extractor (``open_extractor(settings)``, or ``factory(settings)``).
A call goes to the actor with the fewest calls in flight; each actor is async,
so it waits on many model calls at once. Extraction has no side effects, so a
call lost with a restarted actor is retried by Ray once::

    pool = ExtractorPool(settings, size=4)              # needs ray.init() first
    result = await pool.extract_async(messages)         # or pool.extract(messages)
    service = ExtractionService(writer, store, pool.as_extractor(), settings)
    pool.shutdown()

Errors raised in an actor reach the caller as the same class (``MalformedExtraction``,
``ExtractionUnavailable``, ...); an actor that died is ``ExtractionUnavailable``.
The pool can be passed to other actors (the owner actors): the copy uses the
same extractor actors, and only the creator's ``shutdown()`` ends them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import ray

from .. import validation as check
from ..errors import ConfigurationError, ExtractionUnavailable, SystemClosed
from ..extraction.candidates import ExtractionResult, Extractor
from ..extraction.configured import open_extractor
from ..models import ChatMessage
from .errors import ray_errors

if TYPE_CHECKING:
    from ..config import MemorySettings

#: Builds the extractor inside each actor; must be picklable (a class or a module function).
ExtractorFactory = Callable[["MemorySettings"], Extractor]

MAX_POOL_SIZE = 256


class _ExtractorActor:
    """Private: one extractor in one actor process."""

    def __init__(self, settings: MemorySettings, factory: ExtractorFactory | None) -> None:
        self._extractor = factory(settings) if factory is not None else open_extractor(settings)

    async def ready(self) -> tuple[str, str]:
        """Prepare the extractor (an LLM extractor imports litellm) and say what it is."""
        prepare = getattr(self._extractor, "prepare", None)
        if prepare is not None:
            await prepare()
        return self._extractor.name, self._extractor.source

    async def extract(self, messages: list[ChatMessage]) -> ExtractionResult:
        return await self._extractor.extract(messages)


class ExtractorPool:
    """``size`` extractor actors (default ``settings.extraction_pool_size``)."""

    def __init__(self, settings: MemorySettings, *, size: int | None = None,
                 factory: ExtractorFactory | None = None,
                 actor_options: dict[str, Any] | None = None, start_timeout_s: float = 120.0
                 ) -> None:
        n = settings.extraction_pool_size if size is None else size
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_POOL_SIZE:
            raise ConfigurationError(f"pool size must be an integer in 1..{MAX_POOL_SIZE}, "
                                     f"got {n!r}")
        if not ray.is_initialized():
            raise ConfigurationError("ExtractorPool needs a Ray runtime: call ray.init() first")
        # No CPU slot: the actors wait on HTTP, they do not compute.
        options = {"num_cpus": 0, "max_restarts": 2, "max_task_retries": 1}
        options.update(actor_options or {})
        cls = ray.remote(_ExtractorActor).options(**options)
        self._attach([cls.remote(settings, factory) for _ in range(n)], owns=True)
        try:  # every actor ready before the first call: start-up cost is paid here
            with ray_errors("starting the extractor pool", ExtractionUnavailable):
                self.name, self.source = ray.get([a.ready.remote() for a in self._actors],
                                                 timeout=start_timeout_s)[0]
        except BaseException:
            self.shutdown(force=True)
            raise

    def _attach(self, actors: list[Any], *, owns: bool) -> None:
        """Spread calls over ``actors``; ``owns``: this pool's ``shutdown()`` ends them."""
        self._actors = actors
        self._load = [0] * len(actors)
        self._calls = [0] * len(actors)
        self._refs: set[Any] = set()
        self._closed = False
        self._owns = owns

    @property
    def size(self) -> int:
        return len(self._actors)

    def stats(self) -> dict[str, Any]:
        """Calls sent to each actor and calls in flight."""
        return {"size": self.size, "calls": list(self._calls), "in_flight": list(self._load)}

    def _empty(self) -> ExtractionResult:
        return ExtractionResult(items=(), extractor=self.name, source=self.source)

    @contextlib.contextmanager
    def _call(self, messages: Sequence[ChatMessage]) -> Iterator[Any]:
        """The call's object ref in the least busy actor (``None``: nothing to extract),
        with the actor's load and Ray's errors taken care of."""
        if self._closed:
            raise SystemClosed("this extractor pool was shut down")
        msgs = check.messages(messages)
        i = min(range(len(self._actors)), key=lambda k: (self._load[k], self._calls[k]))
        self._load[i] += 1
        self._calls[i] += 1
        ref = None
        try:
            with ray_errors("extraction", ExtractionUnavailable):
                if msgs:
                    ref = self._actors[i].extract.remote(msgs)
                    self._refs.add(ref)
                yield ref
        finally:
            self._load[i] -= 1
            self._refs.discard(ref)

    def extract(self, messages: Sequence[ChatMessage], *, timeout_s: float | None = None
                ) -> ExtractionResult:
        """Extract in one of the actors; blocks (use :meth:`extract_async` in async code)."""
        with self._call(messages) as ref:
            result: ExtractionResult = (self._empty() if ref is None
                                        else ray.get(ref, timeout=timeout_s))
            return result

    async def extract_async(self, messages: Sequence[ChatMessage]) -> ExtractionResult:
        """Extract in the least busy actor."""
        with self._call(messages) as ref:
            result: ExtractionResult = self._empty() if ref is None else await ref
            return result

    def as_extractor(self) -> Extractor:
        """This pool as an :class:`Extractor`, for :class:`ExtractionService`."""
        return _PoolExtractor(self)

    def shutdown(self, force: bool = False, grace_period_s: float = 5.0) -> None:
        """End the actors; without ``force`` calls in flight get ``grace_period_s`` to finish.
        Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        if not self._owns:
            return  # a copy sent to another process: the creator ends the actors
        running = list(self._refs)
        if running and not force:
            with contextlib.suppress(Exception):
                ray.wait(running, num_returns=len(running), timeout=grace_period_s)
        for actor in self._actors:
            with contextlib.suppress(Exception):
                ray.kill(actor, no_restart=True)

    def __repr__(self) -> str:
        return f"ExtractorPool(size={self.size}, extractor={getattr(self, 'name', '?')!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        # Sent to another actor, the pool is a view on the same actors: it balances its
        # own calls, and its shutdown() does not end them.
        return (_attached, (self._actors, self.name, self.source))


def _attached(actors: list[Any], name: str, source: str) -> ExtractorPool:
    pool = ExtractorPool.__new__(ExtractorPool)
    pool._attach(list(actors), owns=False)
    pool.name, pool.source = name, source
    return pool


class _PoolExtractor:
    def __init__(self, pool: ExtractorPool) -> None:
        self._pool = pool
        self.name = pool.name
        self.source = pool.source

    async def extract(self, messages: Sequence[ChatMessage]) -> ExtractionResult:
        return await self._pool.extract_async(messages)

