"""MemoryEngine's batch, update, supersede and history doors (memory and PostgreSQL)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from dream_memory_actor.embedding.base import CONTEXT_LINES_EMBEDDED, memory_vector
from dream_memory_actor.embedding.hashing import HashingEmbedder
from dream_memory_actor.engine import MemoryEngine
from dream_memory_actor.errors import InvalidBatch, InvalidFilter, MemorySuperseded
from tests.test_engine import engine  # noqa: F401 - the fixture, on both backends


class _Counting(HashingEmbedder):
    """Counts the embedder calls and the texts in them."""

    def __init__(self, dim: int) -> None:
        super().__init__(dim)
        self.batches: list[int] = []

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.batches.append(len(texts))
        return await super().embed(texts)


async def test_store_many_embeds_in_one_call(engine: MemoryEngine) -> None:  # noqa: F811
    assert engine.embedder is not None
    counting = _Counting(engine.embedder.dim)
    engine.embedder.inner = counting
    texts = [
        "went live on kubernetes",
        "likes green tea",
        "writes java at work",
        "sister's birthday in may",
        "flight to lisbon friday",
        "reviews security first",
    ]
    results = await engine.store_many("alice", [*texts, texts[0]])
    assert counting.batches == [6]  # one call; the repeated text embedded once
    assert [r.merged for r in results] == [False] * 6 + [True]
    assert results[-1].memory.id == results[0].memory.id
    assert len(await engine.list("alice")) == 6


async def test_refused_batch_embeds_nothing(engine: MemoryEngine) -> None:  # noqa: F811
    assert engine.embedder is not None
    before = engine.embedder.misses
    with pytest.raises(InvalidBatch):
        await engine.store_many("alice", ["fine", {"content": "x", "meta": {}}])
    assert engine.embedder.misses == before and await engine.list("alice") == []


async def test_update_and_supersede_re_embed(engine: MemoryEngine) -> None:  # noqa: F811
    m = (await engine.store("alice", "deploys with helm", metadata={"agent": "ops"})).memory
    await engine.update("alice", m.id, "likes green tea")
    hits = await engine.search("alice", "likes green tea", filter={"agent": "ops"})
    assert hits[0].memory.id == m.id  # the new text's embedding, not the old one's:
    assert hits[0].cosine == pytest.approx(1.0, abs=1e-6)
    new = await engine.supersede_memory(
        "alice", m.id, "drinks coffee", by="alice", reason="changed"
    )
    assert [v.content for v in await engine.memory_history("alice", new.id)] == [
        "deploys with helm",
        "likes green tea",
        "drinks coffee",
    ]
    with pytest.raises(MemorySuperseded):
        await engine.supersede_memory("alice", m.id, "again")
    assert [x.id for x in await engine.list("alice", filter={"agent": "ops"})] == [new.id]
    with pytest.raises(InvalidFilter):
        await engine.list("alice", filter={"agent": {"nested": 1}})


class _Recording(HashingEmbedder):
    """Notes every text sent to the model."""

    def __init__(self, dim: int) -> None:
        super().__init__(dim)
        self.texts: list[str] = []

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.texts += texts
        return await super().embed(texts)


async def test_a_context_s_lines_are_embedded_apart_and_a_conversation_s_come_from_the_cache(
        engine: MemoryEngine) -> None:  # noqa: F811
    """In a conversation a turn's context is the turns stored before it and the session's
    date: the model embeds each once, so a store with context sends it what is new."""
    assert engine.embedder is not None
    model = _Recording(engine.embedder.dim)
    engine.embedder.inner = model
    first = await engine.store("alice", "Ann: I adopted a dog.", context="8 May 2023")
    assert model.texts == ["Ann: I adopted a dog.", "8 May 2023"]
    second = await engine.store("alice", "Bob: which breed?",
                                context="8 May 2023\n Ann:  I adopted a dog. ")
    assert model.texts[2:] == ["Bob: which breed?"]
    await engine.store_many("alice", [{"content": "Ann: a beagle called Rex.",
                                       "context": "8 May 2023\nBob: which breed?"}])
    assert model.texts[3:] == ["Ann: a beagle called Rex."]
    # each memory's vector is its content's and its lines' (embedding.memory_vector)
    plain = await engine.store("alice", "Bob: what a lovely name")
    for m, lines in ((first.memory, ["8 May 2023"]),
                     (second.memory, ["8 May 2023", "Ann: I adopted a dog."]),
                     (plain.memory, [])):
        vecs = await model.embed([m.content, *lines])
        want = memory_vector(vecs[0], vecs[1:])
        hits = await engine.search("alice", m.content, embedding=want, limit=10)
        assert next(h.cosine for h in hits if h.memory.id == m.id) == pytest.approx(1.0)
    # a memory with a context is not its content's vector alone
    alone = (await model.embed(["Ann: I adopted a dog."]))[0]
    hits = await engine.search("alice", "Ann: I adopted a dog.", embedding=alone, limit=10)
    assert next(h.cosine for h in hits if h.memory.id == first.memory.id) < 0.99


async def test_a_long_context_s_first_lines_count_in_the_vector_and_all_in_the_keywords(
        engine: MemoryEngine) -> None:  # noqa: F811
    assert engine.embedder is not None
    model = _Recording(engine.embedder.dim)
    engine.embedder.inner = model
    lines = [f"line {i} about topic{i}" for i in range(10)]
    r = await engine.store("alice", "the memory itself", context="\n".join(lines))
    assert model.texts == ["the memory itself", *lines[:CONTEXT_LINES_EMBEDDED]]
    assert r.memory.context == "\n".join(lines)  # kept whole
    hits = await engine.search("alice", "topic9")  # a line past them: found by its words
    assert [h.memory.id for h in hits] == [r.memory.id] and hits[0].keyword_score > 0


async def test_a_context_line_with_nothing_to_embed_is_no_part_of_the_vector(
        engine: MemoryEngine) -> None:  # noqa: F811
    """A line of only format characters passes as context (as content would), but the
    model cannot take it: it is left out of the vector, not a reason to refuse the store."""
    assert engine.embedder is not None
    model = _Recording(engine.embedder.dim)
    engine.embedder.inner = model
    r = await engine.store("alice", "the memory itself", context="\u200b\nthe date")
    assert model.texts == ["the memory itself", "the date"]
    assert r.memory.context == "\u200b\nthe date"
    alone = await engine.store("alice", "another memory", context="\u200b")
    assert model.texts[2:] == ["another memory"] and alone.memory.context == "\u200b"


async def test_embed_many_takes_contents_alone_or_with_their_contexts(
        engine: MemoryEngine) -> None:  # noqa: F811
    """A two-letter content is a content, not a content and a context."""
    assert engine.embedder is not None
    alone = await engine.embed_many(["ab", "deploys on Friday"])
    paired = await engine.embed_many([("ab", None), ("deploys on Friday", None)])
    assert alone == paired
    assert alone == [await engine.embed("ab"), await engine.embed("deploys on Friday")]
