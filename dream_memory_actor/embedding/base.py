"""The embedder protocol and a content-hash cache in front of any embedder.

An embedder turns texts into vectors of a fixed dimension. These ship with the
library: :class:`~dream_memory_actor.embedding.litellm.LiteLLMEmbedder` (any
provider litellm supports), :class:`~dream_memory_actor.embedding.local.LocalEmbedder`
(sentence-transformers, offline) and, in
:mod:`~dream_memory_actor.embedding.multilingual`, multilingual-e5-small and
USE multilingual (numpy, offline). Anything with ``model``, ``dim`` and
``async embed(texts)`` works.

Two roles: ``embed(texts)`` embeds memories (what is stored), and an embedder
may also define ``async embed_query(texts)`` for search queries (models such as
e5 are trained with a different prefix for each). Without it, queries go
through ``embed``. An embedder may also carry a ``calibration``
(:class:`~dream_memory_actor.embedding.calibration.Calibration`) mapping its raw
cosine to the common scale; without one, the raw cosine is used as it is.
"""

from __future__ import annotations

import abc
import asyncio
import hashlib
import os
import unicodedata
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np

from .. import validation as check
from ..errors import ConfigurationError, EmbeddingError, InvalidContent, InvalidEmbedding
from ..text import MemoryText, context_lines
from .calibration import IDENTITY, Calibration
from .turns import ModelTurns

Role = Literal["memory", "query"]


class UnembeddableText(InvalidContent):
    """A text no embedding model can take: nothing left to embed once white space,
    control and format characters are set aside, a lone surrogate (not encodable
    as UTF-8), or a NUL character. Nothing was written."""


def _has_words(text: str) -> bool:
    """Whether ``text`` has something to embed: a character that is not white space, a
    control or a format character (a context line of only those is no part of a vector)."""
    return any(unicodedata.category(ch)[0] not in "ZC" for ch in text)


def check_embeddable(texts: Sequence[str]) -> None:
    """Raise ``UnembeddableText`` for the first text an embedder cannot take."""
    for i, text in enumerate(texts):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise UnembeddableText(
                f"text #{i} is not valid Unicode (a lone surrogate at position {exc.start})"
            ) from None
        if "\x00" in text:
            raise UnembeddableText(f"text #{i} contains a NUL character")
        if not _has_words(text):
            raise UnembeddableText(
                f"text #{i} has nothing to embed (only white space, control or format "
                "characters)"
            )


def checked_rows(rows: Iterable[Any], dim: int, model: str, start: int = 0
                 ) -> list[list[float]]:
    """A local model's output rows as checked vectors (``EmbeddingError`` names the text
    of an unusable one, counting from ``start``)."""
    out = []
    for i, row in enumerate(rows, start):
        try:
            out.append(check.embedding(row, dim))
        except InvalidEmbedding as exc:
            raise EmbeddingError(
                f"local model {model!r} gave an unusable vector for text #{i}: {exc}") from exc
    return out


def _cpus() -> int:
    """The CPUs this process may use (its affinity, else every CPU of the machine)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def texts_of(texts: Sequence[str]) -> list[str]:
    """``texts`` as a list, or ``TypeError`` for a lone string or a non-string item, then
    ``UnembeddableText`` for a text no embedder can take (:func:`check_embeddable`)."""
    if isinstance(texts, str):
        raise TypeError("embed() takes a sequence of texts, not a single string")
    batch = list(texts)
    for i, text in enumerate(batch):
        if not isinstance(text, str):
            raise TypeError(f"text #{i} is a {type(text).__name__}, not a str")
    check_embeddable(batch)
    return batch


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors of ``dim`` floats (``embed_query`` is optional, see above)."""

    model: str
    dim: int

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per memory text, in order. Raises ``EmbeddingError`` on failure."""
        ...


def calibration_of(embedder: object) -> Calibration:
    """The embedder's ``calibration``, or the identity when it has none."""
    found = getattr(embedder, "calibration", None)
    if found is None:
        return IDENTITY
    if not isinstance(found, Calibration):
        raise ConfigurationError(
            f"embedder calibration must be a Calibration, got {type(found).__name__}")
    return found


