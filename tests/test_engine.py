"""MemoryEngine: the core in one process, on every backend, with an embedder."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from dream_memory_actor import MemoryEngine, MemorySettings
from dream_memory_actor.embedding import CachedEmbedder
from dream_memory_actor.embedding.hashing import HashingEmbedder
from dream_memory_actor.errors import (
    EmbeddingError,
    InvalidContent,
    InvalidOwnerId,
    InvalidQuery,
    SystemClosed,
)
from dream_memory_actor.storage import open_stores
from tests.conftest import fresh_schema


@pytest.fixture(params=["memory", "postgres"])
async def engine(request: pytest.FixtureRequest) -> AsyncIterator[MemoryEngine]:
    kw: dict[str, object] = {"backend": request.param}
    if request.param == "postgres":
        kw.update(postgres_dsn=request.getfixturevalue("pg_dsn"), postgres_schema=fresh_schema())
    settings = MemorySettings(**kw)  # type: ignore[arg-type]
    embedder = CachedEmbedder(HashingEmbedder(64))
    structured, vector = await open_stores(settings, embedder.dim)
    await structured.setup()
    await vector.setup()
    e = MemoryEngine(settings, structured, vector, embedder)
    yield e
    await e.close()


async def test_store_embeds_and_dedups(engine: MemoryEngine) -> None:
    a = await engine.store("alice", "went live on Kubernetes with helm")
    b = await engine.store("alice", "went live on Kubernetes with helm!")
    assert a.memory.has_embedding and b.merged and b.memory.id == a.memory.id


async def test_search_is_hybrid_with_an_embedder(engine: MemoryEngine) -> None:
    await engine.store("alice", "went live on Kubernetes with helm")
    await engine.store("alice", "likes green tea")
    hits = await engine.search("alice", "kubernetes helm rollout")
    assert hits[0].memory.content == "went live on Kubernetes with helm"
    assert hits[0].mode == "hybrid" and hits[0].vector_score is not None


async def test_query_embeddings_are_cached(engine: MemoryEngine) -> None:
    assert engine.embedder is not None
    await engine.search("alice", "same query")
    misses = engine.embedder.misses
    await engine.search("alice", "same query")
    assert engine.embedder.misses == misses and engine.embedder.hits >= 1


async def test_l1_through_the_engine(engine: MemoryEngine) -> None:
    from dream_memory_actor.storage.ops import AddRule, SetStatus

    snap = await engine.apply("alice", [AddRule("look at security first"),
                                        SetStatus("mood", "focused")])
    assert snap.version == 1
    assert (await engine.snapshot("alice")).rules[0].content == "look at security first"


async def test_bad_input_before_embedding(engine: MemoryEngine) -> None:
    assert engine.embedder is not None
    before = engine.embedder.misses
    with pytest.raises(InvalidContent):
        await engine.store("alice", "   ")
    assert engine.embedder.misses == before


async def test_closed_engine_refuses_calls(engine: MemoryEngine) -> None:
    await engine.close()
    await engine.close()  # twice is fine
    with pytest.raises(SystemClosed):
        await engine.search("alice", "x")


class _Broken:
    model = "broken"
    dim = 4

    async def embed(self, texts: list[str]) -> list[list[float]]:
        return [[float("nan")] * 4 for _ in texts]


async def test_garbage_from_an_embedder_is_an_embedding_error() -> None:
    settings = MemorySettings(backend="memory")
    s, v = await open_stores(settings, 4)
    e = MemoryEngine(settings, s, v, CachedEmbedder(_Broken()))
    with pytest.raises(EmbeddingError):
        await e.store("alice", "text")
    assert await v.count("alice") == 0


async def test_open_without_embedder_is_keyword_only() -> None:
    e = await MemoryEngine.open(MemorySettings(backend="memory"))
    await e.store("alice", "went live on Kubernetes")
    hits = await e.search("alice", "kubernetes")
    assert hits[0].mode == "keyword" and e.embedder is None
    await e.close()


async def test_refused_search_embeds_nothing(engine: MemoryEngine) -> None:
    assert engine.embedder is not None
    before = engine.embedder.misses
    with pytest.raises(InvalidContent):
        await engine.search("alice", "   ")
    with pytest.raises(InvalidQuery):
        await engine.search("alice", "a real query", min_score=2.0)
    with pytest.raises(InvalidOwnerId):
        await engine.search("bad owner", "a real query")
    assert engine.embedder.misses == before
    await engine.search("alice", "a real query")
    assert engine.embedder.misses == before + 1
