"""Embedders: the protocol, the cache, and a factory from settings."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import CachedEmbedder, Embedder

if TYPE_CHECKING:
    from ..config import MemorySettings

__all__ = ["CachedEmbedder", "Embedder", "open_embedder"]

LOCAL_PREFIX = "local:"


async def open_embedder(settings: MemorySettings) -> CachedEmbedder | None:
    """The configured embedder behind a cache, or ``None`` (keyword-only search).

    ``embedding_model`` ``"local:<name>"`` runs sentence-transformers in this
    process (extra ``local``); any other value is a litellm model name
    (extra ``litellm``), e.g. ``"openai/text-embedding-3-small"``.
    """
    model = settings.embedding_model
    if not model:
        return None
    inner: Embedder
    if model.startswith(LOCAL_PREFIX):
        from .local import LocalEmbedder

        inner = LocalEmbedder(model.removeprefix(LOCAL_PREFIX))
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
    if settings.embedding_dim is not None and settings.embedding_dim != inner.dim:
        from ..errors import ConfigurationError

        raise ConfigurationError(
            f"embedding_dim={settings.embedding_dim} but model {model!r} gives {inner.dim}"
        )
    return CachedEmbedder(inner, settings.embedding_cache_size)
