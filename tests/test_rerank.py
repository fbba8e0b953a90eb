"""The reranking seam: the final order, the engine's search with a reranker, litellm's
rerank API against a scripted Cohere-compatible server (good, malformed, slow and failing
replies), and a sentence-transformers cross-encoder built here from random weights (the
code path is real; its scores mean nothing)."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from dream_memory_actor.config import MemorySettings
from dream_memory_actor.embedding import CachedEmbedder
from dream_memory_actor.embedding.hashing import HashingEmbedder
from dream_memory_actor.engine import MemoryEngine
from dream_memory_actor.errors import ConfigurationError, InvalidQuery
from dream_memory_actor.models import SearchHit
from dream_memory_actor.rerank import RerankError, make_reranker, rerank_hits
from dream_memory_actor.rerank.litellm import LiteLLMReranker
from dream_memory_actor.storage.memory import InMemoryStructuredStore, InMemoryVectorStore
from tests.support.openai_server import Reply, ScriptedOpenAIServer

API_KEY = "rk-test-secret-0123456789"
MODEL = "cohere/rerank-v3.5"
PATH = "/v2/rerank"  # where litellm sends a cohere/ model when api_base is set
MEMORIES = [
    "The API went live on Kubernetes with Helm on Tuesday.",
    "The payment service runs on three replicas behind a load balancer.",
    "Deploys to production need approval from the on-call engineer.",
    "Alice prefers dark mode in every editor she uses.",
    "The release was rolled back after a failed database migration.",
    "Canary releases get five percent of traffic for one hour.",
]
QUERY = "deploy the API to production on Kubernetes"


class ReversedReranker:
    """Scores the i-th document i (so the last candidate comes first); records its calls."""

    model = "reversed"

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[str]]] = []

    async def rerank(self, query: str, documents: Sequence[str]) -> list[float]:
        self.calls.append((query, list(documents)))
        return [float(i) for i in range(len(documents))]


class BrokenReranker:
    """Raises an error that is not a RerankError (a user's reranker with a bug)."""

    model = "broken"

    async def rerank(self, query: str, documents: Sequence[str]) -> list[float]:
        raise KeyError("oops")


async def engine_with(reranker: Any = None, **settings: Any) -> MemoryEngine:
    s = MemorySettings(backend="memory", **settings)
    inner = HashingEmbedder(dim=64)
    engine = MemoryEngine(s, InMemoryStructuredStore(), InMemoryVectorStore(inner.dim),
                          CachedEmbedder(inner), reranker=reranker)
    for text in MEMORIES:
        await engine.store("alice", text)
    return engine


def ids(hits: Sequence[SearchHit]) -> list[str]:
    """The hits' contents, in order (each engine gives its memories their own ids)."""
    return [h.memory.content for h in hits]


def signals(hit: SearchHit) -> tuple[Any, ...]:
    return (round(hit.score, 4), hit.vector_score, hit.keyword_score,
            round(hit.time_score, 4), hit.cosine)


# -- the final order ----------------------------------------------------------------


async def test_off_by_default() -> None:
    assert MemorySettings(backend="memory").rerank_model is None
    engine = await engine_with()
    assert engine.reranker is None
    hits = await engine.search("alice", QUERY, limit=5)
    assert hits and all(h.rerank_score is None for h in hits)


async def test_candidates_are_ordered_by_the_reranker_and_keep_their_signals() -> None:
    plain = await (await engine_with()).search("alice", QUERY, limit=6)
    reranker = ReversedReranker()
    engine = await engine_with(reranker, rerank_candidates=4)
    hits = await engine.search("alice", QUERY, limit=6)
    (query, docs), = reranker.calls
    assert query == QUERY
    assert docs == [h.memory.content for h in plain[:4]]  # the hybrid top 4, in order
    # reranked candidates first (last candidate first), then the rest in hybrid order
    assert ids(hits) == ids(plain[:4])[::-1] + ids(plain[4:])
    assert [h.rerank_score for h in hits] == [3.0, 2.0, 1.0, 0.0, None, None]
    by_text = {h.memory.content: h for h in plain}
    assert all(signals(h) == signals(by_text[h.memory.content]) for h in hits)


async def test_limit_below_the_candidates_cuts_after_reranking() -> None:
    plain = await (await engine_with()).search("alice", QUERY, limit=6)
    reranker = ReversedReranker()
    hits = await (await engine_with(reranker, rerank_candidates=5)).search(
        "alice", QUERY, limit=2)
    assert len(reranker.calls[0][1]) == 5  # five candidates scored for a limit of two
    assert ids(hits) == [plain[4].memory.content, plain[3].memory.content]


async def test_equal_scores_keep_the_hybrid_order() -> None:
    class Flat:
        model = "flat"

        async def rerank(self, query: str, documents: Sequence[str]) -> list[float]:
            return [1.0] * len(documents)

    plain = await (await engine_with()).search("alice", QUERY, limit=6)
    hits = await (await engine_with(Flat())).search("alice", QUERY, limit=6)
    assert ids(hits) == ids(plain) and all(h.rerank_score == 1.0 for h in hits)


async def test_no_hits_calls_no_reranker() -> None:
    reranker = ReversedReranker()
    engine = await engine_with(reranker)
    assert await engine.search("bob", QUERY) == []
    assert reranker.calls == []


async def test_a_bad_limit_is_refused_with_a_reranker_too() -> None:
    engine = await engine_with(ReversedReranker())
    for bad in (0, -1, 1001, True):
        with pytest.raises(InvalidQuery):
            await engine.search("alice", QUERY, limit=bad)


@pytest.mark.parametrize("scores", [[1.0], [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0],
                                    [1.0, math.nan, 0, 0, 0, 0], [1.0, "2", 0, 0, 0, 0],
                                    [True, 1.0, 0, 0, 0, 0], "123456", None])
async def test_scores_that_do_not_match_the_candidates_are_refused(scores: Any) -> None:
    class Bad:
        model = "bad"

        async def rerank(self, query: str, documents: Sequence[str]) -> list[float]:
            return scores  # type: ignore[no-any-return]

    engine = await engine_with(Bad(), rerank_on_error="raise")
    with pytest.raises(RerankError, match="'bad'"):
        await engine.search("alice", QUERY, limit=6)


async def test_fallback_answers_the_hybrid_order_without_rerank_scores(
        caplog: pytest.LogCaptureFixture) -> None:
    plain = await (await engine_with()).search("alice", QUERY, limit=6)
    engine = await engine_with(BrokenReranker())  # rerank_on_error="fallback" by default
    with caplog.at_level("WARNING", logger="dream_memory_actor.rerank"):
        hits = await engine.search("alice", QUERY, limit=6)
    assert ids(hits) == ids(plain) and all(h.rerank_score is None for h in hits)
    assert "reranking failed" in caplog.text and "KeyError" in caplog.text
    raising = await engine_with(BrokenReranker(), rerank_on_error="raise")
    with pytest.raises(RerankError, match="KeyError") as info:
        await raising.search("alice", QUERY, limit=6)
    assert isinstance(info.value.__cause__, KeyError)


def test_settings() -> None:
    with pytest.raises(ConfigurationError, match="rerank_on_error"):
        MemorySettings(backend="memory", rerank_on_error="ignore")
    with pytest.raises(ConfigurationError, match="rerank_candidates"):
        MemorySettings(backend="memory", rerank_candidates=0)
    assert make_reranker(MemorySettings(backend="memory")) is None
    made = make_reranker(MemorySettings(backend="memory", rerank_model=MODEL,
                                        rerank_api_key=API_KEY, rerank_timeout_s=3))
    assert isinstance(made, LiteLLMReranker) and made.timeout_s == 3
    assert API_KEY not in repr(made)


async def test_unknown_on_error_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError):
        await rerank_hits(ReversedReranker(), "q", [], candidates=3, on_error="ignore")


