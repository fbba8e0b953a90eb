"""Reranking: a second, slower judge of relevance over the best hits of a hybrid search.

Off by default (``rerank_model=None``). When a reranker is configured, a search
takes the ``rerank_candidates`` best hits of the hybrid search (at least
``limit``), asks the reranker for one relevance score per hit (query and memory
text), and answers in this order:

1. the candidates, by the reranker's score, highest first; equal scores keep
   their hybrid order;
2. then, when ``limit`` is larger than ``rerank_candidates``, the other hits in
   hybrid order (their ``rerank_score`` is ``None``);

cut to ``limit``. Each hit keeps its hybrid ``score`` and its three signals
(``vector_score``, ``keyword_score``, ``time_score``) and gains
``rerank_score``: the reranker's own value, on the reranker's own scale (not
comparable between rerankers, not mixed into ``score``). ``min_score`` applies
to the hybrid score, before reranking.

When the reranker fails (timeout, HTTP error, a reply that does not give one
finite score per candidate), ``rerank_on_error`` decides: ``"fallback"`` (the
default) answers the hybrid order, every ``rerank_score`` ``None`` (so the
caller can tell that no reranking took place), logs a warning and counts the
error in the ``dream_memory_errors_total`` metric (``kind="rerank"``); ``"raise"`` raises
:class:`RerankError`. A reply is never half used: scores that do not match the
candidates one to one are refused as a whole.

Rerankers shipped (``rerank_model``):

- ``"cross-encoder:<path or name>"``: a sentence-transformers ``CrossEncoder``
  in this process (extra ``local``), see :mod:`.cross_encoder`;
- any other value: a litellm rerank model over a Cohere/Jina-compatible
  ``/rerank`` endpoint (extra ``litellm``), e.g. ``"cohere/rerank-v3.5"`` or
  ``"jina_ai/jina-reranker-v2-base-multilingual"``, see :mod:`.litellm`.

Anything with ``model`` and ``async rerank(query, documents) -> list[float]``
is a :class:`Reranker` and can be given to ``MemoryEngine(reranker=...)``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

from ..errors import ConfigurationError, RerankError
from ..metrics import get_metrics

if TYPE_CHECKING:
    from ..config import MemorySettings
    from ..models import SearchHit

__all__ = [
    "CROSS_ENCODER_PREFIX",
    "OnError",
    "RerankError",
    "Reranker",
    "checked_scores",
    "make_reranker",
    "rerank_hits",
]

log = logging.getLogger(__name__)

CROSS_ENCODER_PREFIX = "cross-encoder:"
OnError = Literal["fallback", "raise"]


@runtime_checkable
class Reranker(Protocol):
    """Scores documents against a query: one finite float per document, in order,
    higher is more relevant. Raises :class:`RerankError` on failure."""

    model: str

    async def rerank(self, query: str, documents: Sequence[str]) -> list[float]:
        ...


def checked_scores(scores: object, count: int, model: str) -> list[float]:
    """``scores`` as ``count`` finite floats, or ``RerankError`` saying what is wrong: what
    a reranker's reply must be, whichever reranker gave it."""
    if isinstance(scores, (str, bytes)) or not isinstance(scores, Sequence):
        raise RerankError(f"reranker {model!r} returned {type(scores).__name__}, "
                          "not a list of scores")
    if len(scores) != count:
        raise RerankError(f"reranker {model!r} returned {len(scores)} scores for "
                          f"{count} documents")
    out = []
    for i, value in enumerate(scores):
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not math.isfinite(float(value)):
            raise RerankError(f"reranker {model!r} returned an unusable score for "
                              f"document #{i}: {value!r}")
        out.append(float(value))
    return out


def make_reranker(settings: MemorySettings) -> Reranker | None:
    """The configured reranker, or ``None`` (off). Cheap: models are loaded and clients
    imported on the first ``rerank`` call; a missing extra is reported here."""
    name = settings.rerank_model
    if not name:
        return None
    if name.startswith(CROSS_ENCODER_PREFIX):
        from .cross_encoder import CrossEncoderReranker

        return CrossEncoderReranker(name.removeprefix(CROSS_ENCODER_PREFIX),
                                    max_length=settings.rerank_max_length)
    from .litellm import LiteLLMReranker

    key = settings.rerank_api_key
    return LiteLLMReranker(
        name, api_base=settings.rerank_api_base,
        api_key=key.get_secret_value() if key is not None else None,
        timeout_s=settings.rerank_timeout_s)


async def rerank_hits(reranker: Reranker, query: str, hits: Sequence[SearchHit], *,
                      candidates: int, on_error: OnError | str = "fallback") -> list[SearchHit]:
    """``hits`` (hybrid order) in the final order of the module doc, with ``rerank_score``
    set on the reranked ones."""
    if on_error not in ("fallback", "raise"):
        raise ConfigurationError(f"rerank_on_error must be 'fallback' or 'raise', got "
                                 f"{on_error!r}")
    head, tail = list(hits[:candidates]), list(hits[candidates:])
    if not head:
        return list(hits)
    model = getattr(reranker, "model", type(reranker).__name__)
    try:
        raw = await reranker.rerank(query, [h.memory.content for h in head])
        scores = checked_scores(raw, len(head), model)
    except Exception as exc:  # a reranker of the user's that raises anything else, too
        error = exc if isinstance(exc, RerankError) else RerankError(
            f"reranker {model!r} failed: {type(exc).__name__}: {exc}")
        if on_error == "raise":
            if error is exc:
                raise
            raise error from exc
        log.warning("reranking failed, answering the hybrid order: %s", error)
        get_metrics().error(type(error).__name__, "rerank")
        return list(hits)
    order = sorted(range(len(head)), key=lambda i: -scores[i])  # stable: ties keep hybrid order
    ranked = [head[i].model_copy(update={"rerank_score": scores[i]}) for i in order]
    return ranked + tail
