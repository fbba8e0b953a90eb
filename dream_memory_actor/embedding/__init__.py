"""Embedders: the protocol, the cache, calibration, and a factory from settings."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import (
    CachedEmbedder,
    Embedder,
    InProcessEmbedder,
    UnembeddableText,
    calibration_of,
    check_embeddable,
)
from .calibration import IDENTITY, Calibration, load_calibration, shipped_calibration

if TYPE_CHECKING:
    from ..config import MemorySettings

__all__ = [
    "IDENTITY",
    "LOCAL_EXTRAS",
    "LOCAL_MODELS",
    "CachedEmbedder",
    "Calibration",
    "Embedder",
    "UnembeddableText",
    "calibration_of",
    "check_embeddable",
    "extra_for",
    "load_calibration",
    "open_embedder",
    "open_inner_embedder",
    "shipped_calibration",
]

LOCAL_PREFIX = "local:"
#: Local names served by the numpy embedders (the extra to install in brackets):
#: ``local:multilingual-e5-small`` [multilingual], ``local:use-multilingual`` [use].
#: Any other ``local:`` name goes to sentence-transformers [local], e.g.
#: ``local:all-MiniLM-L6-v2`` (English only).
LOCAL_MODELS = {
    "multilingual-e5-small": "e5",
    "intfloat/multilingual-e5-small": "e5",
    "use-multilingual": "use",
}


#: The extra each kind of local model needs (``LOCAL_MODELS``; others: ``local``).
LOCAL_EXTRAS = {"e5": "multilingual", "use": "use"}


def extra_for(model: str) -> str:
    """The extra an ``embedding_model`` needs installed: ``multilingual`` or ``use`` for
    the numpy embedders, ``local`` for sentence-transformers, else ``litellm``."""
    if not model.startswith(LOCAL_PREFIX):
        return "litellm"
    kind = LOCAL_MODELS.get(model.removeprefix(LOCAL_PREFIX))
    return LOCAL_EXTRAS.get(kind or "", "local")


async def open_inner_embedder(settings: MemorySettings) -> Embedder | None:
    """The configured embedder without a cache, or ``None`` (keyword-only search)."""
    model = settings.embedding_model
    if not model:
        return None
    inner: Embedder
    kind = None
    if model.startswith(LOCAL_PREFIX):
        name = model.removeprefix(LOCAL_PREFIX)
        kind = LOCAL_MODELS.get(name)
        if kind == "e5":
            from .multilingual import E5Embedder

            inner = E5Embedder(name)
        elif kind == "use":
            from .multilingual import USEEmbedder

            inner = USEEmbedder(name)
        else:
            from .local import LocalEmbedder

            inner = LocalEmbedder(name)
    else:
        from .litellm import LiteLLMEmbedder

        inner = await LiteLLMEmbedder.open(
            model,
            dim=settings.embedding_dim,
            api_base=settings.embedding_api_base,
            api_key=(settings.embedding_api_key.get_secret_value()
                     if settings.embedding_api_key else None),
            timeout_s=settings.embedding_timeout_s,
        )
    if isinstance(inner, InProcessEmbedder):
        inner.timeout_s = settings.embedding_timeout_s
        if settings.embedding_engines is not None and kind in ("e5", "use"):
            inner.engines = settings.embedding_engines
            inner.idle_engines = 0  # the setting says how many calls run at once
    if settings.embedding_dim is not None and settings.embedding_dim != inner.dim:
        from ..errors import ConfigurationError

        raise ConfigurationError(
            f"embedding_dim={settings.embedding_dim} but model {model!r} gives {inner.dim}"
        )
    return inner


async def open_embedder(settings: MemorySettings, inner: Embedder | None = None
                        ) -> CachedEmbedder | None:
    """The configured embedder (or ``inner``) behind a cache, or ``None`` (keyword-only
    search).

    ``embedding_model`` ``"local:<name>"`` runs in this process (see
    :data:`LOCAL_MODELS`); any other value is a litellm model name (extra
    ``litellm``), e.g. ``"openai/text-embedding-3-small"``. The calibration is
    the file named by ``embedding_calibration`` when set, else the one shipped
    for the model, else the identity (raw cosine).
    """
    if inner is None:
        inner = await open_inner_embedder(settings)
    if inner is None:
        return None
    calibration = None
    if settings.embedding_calibration is not None:
        calibration = load_calibration(settings.embedding_calibration)
    return CachedEmbedder(inner, settings.embedding_cache_size, calibration=calibration)
