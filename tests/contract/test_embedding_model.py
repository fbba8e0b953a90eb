"""The embedding model is recorded with the data, on every backend: the first write of
a vector records it, a process embedding with another model is refused before it
writes, and an engine opened without a model embeds with the recorded one."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pydantic import SecretStr

from dream_memory_actor.config import MemorySettings
from dream_memory_actor.engine import MemoryEngine
from dream_memory_actor.engine.memory_engine import with_model
from dream_memory_actor.errors import EmbeddingModelMismatch
from dream_memory_actor.models import EmbeddingModel, VectorMemory
from dream_memory_actor.storage import open_stores
from tests.conftest import BACKENDS, DIM, Stores, backend_settings
from tests.support.openai_server import ScriptedOpenAIServer

OWNER = "alice"
MODEL_A = "openai/text-embedding-a"
MODEL_B = "openai/text-embedding-b"


def vec(i: int) -> list[float]:
    return [1.0 if j == i else 0.0 for j in range(DIM)]


#: Backends whose storage a second process opens too (not the in-memory one).
SHARED = [b for b in BACKENDS if b != "memory"]


async def test_first_vector_write_records_the_model(stores: Stores) -> None:
    v = stores.vector
    assert await v.recorded_model() is None
    await v.store(OWNER, "keyword only, no vector")  # no vector: nothing recorded
    assert await v.recorded_model() is None
    v.embedding_model = EmbeddingModel(model=MODEL_A, dim=DIM, calibration={"memory": [[0, 0]]})
    await v.store(OWNER, "the staging cluster runs Kubernetes 1.29", embedding=vec(0))
    got = await v.recorded_model()
    assert got is not None and (got.model, got.dim) == (MODEL_A, DIM)
    assert got.calibration == {"memory": [[0, 0]]}


@pytest.mark.parametrize("backend", SHARED)
async def test_another_model_is_refused_before_it_writes(
        backend: str, request: pytest.FixtureRequest) -> None:
    settings = backend_settings(backend, request)
    first_s, first = await open_stores(settings, DIM)
    await first_s.setup()
    await first.setup()
    first.embedding_model = EmbeddingModel(model=MODEL_A, dim=DIM)
    await first.store(OWNER, "recorded by the first process", embedding=vec(0))
    # a second process on the same storage, embedding with another model
    structured, second = await open_stores(settings, DIM)
    try:
        second.embedding_model = EmbeddingModel(model=MODEL_B, dim=DIM)
        before = await second.count(OWNER)
        writes = [
            second.store(OWNER, "a vector of model b", embedding=vec(1)),
            second.store_many(OWNER, ["b one", "b two"], embeddings=[vec(2), vec(3)]),
        ]
        for write in writes:
            with pytest.raises(EmbeddingModelMismatch, match=f"{MODEL_A}.*{MODEL_B}"):
                await write
        assert await second.count(OWNER) == before == 1
        # without a vector, the other process still writes (keyword-only memories)
        await second.store(OWNER, "a memory with no vector")
        assert await second.count(OWNER) == 2
    finally:
        for store in (structured, second, first_s, first):
            await store.close()


async def test_restore_records_the_model(stores: Stores) -> None:
    stores.vector.embedding_model = EmbeddingModel(model=MODEL_A, dim=DIM)
    mem = VectorMemory(owner=OWNER, content="moved with its vector")
    await stores.vector.restore(OWNER, [(mem, vec(4))])
    got = await stores.vector.recorded_model()
    assert got is not None and got.model == MODEL_A


# -- which model a process embeds with ------------------------------------------------

RECORDED = EmbeddingModel(model=MODEL_A, dim=DIM)


def test_settings_without_a_model_take_the_recorded_one() -> None:
    got = with_model(MemorySettings(backend="memory"), RECORDED)
    assert (got.embedding_model, got.embedding_dim) == (MODEL_A, DIM)


def test_settings_naming_the_recorded_model_or_none_recorded_stay() -> None:
    same = MemorySettings(backend="memory", embedding_model=MODEL_A)
    assert with_model(same, RECORDED) is same
    other = MemorySettings(backend="memory", embedding_model=MODEL_B)
    assert with_model(other, None) is other


def test_settings_naming_another_model_are_refused_with_the_way_out() -> None:
    with pytest.raises(EmbeddingModelMismatch) as err:
        with_model(MemorySettings(backend="memory", embedding_model=MODEL_B), RECORDED)
    text = str(err.value)
    assert MODEL_A in text and MODEL_B in text and f"{DIM} dimensions" in text
    assert "dream-memory export" in text and "dream-memory import" in text
    with pytest.raises(EmbeddingModelMismatch):  # the same name with another dimension
        with_model(MemorySettings(backend="memory", embedding_model=MODEL_A,
                                  embedding_dim=DIM * 2), RECORDED)


# -- engines opened on one store agree -----------------------------------------------


@pytest.fixture(scope="module")
def api() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(embedding_dim=DIM) as s:
        yield s


@pytest.mark.parametrize("backend", [b for b in BACKENDS if b not in ("memory", "redis-cluster")])
async def test_engines_on_one_store_embed_with_its_model(
        backend: str, api: ScriptedOpenAIServer, request: pytest.FixtureRequest) -> None:
    base = backend_settings(backend, request)

    def with_embedder(model: str | None) -> MemorySettings:
        return base.model_copy(update={
            "embedding_model": model, "embedding_api_base": api.base_url,
            "embedding_api_key": SecretStr("sk-test"), "embedding_dim": None})

    writer = await MemoryEngine.open(with_embedder(MODEL_A))
    try:
        await writer.store(OWNER, "went live on Kubernetes with helm")
    finally:
        await writer.close()
    # a door opened with no model (the CLI, MCP, the review page by default)
    reader = await MemoryEngine.open(with_embedder(None))
    try:
        assert reader.settings.embedding_model == MODEL_A
        assert reader.embedder is not None and reader.vector.dim == DIM
        hits = await reader.search(OWNER, "went live on Kubernetes with helm")
        assert hits and hits[0].vector_score > 0.99
    finally:
        await reader.close()
    with pytest.raises(EmbeddingModelMismatch, match=MODEL_A):
        await MemoryEngine.open(with_embedder(MODEL_B))


# -- moving a store to another model -----------------------------------------------------


async def test_reembed_gives_every_memory_the_new_model_s_vector(stores: Stores) -> None:
    v = stores.vector
    v.embedding_model = EmbeddingModel(model=MODEL_A, dim=DIM)
    a = await v.store(OWNER, "went live on Kubernetes", embedding=vec(0), context="the launch")
    b = await v.store(OWNER, "the sprint ends on Friday", embedding=vec(1))
    await v.store("bob", "bob's only memory", embedding=vec(2))
    assert await v.owners() == ["alice", "bob"]
    seen: list[tuple[str, str | None]] = []

    async def model_b(memories: list[tuple[str, str | None]]) -> list[list[float]]:
        seen.extend(memories)
        return [vec(5)] * len(memories)

    recorded = await v._model(EmbeddingModel(model=MODEL_B, dim=DIM), replace=True)
    assert recorded is not None and recorded.model == MODEL_B
    assert await v.reembed(OWNER, model_b, batch=1) == 2
    assert sorted(seen) == [("the sprint ends on Friday", None),
                           ("went live on Kubernetes", "the launch")]
    after = {m.id: (m, e) for m, e in await v.dump(OWNER)}
    for mem in (a.memory, b.memory):
        got, emb = after[mem.id]
        assert (got.content, got.context, got.metadata) == (mem.content, mem.context,
                                                           mem.metadata)
        assert emb == pytest.approx(vec(5))
    assert await v.versions(OWNER) == []  # a memory re-embedded says what it said
    assert [e for _, e in await v.dump("bob")] == [pytest.approx(vec(2))]
    hits = await v.search(OWNER, "sprint", embedding=vec(5))
    assert {h.memory.id for h in hits} == {a.memory.id, b.memory.id}
    # run again (after a stop): the same vectors, nothing else moves
    assert await v.reembed(OWNER, model_b) == 2
    assert await v.count(OWNER) == 2


@pytest.mark.parametrize("backend", ["postgres", "redis"])
async def test_an_engine_adopting_another_model_reembeds_a_store(
        backend: str, api: ScriptedOpenAIServer, request: pytest.FixtureRequest) -> None:
    base = backend_settings(backend, request)

    def with_embedder(model: str | None) -> MemorySettings:
        return base.model_copy(update={
            "embedding_model": model, "embedding_api_base": api.base_url,
            "embedding_api_key": SecretStr("sk-test"), "embedding_dim": None})

    writer = await MemoryEngine.open(with_embedder(MODEL_A))
    try:
        stored = await writer.store(OWNER, "went live on Kubernetes with helm")
    finally:
        await writer.close()
    mover = await MemoryEngine.open(with_embedder(MODEL_B), adopt=True)
    try:
        assert [await mover.reembed(o) for o in await mover.vector.owners()] == [1]
    finally:
        await mover.close()
    # every door now opens with the new model, and the old one is refused
    reader = await MemoryEngine.open(with_embedder(None))
    try:
        assert reader.settings.embedding_model == MODEL_B
        hits = await reader.search(OWNER, "went live on Kubernetes with helm")
        assert [h.memory.id for h in hits] == [stored.memory.id]
    finally:
        await reader.close()
    with pytest.raises(EmbeddingModelMismatch, match=MODEL_B):
        await MemoryEngine.open(with_embedder(MODEL_A))