# -- litellm's rerank API, against a scripted server ----------------------------------


def cohere_reply(order: Sequence[int] | None = None, **overrides: Any) -> Any:
    """A Cohere rerank reply scoring document i by ``1 / (1 + rank of i in order)``."""

    def respond(request: Any) -> Reply:
        n = len(request["documents"])
        ranking = list(order) if order is not None else list(range(n))
        results = [{"index": i, "relevance_score": 1.0 / (1 + rank)}
                   for rank, i in enumerate(ranking)]
        body = {"id": "rr-1", "results": results, "meta": {"billed_units": {"search_units": 1}},
                **overrides}
        return Reply(200, json.dumps(body).encode(), {"content-type": "application/json"})

    return respond


def raw(body: bytes, status: int = 200, delay_s: float = 0.0) -> Any:
    return lambda request: Reply(status, body, {"content-type": "application/json"}, delay_s)


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer() as s:
        yield s


@pytest.fixture
def api(server: ScriptedOpenAIServer) -> Iterator[ScriptedOpenAIServer]:
    server.clear()
    yield server
    assert server.pending() == 0, "the test queued replies that were never requested"
    assert server.errors == []


def base(api: ScriptedOpenAIServer) -> str:
    return f"http://127.0.0.1:{api.port}"


def reranker(api: ScriptedOpenAIServer, timeout_s: float = 5.0) -> LiteLLMReranker:
    return LiteLLMReranker(MODEL, api_base=base(api), api_key=API_KEY, timeout_s=timeout_s)


