"""Reranking over litellm's rerank API (extra ``litellm``): Cohere, Jina, Voyage, a
litellm proxy, or any server speaking Cohere's ``/rerank`` request and reply.

``LiteLLMReranker("cohere/rerank-v3.5", api_base=..., api_key=...)`` calls
``litellm.arerank(model, query, documents)`` once per search, for the
candidates only, without ``top_n`` (every candidate is scored) and without
asking the documents back. The reply's ``results`` must give each document's
``index`` exactly once with a finite ``relevance_score``; anything else
(a missing result, a repeated or out-of-range index, a score that is not a
number) is refused as a whole. With ``api_base`` set, a ``cohere/`` model is
sent to ``<api_base>/v2/rerank`` (``/v1/rerank`` when ``api_base`` ends so).

Every failure (timeout, connection refused, HTTP 4xx/5xx, a body that is not
JSON, a malformed reply) raises :class:`~dream_memory_actor.rerank.RerankError`
with litellm's exception chained; the API key never appears in a message or a
``repr``. ``timeout_s`` bounds each attempt; litellm's own retries for rerank
(none by default) apply. litellm is imported in a worker thread on first use,
with the same quiet, offline environment as the litellm embedder.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from typing import Any

from ..embedding.litellm import _litellm, field, request_failure
from ..errors import ConfigurationError, RerankError, require

__all__ = ["LiteLLMReranker"]


class LiteLLMReranker:
    """A reranker calling ``litellm.arerank`` (see the module doc)."""

    def __init__(self, model: str, *, api_base: str | None = None, api_key: str | None = None,
                 timeout_s: float = 10.0) -> None:
        if not model:
            raise ConfigurationError("the rerank model name must not be empty")
        if not timeout_s > 0:
            raise ConfigurationError(f"rerank timeout must be positive, got {timeout_s!r}")
        require("litellm", "litellm")
        self.model = model
        self.api_base = api_base
        self.timeout_s = float(timeout_s)
        self._api_key = api_key

    def __repr__(self) -> str:
        return (f"LiteLLMReranker(model={self.model!r}, api_base={self.api_base!r}, "
                f"api_key={'***' if self._api_key else None})")

    async def rerank(self, query: str, documents: Sequence[str]) -> list[float]:
        """One relevance score per document, in the documents' order."""
        docs = list(documents)
        if not docs:
            return []
        try:
            litellm = await _litellm()
        except ConfigurationError as exc:
            raise RerankError(str(exc)) from exc
        try:
            response = await litellm.arerank(
                model=self.model, query=query, documents=docs, return_documents=False,
                api_base=self.api_base, api_key=self._api_key, timeout=self.timeout_s)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            raise RerankError(request_failure("rerank", self.model, self.api_base, self.timeout_s,
                                              self._api_key, exc)) from exc
        return self._scores(response, len(docs))

    def _scores(self, response: Any, count: int) -> list[float]:
        results = field(response, "results")
        if not isinstance(results, list):
            raise RerankError(f"rerank model {self.model!r} returned a malformed reply: no "
                              f"'results' list (got {type(results).__name__})")
        if len(results) != count:
            raise RerankError(f"rerank model {self.model!r} returned {len(results)} results "
                              f"for {count} documents")
        scores: list[float | None] = [None] * count
        for item in results:
            index, score = field(item, "index"), field(item, "relevance_score")
            if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < count \
                    or scores[index] is not None:
                raise RerankError(f"rerank model {self.model!r} returned a malformed reply: "
                                  f"bad or repeated index {index!r}")
            if isinstance(score, bool) or not isinstance(score, (int, float)) \
                    or not math.isfinite(score):
                raise RerankError(f"rerank model {self.model!r} returned an unusable score "
                                  f"for document #{index}: {score!r}")
            scores[index] = float(score)
        return [s for s in scores if s is not None]
