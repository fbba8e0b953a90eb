"""The three local models, real and offline: calibration on held-apart pairs,
roles, Chinese and English, and text they cannot take."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import numpy as np
import pytest

from dream_memory_actor.config import MemorySettings
from dream_memory_actor.embedding import (
    CachedEmbedder,
    UnembeddableText,
    open_embedder,
    shipped_calibration,
)
from dream_memory_actor.embedding.calibrate import fit, fit_langs, merge_rates, pair_scores
from dream_memory_actor.embedding.calibration import dedup_cut, fit_curve, labelled_pairs
from dream_memory_actor.embedding.multilingual import E5_MAX_TOKENS, E5Embedder, USEEmbedder
from dream_memory_actor.engine import MemoryEngine
from dream_memory_actor.errors import InvalidContent
from dream_memory_actor.storage.memory import InMemoryStructuredStore, InMemoryVectorStore

pytestmark = pytest.mark.slow

MODELS = ("local:all-MiniLM-L6-v2", "local:multilingual-e5-small", "local:use-multilingual")
MULTILINGUAL = MODELS[1:]
#: Acceptance on the held-apart pairs at the default dedup threshold.
MAX_UNRELATED_MERGED = 0.01
MIN_PARAPHRASE_MERGED = 0.80
#: Distinct events of one template (another person, place, date) merged at most.
MAX_DISTINCT_MERGED = 0.10

_opened: dict[str, CachedEmbedder] = {}


@pytest.fixture(scope="module", params=MODELS)
def model(request: pytest.FixtureRequest) -> Iterator[str]:
    yield request.param


async def embedder_for(model: str) -> CachedEmbedder:
    if model not in _opened:
        emb = await open_embedder(MemorySettings(backend="memory", embedding_model=model))
        assert emb is not None
        _opened[model] = emb
    return _opened[model]


def cos(a: list[float], b: list[float]) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


async def test_held_apart_pairs_merge_as_required(model: str) -> None:
    emb = await embedder_for(model)
    cal = emb.calibration
    assert cal == shipped_calibration(model)
    test = labelled_pairs("test", fit_langs(model))
    memory, _ = await pair_scores(emb, test)
    # each language cut on its own memory curve, as the write path cuts it
    raw = {lang: cal.dedup_threshold(0.85, lang) for lang in fit_langs(model)}
    share = {label: float(np.mean([s > raw[p.lang] for p, s in zip(test, memory, strict=True)
                                   if p.label == label]))
             for label in ("unrelated", "paraphrase")}
    assert share["unrelated"] <= MAX_UNRELATED_MERGED, (model, share)
    assert share["paraphrase"] >= MIN_PARAPHRASE_MERGED, (model, share)
    rates = await merge_rates(emb, cal, 0.85, langs=fit_langs(model))
    for lang, by_label in rates.items():  # per language: Chinese ones merge most
        assert by_label["distinct"] <= MAX_DISTINCT_MERGED, (model, lang, by_label)
    for label, value in share.items():
        assert value == pytest.approx(np.mean([rates[lang][label] for lang in rates]))


async def test_distinct_events_guard_the_dedup_cut_only(model: str) -> None:
    # the distinct pairs raise the memory curve's duplicate anchor to their 95th
    # percentile when they reach that high, and never move the query curve
    emb = await embedder_for(model)
    pairs = labelled_pairs("fit", fit_langs(model))
    memory, query = await pair_scores(emb, pairs)
    distinct = [s for p, s in zip(pairs, memory, strict=True) if p.label == "distinct"]
    others = {label: [s for p, s in zip(pairs, memory, strict=True) if p.label == label]
              for label in ("unrelated", "related", "paraphrase")}
    shipped = shipped_calibration(model)
    assert shipped is not None
    cut = shipped.dedup_threshold(0.85)
    assert cut == pytest.approx(max(dedup_cut(others), float(np.quantile(distinct, 0.95))),
                                abs=2e-3)
    without = {label: [s for p, s in zip(pairs, query, strict=True) if p.label == label]
               for label in ("unrelated", "related", "paraphrase")}
    assert shipped.query.xs == pytest.approx(fit_curve(without).xs, abs=2e-3)


async def test_shipped_calibration_is_what_the_fit_gives(model: str) -> None:
    emb = await embedder_for(model)
    refit = await fit(emb, model)
    shipped = shipped_calibration(model)
    assert shipped is not None
    assert [lang for lang, _ in refit.memory_langs] == [lang for lang, _ in shipped.memory_langs]
    pairs = [(refit.memory, shipped.memory), (refit.query, shipped.query)] + [
        (ours, theirs) for (_, ours), (_, theirs) in zip(refit.memory_langs,
                                                          shipped.memory_langs, strict=True)]
    for ours, theirs in pairs:
        assert ours.xs == pytest.approx(theirs.xs, abs=2e-3)
        assert ours.ys == pytest.approx(theirs.ys)


async def test_vectors_are_normalised_and_of_the_model_dimension(model: str) -> None:
    emb = await embedder_for(model)
    vectors = await emb.embed(["K8s deployment", "部署上线"]) + \
        await emb.embed_query(["K8s deployment"])
    assert all(len(v) == emb.dim for v in vectors)
    assert all(abs(float(np.linalg.norm(v)) - 1.0) < 1e-3 for v in vectors)
    results = await asyncio.gather(*(emb.inner.embed([f"memory {i}", f"记忆 {i}"])
                                     for i in range(5)))
    assert [len(r) for r in results] == [2] * 5
    assert await emb.inner.embed([]) == []


@pytest.mark.parametrize("text", ["\u200b", " \n ", "a\ud800b", "a\x00b", ""])
async def test_text_the_model_cannot_take_is_a_typed_error(model: str, text: str) -> None:
    emb = await embedder_for(model)
    with pytest.raises(UnembeddableText):
        await emb.inner.embed(["fine", text])
    with pytest.raises(UnembeddableText):
        await emb.embed_query([text])


async def test_bad_text_writes_nothing_and_long_text_is_stored(model: str) -> None:
    emb = await embedder_for(model)
    engine = MemoryEngine(MemorySettings(backend="memory", embedding_model=model),
                          InMemoryStructuredStore(), InMemoryVectorStore(emb.dim), emb)
    for text in ("\u200b\u200b", "plan \ud83d the deploy"):
        with pytest.raises(InvalidContent):
            await engine.store("alice", text)
    assert await engine.vector.count("alice") == 0
    long_text = "部署到生产环境之前要先跑完所有测试。" * 400 + " the end"   # ~ 22 KB, ~6000 tokens
    result = await engine.store("alice", long_text)
    assert not result.merged and await engine.vector.count("alice") == 1


async def test_multilingual_models_know_chinese_synonyms() -> None:
    for model in MULTILINGUAL:
        emb = await embedder_for(model)
        deploy, launch, cat = await emb.embed(["部署", "上线", "猫"])
        assert cos(deploy, launch) > cos(deploy, cat), model
        q, hit, miss = (await emb.embed_query(["服务什么时候上线？"]))[0], *await emb.embed(
            ["接口服务周二部署到了生产环境。", "我家的猫只吃湿粮。"])
        assert cos(q, hit) > cos(q, miss), model


async def test_e5_embeds_queries_and_memories_with_their_roles() -> None:
    emb = await embedder_for("local:multilingual-e5-small")
    assert isinstance(emb.inner, E5Embedder) and emb.has_query_role
    (as_memory,) = await emb.embed(["when did the api go live"])
    (as_query,) = await emb.embed_query(["when did the api go live"])
    assert cos(as_memory, as_query) < 0.999
    use = await embedder_for("local:use-multilingual")
    assert isinstance(use.inner, USEEmbedder) and not use.has_query_role


async def test_e5_truncates_a_long_text_to_its_window() -> None:
    emb = await embedder_for("local:multilingual-e5-small")
    inner = emb.inner
    assert isinstance(inner, E5Embedder)
    engine = inner._loaded()[0].model
    text = "deploy the payment service on friday. " * 200
    fitted = E5Embedder.fit_window(engine, text, False)
    assert len(fitted) < len(text)
    assert engine.token_count(fitted, False) <= E5_MAX_TOKENS
    assert engine.token_count(text[:len(fitted) + 1], False) > E5_MAX_TOKENS
    short = "deploy the payment service on friday."
    assert E5Embedder.fit_window(engine, short, True) == short
    (whole,), (prefix,) = await inner.embed([text]), await inner.embed([fitted])
    assert whole == pytest.approx(prefix, abs=1e-6)


async def test_pair_scores_follow_the_labels(model: str) -> None:
    if model not in MULTILINGUAL:
        pytest.skip("all-MiniLM-L6-v2 is English only; its Chinese cosines carry no meaning")
    emb = await embedder_for(model)
    pairs = [p for p in labelled_pairs("test") if p.lang == "zh"]
    memory, _ = await pair_scores(emb, pairs)
    by = {label: float(np.median([s for p, s in zip(pairs, memory, strict=True)
                                  if p.label == label]))
          for label in ("unrelated", "related", "paraphrase")}
    assert by["unrelated"] < by["related"] < by["paraphrase"]