async def test_litellm_request_and_scores(api: ScriptedOpenAIServer) -> None:
    api.queue(PATH, cohere_reply([2, 0, 1]))
    scores = await reranker(api).rerank("deploy", ["a", "b", "c"])
    assert scores == [0.5, 1 / 3, 1.0]
    (request,) = api.requests_to(PATH)
    assert request.json["query"] == "deploy" and request.json["documents"] == ["a", "b", "c"]
    assert request.json["model"] == "rerank-v3.5" and "top_n" not in request.json
    assert request.headers["authorization"] == f"Bearer {API_KEY}"


async def test_engine_search_with_the_litellm_reranker(api: ScriptedOpenAIServer) -> None:
    plain = await (await engine_with()).search("alice", QUERY, limit=6)
    engine = await engine_with(rerank_model=MODEL, rerank_api_base=base(api),
                               rerank_api_key=API_KEY, rerank_candidates=6)
    assert isinstance(engine.reranker, LiteLLMReranker)
    api.queue(PATH, cohere_reply([5, 3, 1, 0, 2, 4]))
    hits = await engine.search("alice", QUERY, limit=3)
    assert ids(hits) == [plain[i].memory.content for i in (5, 3, 1)]
    assert [h.rerank_score for h in hits] == [1.0, 0.5, pytest.approx(1 / 3)]
    (request,) = api.requests_to(PATH)
    assert request.json["documents"] == [h.memory.content for h in plain]


GOOD = json.dumps({"results": [{"index": 0, "relevance_score": 0.1},
                               {"index": 1, "relevance_score": 0.9}]}).encode()
BAD_REPLIES: dict[str, Any] = {
    "HTTP 500": raw(b'{"message": "internal error"}', 500),
    "HTTP 401": raw(b'{"message": "invalid api token"}', 401),
    "HTTP 429": raw(b'{"message": "too many requests"}', 429),
    "not JSON": raw(b'{"results": [{"index": 0,'),
    "no results": raw(b'{"id": "x", "meta": {}}'),
    "results not a list": raw(b'{"results": {"0": 0.5}}'),
    "too few results": raw(b'{"results": [{"index": 0, "relevance_score": 0.5}]}'),
    "repeated index": raw(b'{"results": [{"index": 0, "relevance_score": 0.5}, '
                          b'{"index": 0, "relevance_score": 0.4}]}'),
    "index out of range": raw(b'{"results": [{"index": 0, "relevance_score": 0.5}, '
                              b'{"index": 7, "relevance_score": 0.4}]}'),
    "NaN score": raw(b'{"results": [{"index": 0, "relevance_score": NaN}, '
                     b'{"index": 1, "relevance_score": 0.4}]}'),
    "score missing": raw(b'{"results": [{"index": 0}, {"index": 1}]}'),
    "slow": raw(GOOD, delay_s=3.0),
}


@pytest.mark.parametrize("case", list(BAD_REPLIES))
async def test_litellm_bad_replies_are_rerank_errors(api: ScriptedOpenAIServer,
                                                     case: str) -> None:
    api.queue(PATH, BAD_REPLIES[case])
    start = time.monotonic()
    with pytest.raises(RerankError) as info:
        await reranker(api, timeout_s=0.5).rerank("q", ["a", "b"])
    assert time.monotonic() - start < 2.5
    message = str(info.value)
    assert MODEL in message and API_KEY not in message
    if case.startswith("HTTP"):
        assert case in message and info.value.__cause__ is not None
    if case == "slow":
        assert "timed out after 0.5s" in message
    assert len(api.requests_to(PATH)) == 1  # litellm does not retry rerank by default


