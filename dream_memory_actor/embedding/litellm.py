"""Embeddings from any provider litellm supports (extra ``litellm``).

``LiteLLMEmbedder.open("openai/text-embedding-3-small", api_base=..., api_key=...)``
returns an embedder whose ``dim`` is given or probed with one short request.
Inputs are sent in batches of :data:`BATCH_SIZE` texts per request, in order.

Text no model can take raises ``UnembeddableText`` before any request (see
``base.check_embeddable``); a text longer than the provider's window is the
provider's to refuse (OpenAI answers HTTP 400, an ``EmbeddingError``) or to
truncate. Every failure (timeouts, HTTP 4xx/5xx, a body that is not JSON, missing fields,
the wrong number of vectors, a vector of the wrong dimension or with
non-finite values) raises :class:`~dream_memory_actor.errors.EmbeddingError`
with the provider's exception chained. The API key never appears in a message
or a ``repr``.

Retries are litellm's (for OpenAI-compatible providers, the ``openai`` client's):
429, 408, 409, 5xx and timeouts are retried twice with exponential backoff that
honours ``Retry-After``; ``timeout_s`` applies to each attempt.

litellm is kept quiet and local: before it is first imported,
``LITELLM_LOCAL_MODEL_COST_MAP=True`` (no cost-map download at import) and
``LITELLM_OFFLINE_MODE=true`` (no catalog or tokenizer downloads) are set with
``os.environ.setdefault``, so an operator's own values win. Its debug prints
are suppressed. It is imported in a worker thread (it takes seconds), so the
event loop is not blocked.
"""

from __future__ import annotations

import asyncio
import base64
import importlib
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .. import validation as check
from ..errors import ConfigurationError, EmbeddingError, InvalidEmbedding, missing_dependency
from .base import texts_of

__all__ = ["BATCH_SIZE", "LiteLLMEmbedder"]

#: Texts per request: below the input limits of the common providers (OpenAI: 2048).
BATCH_SIZE = 128
#: The text embedded once to learn the dimension when none is configured.
PROBE_TEXT = "dimension probe"
#: At most this many characters of a provider's error message are kept.
MAX_DETAIL_CHARS = 500


def _prepare_environment() -> None:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")


def _import_litellm() -> Any:
    """Import and configure litellm (blocking; seconds on first import)."""
    _prepare_environment()
    try:
        module: Any = importlib.import_module("litellm")
    except ImportError as exc:
        if isinstance(exc, ModuleNotFoundError) and (exc.name or "litellm") == "litellm":
            raise missing_dependency("litellm", "litellm") from exc
        # litellm is there but one of its own dependencies is broken or missing
        raise ConfigurationError(f"litellm is installed but cannot be imported: {exc}") from exc
    module.suppress_debug_info = True  # no "Give Feedback / Get Help" prints on errors
    return module


async def _litellm() -> Any:
    """The litellm module, imported in a worker thread the first time."""
    module = sys.modules.get("litellm")
    if module is not None and getattr(module, "aembedding", None) is not None:
        return module
    return await asyncio.to_thread(_import_litellm)