class InProcessEmbedder(abc.ABC):
    """An embedder whose model runs in this process (the numpy and sentence-transformers
    ones): loaded on first use, every call in a worker thread, ``engines`` at a time with
    a search's query first (:class:`~.turns.ModelTurns`), every failure of loading or
    encoding an ``EmbeddingError``. A turn that waits for the model and runs it longer
    than ``timeout_s`` (``embedding_timeout_s``; loading the model not counted) is an
    ``EmbeddingError`` too, and leaves its place in the queue."""

    model: str
    dim: int
    timeout_s: float | None = None
    #: The most texts one turn of the model embeds: a call of more takes several turns,
    #: and a search's query waiting meanwhile goes between two (an import of thousands
    #: of texts does not hold the model for minutes), each turn within ``timeout_s``.
    chunk = 32
    #: How many calls the model runs at once (each on an engine of its own), how many
    #: more engines only a search's query takes, and how many more memory texts take
    #: while no query comes (``turns.ModelTurns``).
    engines = 1
    query_engines = 0
    idle_engines = 0
    _turns: ModelTurns | None = None
    _ready = False

    @abc.abstractmethod
    def _loaded(self) -> Any:
        """The model, loaded the first time (blocking), with the lock(s) its calls take."""

    @abc.abstractmethod
    def _encode(self, texts: list[str], query: bool) -> list[list[float]]:
        """Checked vectors of ``texts`` as queries or as memories (blocking)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r}, dim={self.dim})"

    async def load(self) -> None:
        """Load the model now (in a worker thread) instead of on the first call."""
        try:
            await asyncio.to_thread(self._loaded)
        except ConfigurationError as exc:
            raise EmbeddingError(str(exc)) from exc

    async def _embed(self, texts: Sequence[str], query: bool) -> list[list[float]]:
        batch = texts_of(texts)
        if not batch:
            return []
        self._turns = turns = ModelTurns.for_loop(self._turns, self.engines,
                                                  self.query_engines, self.idle_engines)

        async def encoded(part: list[str]) -> list[list[float]]:
            async with turns.turn(query):
                return await asyncio.to_thread(self._encode, part, query)

        out: list[list[float]] = []
        try:
            if not self._ready:  # loading is not the call's time (torch imports in seconds)
                await asyncio.to_thread(self._loaded)
                self._ready = True
            for start in range(0, len(batch), self.chunk):
                out += await asyncio.wait_for(encoded(batch[start:start + self.chunk]),
                                              self.timeout_s)
            return out
        except asyncio.TimeoutError:
            raise EmbeddingError(
                f"local model {self.model!r} gave no vectors within {self.timeout_s} s "
                f"(waiting for its other calls included)") from None
        except EmbeddingError:
            raise
        except ConfigurationError as exc:  # the model could not be loaded
            raise EmbeddingError(str(exc)) from exc
        except Exception as exc:
            raise EmbeddingError(f"local model {self.model!r} failed: {exc}") from exc

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One normalised vector per memory text, in order; ``EmbeddingError`` on failure."""
        return await self._embed(texts, False)


#: How much each line of a memory's context weighs in its vector, against its content's 1
#: (:func:`memory_vector`).
CONTEXT_LINE_WEIGHT = 0.5
#: How many of a context's lines, its first, count in a memory's vector (the keyword
#: signal reads them all): a long context costs the model a few short texts, and the
#: content keeps at least a third of the vector (the extraction path gives three lines,
#: a date and two turns).
CONTEXT_LINES_EMBEDDED = 4


def memory_vector(content: Sequence[float], lines: Sequence[Sequence[float]]
                  ) -> list[float]:
    """A memory's vector from its content's and its context lines' vectors: the content's
    (unit) vector plus half of each line's, made unit again; a memory without context is
    its content's vector as it is. The content stays what the vector says most; a
    session's date or the turn before adds to it without outweighing it.

    Against one vector of the content and its context joined, on LoCoMo (the date and two
    previous turns, ``python -m benchmarks retrieval --context beside``): vector signal
    recall@10 within half a point, hybrid recall@10 and MRR higher."""
    if not lines:
        return list(content)
    mixed = _unit(np.asarray(content, dtype=np.float64))
    for v in lines:
        mixed = mixed + CONTEXT_LINE_WEIGHT * _unit(np.asarray(v, dtype=np.float64))
    return [float(x) for x in _unit(mixed)]


