"""Reranking with a sentence-transformers ``CrossEncoder`` in this process (extra ``local``).

``rerank_model="cross-encoder:<path or name>"``: a local model directory (what
``CrossEncoder.save_pretrained`` writes), or a hub name already in the local
Hugging Face cache (``HF_HUB_OFFLINE=1`` is set with ``os.environ.setdefault``,
as for the local embedder). No cross-encoder ships with the library: the user
installs the one they want (for example a multilingual MiniLM or BGE reranker).

The model reads each (query, memory) pair together, so it sees which words of
the query the memory answers; its score is the model's output for the pair
(for a one-label model, after the model's own activation, usually a sigmoid).
Pairs longer than ``max_length`` word pieces (``rerank_max_length``, default the
model's own limit) are truncated by the tokenizer, the memory side first.

The model is loaded on the first ``rerank`` in a worker thread (importing torch
takes seconds) and shared by the rerankers of this process with the same path;
scoring runs in a worker thread, one call at a time per model. Any failure of
loading or scoring is a :class:`~dream_memory_actor.rerank.RerankError`.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any

from ..embedding.local import load_model
from ..errors import ConfigurationError, RerankError, require

__all__ = ["BATCH_SIZE", "CrossEncoderReranker"]

#: Pairs per forward pass.
BATCH_SIZE = 32


class CrossEncoderReranker:
    """A sentence-transformers cross-encoder (see the module doc)."""

    def __init__(self, model_name: str, *, max_length: int | None = None) -> None:
        if not model_name:
            raise ConfigurationError("the cross-encoder name must not be empty "
                                     "(rerank_model='cross-encoder:<path or name>')")
        if max_length is not None and max_length < 8:
            raise ConfigurationError(f"rerank_max_length must be at least 8, got {max_length}")
        require("sentence_transformers", "local")
        require("torch", "local")
        self.model = model_name
        self.max_length = max_length

    def __repr__(self) -> str:
        return f"CrossEncoderReranker(model={self.model!r})"

    def _load(self) -> tuple[Any, threading.Lock]:
        options = {} if self.max_length is None else {"max_length": self.max_length}
        return load_model("CrossEncoder", self.model, "the cross-encoder", **options)

    async def load(self) -> None:
        """Load the model now (in a worker thread) instead of on the first ``rerank``."""
        try:
            await asyncio.to_thread(self._load)
        except ConfigurationError as exc:
            raise RerankError(str(exc)) from exc

    def _predict(self, query: str, documents: list[str]) -> list[float]:
        model, lock = self._load()
        with lock:
            scores = model.predict([(query, d) for d in documents], batch_size=BATCH_SIZE,
                                   show_progress_bar=False, convert_to_numpy=True)
        if getattr(scores, "ndim", 1) != 1:
            raise RerankError(f"cross-encoder {self.model!r} gives {scores.shape[-1]} labels per "
                              "pair; a reranker needs a model with one")
        return [float(s) for s in scores]  # checked with every reranker's (rerank_hits)

    async def rerank(self, query: str, documents: Sequence[str]) -> list[float]:
        """One relevance score per document, in the documents' order."""
        docs = list(documents)
        if not docs:
            return []
        try:
            return await asyncio.to_thread(self._predict, query, docs)
        except RerankError:
            raise
        except Exception as exc:  # loading (ConfigurationError) or the model itself
            raise RerankError(f"cross-encoder {self.model!r} failed: {exc}") from exc
