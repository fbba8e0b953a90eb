"""A tiny deterministic embedder for the runtime tests (imported by the actors too).

``"t3: anything"`` lands close to axis 3: texts of one topic are near-duplicates
(cosine > 0.95), texts of different topics are far apart (cosine < 0.1).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

DIM = 8


class TopicEmbedder:
    model = "test-topic"
    dim = DIM

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [topic_vector(t) for t in texts]


def topic_vector(text: str) -> list[float]:
    head = text.split(":", 1)[0].strip().lower()
    axis = int(head[1:]) % DIM if head.startswith("t") and head[1:].isdigit() else DIM - 1
    digest = hashlib.sha256(text.encode()).digest()
    vec = [(b / 255.0 - 0.5) * 0.05 for b in digest[:DIM]]
    vec[axis] = 1.0
    return vec


def reworded(topic: int, writer: int, step: int, about: str = "the service went live") -> str:
    """One fact of ``topic`` as many writers put it: case, spaces and punctuation vary
    with the writer and step, the content never (so every store of a topic merges)."""
    text = f"t{topic}: deploy note, {about}"
    forms = (text, text.upper(), f"  {text.replace(',', '')}!  ", text.title() + ".")
    return forms[(writer + step) % len(forms)]