class LiteLLMEmbedder:
    """An embedder calling ``litellm.aembedding``; create it with :meth:`open`."""

    def __init__(
        self,
        model: str,
        dim: int,
        *,
        api_base: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 30.0,
        batch_size: int = BATCH_SIZE,
    ) -> None:
        if not model:
            raise ConfigurationError("the embedding model name must not be empty")
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            raise ConfigurationError(f"embedding dimension must be a positive integer, got {dim!r}")
        if not timeout_s > 0:
            raise ConfigurationError(f"embedding timeout must be positive, got {timeout_s!r}")
        if batch_size < 1:
            raise ConfigurationError(f"batch_size must be at least 1, got {batch_size!r}")
        self.model = model
        self.dim = dim
        self.api_base = api_base
        self.timeout_s = float(timeout_s)
        self.batch_size = batch_size
        self._api_key = api_key

    def __repr__(self) -> str:
        return (f"LiteLLMEmbedder(model={self.model!r}, dim={self.dim}, "
                f"api_base={self.api_base!r}, api_key={'***' if self._api_key else None})")

    @classmethod
    async def open(
        cls,
        model: str,
        *,
        dim: int | None = None,
        api_base: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 30.0,
    ) -> LiteLLMEmbedder:
        """An embedder for ``model``; without ``dim`` one short text is embedded to learn it.

        Raises ``MissingDependency`` without litellm and ``EmbeddingError`` when the
        probe fails.
        """
        await _litellm()
        if dim is not None:
            return cls(model, dim, api_base=api_base, api_key=api_key, timeout_s=timeout_s)
        probe = cls(model, 1, api_base=api_base, api_key=api_key, timeout_s=timeout_s)
        (vector,) = await probe._request([PROBE_TEXT], dim=None)
        return cls(model, len(vector), api_base=api_base, api_key=api_key, timeout_s=timeout_s)

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector of ``dim`` floats per text, in order; ``EmbeddingError`` on failure."""
        batch = texts_of(texts)
        out: list[list[float]] = []
        for start in range(0, len(batch), self.batch_size):
            out.extend(await self._request(batch[start:start + self.batch_size], dim=self.dim))
        return out

    # -- one request -----------------------------------------------------

    async def _request(self, texts: list[str], *, dim: int | None) -> list[list[float]]:
        """Embed one batch. With ``dim=None`` the vectors are checked only for consistency."""
        litellm = await _litellm()
        try:
            response = await litellm.aembedding(
                model=self.model,
                input=texts,
                api_base=self.api_base,
                api_key=self._api_key,
                timeout=self.timeout_s,
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            raise EmbeddingError(request_failure("embedding", self.model, self.api_base,
                                                 self.timeout_s, self._api_key, exc)) from exc
        return self._vectors(response, len(texts), dim)

    def _vectors(self, response: Any, count: int, dim: int | None) -> list[list[float]]:
        data = field(response, "data")
        if not isinstance(data, list):
            raise EmbeddingError(
                f"embedding model {self.model!r} returned a malformed response: "
                f"no 'data' list (got {type(data).__name__})"
            )
        if len(data) != count:
            raise EmbeddingError(
                f"embedding model {self.model!r} returned {len(data)} vectors for {count} texts"
            )
        slots: list[Any] = [None] * count
        for pos, item in enumerate(data):
            index = field(item, "index", pos)
            if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < count \
                    or slots[index] is not None:
                raise EmbeddingError(
                    f"embedding model {self.model!r} returned a malformed response: "
                    f"bad or repeated index {index!r}"
                )
            slots[index] = field(item, "embedding")
        size = dim
        out: list[list[float]] = []
        for i, raw in enumerate(slots):
            try:
                vector = _decode(raw)
                if size is None:  # probing: the first vector sets the size
                    size = len(vector)
                out.append(check.embedding(vector, size))
            except (InvalidEmbedding, ValueError, TypeError) as exc:
                raise EmbeddingError(
                    f"embedding model {self.model!r} returned an unusable vector for text #{i}: "
                    f"{exc}"
                ) from exc
        return out


def field(obj: Any, name: str, default: Any = None) -> Any:
    """``name`` of a part of a litellm reply: a mapping or an object (litellm gives either)."""
    if isinstance(obj, Mapping):
        return obj.get(name, default)
    return getattr(obj, name, default)


def request_failure(request: str, model: str, api_base: str | None, timeout_s: float,
                    api_key: str | None, exc: BaseException) -> str:
    """What a failed model request says: which request to where, what happened (it timed
    out, the server answered with an HTTP status, or no usable reply came) and the
    provider's message (:func:`provider_detail`)."""
    status = getattr(exc, "status_code", None)
    kind = type(exc).__name__
    if "timeout" in kind.lower() or isinstance(exc, TimeoutError):
        what = f"timed out after {timeout_s:g}s"
    elif kind == "APIConnectionError":  # litellm sets 500 on it whatever the server said
        what = "failed (no usable reply: APIConnectionError)"
    elif isinstance(status, int) and status != 408:
        what = f"failed with HTTP {status} ({kind})"
    else:
        what = f"failed ({kind})"
    where = f" at {api_base}" if api_base else ""
    return f"{request} request to model {model!r}{where} {what}: {provider_detail(exc, api_key)}"


def provider_detail(exc: BaseException, api_key: str | None, limit: int = MAX_DETAIL_CHARS
                    ) -> str:
    """The provider's message of ``exc``, the API key masked, cut to ``limit`` characters."""
    detail = str(exc)
    if api_key:
        detail = detail.replace(api_key, "***")
    return detail if len(detail) <= limit else detail[:limit] + "..."


def _decode(raw: Any) -> list[float]:
    """A vector from a list of numbers or from base64 float32 (OpenAI's ``encoding_format``)."""
    if isinstance(raw, str):
        try:
            packed = np.frombuffer(base64.b64decode(raw, validate=True), dtype="<f4")
            return [float(x) for x in packed]
        except ValueError as exc:
            raise InvalidEmbedding(f"embedding is a string but not base64 float32: {exc}") from exc
    if raw is None:
        raise InvalidEmbedding("the 'embedding' field is missing")
    if isinstance(raw, np.ndarray):
        return [float(x) for x in raw.ravel()] if raw.ndim == 1 else list(raw)
    if isinstance(raw, bytes) or not isinstance(raw, Sequence):
        raise InvalidEmbedding(f"embedding must be a list of numbers, got {type(raw).__name__}")
    return list(raw)