def _unit(v: np.ndarray) -> np.ndarray:
    n = float(np.linalg.norm(v))
    return v / n if n > 0 else v


class CachedEmbedder:
    """An LRU cache keyed by (model, role, sha256 of the text) in front of an embedder.

    Every text entering it is checked (:func:`check_embeddable`) and every vector
    leaving it is checked (dimension, finite), so a provider that returns garbage
    raises ``EmbeddingError`` instead of polluting the index. ``calibration`` is
    the given one, else the inner embedder's, else the identity.
    """

    def __init__(self, inner: Embedder, max_entries: int = 10_000,
                 calibration: Calibration | None = None) -> None:
        self.inner = inner
        self.model = inner.model
        self.dim = inner.dim
        self.max_entries = max_entries
        self.calibration = calibration if calibration is not None else calibration_of(inner)
        #: Whether the inner embedder embeds queries differently from memories.
        self.has_query_role = callable(getattr(inner, "embed_query", None))
        self._cache: OrderedDict[str, list[float]] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def _key(self, text: str, role: Role) -> str:
        tag = role if self.has_query_role else "memory"
        return hashlib.sha256(f"{self.model}\x00{tag}\x00{text}".encode()).hexdigest()

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Vectors of memory texts (what is stored)."""
        return await self._embed(texts, "memory")

    async def embed_query(self, texts: Sequence[str]) -> list[list[float]]:
        """Vectors of search queries (the inner ``embed_query``, else ``embed``)."""
        return await self._embed(texts, "query")

    async def _embed(self, texts: Sequence[str], role: Role) -> list[list[float]]:
        texts = texts_of(texts)
        keys = [self._key(t, role) for t in texts]
        missing = list(dict.fromkeys(k for k in keys if k not in self._cache))
        self.hits += len(keys) - len(missing)
        self.misses += len(missing)
        if missing:
            by_key = {k: t for k, t in zip(keys, texts, strict=True)}
            batch = [by_key[k] for k in missing]
            if role == "query" and self.has_query_role:
                vectors = await self.inner.embed_query(batch)  # type: ignore[attr-defined]
            else:
                vectors = await self.inner.embed(batch)
            if len(vectors) != len(missing):
                raise EmbeddingError(
                    f"embedder {self.model!r} returned {len(vectors)} vectors for "
                    f"{len(missing)} texts"
                )
            for k, v in zip(missing, vectors, strict=True):
                try:
                    self._cache[k] = check.embedding(v, self.dim)
                except ValueError as exc:
                    raise EmbeddingError(f"embedder {self.model!r}: {exc}") from exc
        out = []
        for k in keys:
            self._cache.move_to_end(k)
            out.append(self._cache[k])
        while len(self._cache) > self.max_entries:
            self._cache.popitem(last=False)
        return out

    async def embed_one(self, text: str) -> list[float]:
        """The vector of one memory text."""
        return (await self.embed([text]))[0]

    async def embed_memories(self, memories: Sequence[MemoryText | str]) -> list[list[float]]:
        """The vectors of memories (a content, or a content and its context), each its
        content with its context's first :data:`CONTEXT_LINES_EMBEDDED` lines
        (:func:`memory_vector`), in one call of the model for the texts not yet in the
        cache. Lines are embedded one by one, so the lines a conversation repeats (its
        date, the turn a memory answers, itself stored before) come from the cache: a
        store with context costs the model about what one without does (``python -m
        benchmarks context-latency``)."""
        pairs = [(m, None) if isinstance(m, str) else m for m in memories]
        parts = [(content, [line for line in context_lines(context) if _has_words(line)]
                  [:CONTEXT_LINES_EMBEDDED] if context else [])
                 for content, context in pairs]
        texts = list(dict.fromkeys(t for content, lines in parts for t in (content, *lines)))
        found = dict(zip(texts, await self.embed(texts), strict=True)) if texts else {}
        return [memory_vector(found[content], [found[line] for line in lines])
                for content, lines in parts]

    def clear(self) -> None:
        """Forget every cached vector (the hit and miss counts stay)."""
        self._cache.clear()

    async def embed_query_one(self, text: str) -> list[float]:
        """The vector of one search query."""
        return (await self.embed_query([text]))[0]