@pytest.mark.parametrize("case", ["HTTP 500", "too few results", "slow"])
async def test_engine_falls_back_or_raises_on_a_bad_reply(api: ScriptedOpenAIServer,
                                                          case: str) -> None:
    plain = await (await engine_with()).search("alice", QUERY, limit=6)
    common = {"rerank_model": MODEL, "rerank_api_base": base(api), "rerank_api_key": API_KEY,
              "rerank_timeout_s": 0.5}
    api.queue(PATH, BAD_REPLIES[case])
    hits = await (await engine_with(**common)).search("alice", QUERY, limit=6)
    assert ids(hits) == ids(plain) and all(h.rerank_score is None for h in hits)
    api.queue(PATH, BAD_REPLIES[case])
    engine = await engine_with(**common, rerank_on_error="raise")
    with pytest.raises(RerankError):
        await engine.search("alice", QUERY, limit=6)
    assert await engine.vector.count("alice") == len(MEMORIES)


async def test_litellm_unreachable_server() -> None:
    from tests.support.servers import free_port

    r = LiteLLMReranker(MODEL, api_base=f"http://127.0.0.1:{free_port()}", api_key=API_KEY,
                        timeout_s=2)
    with pytest.raises(RerankError, match=MODEL) as info:
        await r.rerank("q", ["a"])
    assert API_KEY not in str(info.value)


# -- a cross-encoder the test builds --------------------------------------------------

WORDS = ("the a api deploy deployed deploys went live on kubernetes helm tuesday payment "
         "service runs three replicas production approval engineer alice prefers dark mode "
         "release rolled back database migration canary traffic hour . , to")


def build_cross_encoder(path: Path) -> Path:
    """A 1-layer BERT with random weights and a hand-written WordPiece vocabulary, saved
    where a CrossEncoder loads it from."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    path.mkdir(parents=True, exist_ok=True)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS.split(), "##s", "##ed"]
    (path / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    torch.manual_seed(7)
    config = BertConfig(vocab_size=len(vocab), hidden_size=16, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=32,
                        max_position_embeddings=64, num_labels=1)
    BertForSequenceClassification(config).save_pretrained(path)
    BertTokenizerFast(vocab_file=str(path / "vocab.txt")).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def cross_encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_cross_encoder(tmp_path_factory.mktemp("tiny-cross-encoder"))


@pytest.mark.slow
async def test_cross_encoder_orders_the_candidates_by_its_own_scores(
        cross_encoder: Path) -> None:
    from sentence_transformers import CrossEncoder

    from dream_memory_actor.rerank.cross_encoder import CrossEncoderReranker

    plain = await (await engine_with()).search("alice", QUERY, limit=6)
    engine = await engine_with(rerank_model=f"cross-encoder:{cross_encoder}",
                               rerank_candidates=6, rerank_on_error="raise")
    assert isinstance(engine.reranker, CrossEncoderReranker)
    hits = await engine.search("alice", QUERY, limit=6)
    expected = CrossEncoder(str(cross_encoder), device="cpu", local_files_only=True).predict(
        [(QUERY, h.memory.content) for h in plain], show_progress_bar=False)
    order = sorted(range(len(plain)), key=lambda i: -float(expected[i]))
    assert ids(hits) == [plain[i].memory.content for i in order]
    assert [h.rerank_score for h in hits] == [pytest.approx(float(expected[i]), abs=1e-5)
                                              for i in order]
    # a memory far longer than the model's 64 positions is truncated, not an error
    long = await engine.reranker.rerank(QUERY, ["the api " * 5000, "deploy"])
    assert len(long) == 2 and all(math.isfinite(s) for s in long)


@pytest.mark.slow
async def test_cross_encoder_that_cannot_load_is_a_rerank_error(tmp_path: Path) -> None:
    from dream_memory_actor.rerank.cross_encoder import CrossEncoderReranker

    r = CrossEncoderReranker(str(tmp_path / "missing"))
    with pytest.raises(RerankError, match="cannot load"):
        await r.rerank("q", ["a"])
    plain = await (await engine_with()).search("alice", QUERY, limit=6)
    hits = await (await engine_with(r)).search("alice", QUERY, limit=6)
    assert ids(hits) == ids(plain) and all(h.rerank_score is None for h in hits)


def test_cross_encoder_name_must_not_be_empty() -> None:
    with pytest.raises(ConfigurationError):
        make_reranker(MemorySettings(backend="memory", rerank_model="cross-encoder:"))
