"""Calibrated similarity and embedding roles, with model-free embedders."""

from __future__ import annotations

import itertools
import json
import statistics
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pytest

from dream_memory_actor.config import MemorySettings
from dream_memory_actor.embedding import (
    IDENTITY,
    CachedEmbedder,
    Calibration,
    UnembeddableText,
    check_embeddable,
    load_calibration,
    shipped_calibration,
)
from dream_memory_actor.embedding.calibrate import fit, merge_rates, pair_scores
from dream_memory_actor.embedding.calibration import (
    DUPLICATE,
    RELATED,
    UNRELATED,
    Curve,
    dedup_cut,
    fit_curve,
    labelled_pairs,
)
from dream_memory_actor.embedding.hashing import HashingEmbedder
from dream_memory_actor.engine import MemoryEngine
from dream_memory_actor.errors import ConfigurationError, InvalidContent
from dream_memory_actor.scoring import Candidate, Weights, rank, vector_score
from dream_memory_actor.storage.memory import InMemoryStructuredStore, InMemoryVectorStore

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)
SHIPPED = ("local:all-MiniLM-L6-v2", "local:multilingual-e5-small", "local:use-multilingual")
#: A curve that lifts raw cosines the way e5's does: 0.8 raw is "unrelated".
LIFTED = Curve((-1.0, 0.8, 0.9, 0.95, 1.0), (-1.0, 0.1, 0.5, 0.85, 1.0))
#: Memory curves of a model that puts Chinese pairs closer than English ones, as e5 does.
EN = Curve((-1.0, 0.79, 0.86, 0.94, 1.0), (-1.0, 0.1, 0.5, 0.85, 1.0))
ZH = Curve((-1.0, 0.87, 0.93, 0.97, 1.0), (-1.0, 0.1, 0.5, 0.85, 1.0))
BY_LANG = Calibration("m", LIFTED, LIFTED, (("en", EN), ("zh", ZH)))


# -- curves ---------------------------------------------------------------------


def test_identity_curve_maps_every_cosine_to_itself() -> None:
    c = Curve()
    assert c.is_identity and IDENTITY.is_identity
    for x in (-1.0, -0.3, 0.0, 0.42, 0.85, 1.0):
        assert c(x) == pytest.approx(x)
        assert c.inverse(x) == pytest.approx(x)


def test_curve_is_piecewise_linear_monotone_and_invertible() -> None:
    assert LIFTED(0.8) == pytest.approx(0.1)
    assert LIFTED(0.85) == pytest.approx(0.3)
    assert LIFTED(0.95) == pytest.approx(0.85)
    assert LIFTED(2.0) == 1.0 and LIFTED(-5.0) == -1.0
    xs = np.linspace(-1, 1, 401)
    ys = [LIFTED(float(x)) for x in xs]
    assert all(b >= a for a, b in itertools.pairwise(ys))
    for y in (-0.5, 0.1, 0.3, 0.85, 0.99):
        assert LIFTED(LIFTED.inverse(y)) == pytest.approx(y)
    assert LIFTED.inverse(0.85) == pytest.approx(0.95)


@pytest.mark.parametrize("xs, ys", [
    ((-1.0, 0.5, 0.4, 1.0), (-1.0, 0.1, 0.5, 1.0)),   # x not increasing
    ((-1.0, 0.4, 1.0), (-1.0, 0.5, 0.5)),              # y not increasing
    ((-0.5, 1.0), (-1.0, 1.0)),                        # does not span [-1, 1]
    ((-1.0,), (-1.0,)),
])
def test_bad_curves_are_configuration_errors(xs: tuple[float, ...],
                                             ys: tuple[float, ...]) -> None:
    with pytest.raises(ConfigurationError):
        Curve(xs, ys)


def test_fit_puts_the_anchors_of_the_common_scale() -> None:
    scores = {"unrelated": [0.70, 0.75, 0.80, 0.78, 0.72],
              "related": [0.85, 0.86, 0.88],
              "paraphrase": [0.93 + i * 0.005 for i in range(11)]}
    curve = fit_curve(scores)
    assert curve(0.75) == pytest.approx(UNRELATED)
    assert curve(0.86) == pytest.approx(RELATED)
    assert curve(0.935) == pytest.approx(DUPLICATE)  # 10th percentile of the paraphrases
    assert dedup_cut(scores) == pytest.approx(0.935)


def test_dedup_cut_rises_above_unrelated_pairs_that_score_high() -> None:
    scores = {"unrelated": [0.1] * 98 + [0.9, 0.95], "related": [0.5],
              "paraphrase": [0.8, 0.85, 0.9, 0.92]}
    assert dedup_cut(scores) > 0.9


def test_dedup_cut_rises_above_most_distinct_events() -> None:
    scores = {"unrelated": [0.1] * 10, "related": [0.5],
              "paraphrase": [0.80 + i * 0.01 for i in range(11)]}
    assert dedup_cut(scores) == pytest.approx(0.81)
    distinct = [0.5] * 19 + [0.95]  # the 95th percentile is 0.5225: below the paraphrases
    assert dedup_cut({**scores, "distinct": distinct}) == pytest.approx(0.81)
    distinct = [0.5] * 10 + [0.88] * 10
    assert dedup_cut({**scores, "distinct": distinct}) == pytest.approx(0.88)
    assert fit_curve({**scores, "distinct": distinct})(0.88) == pytest.approx(DUPLICATE)


def test_fit_leaves_out_anchors_that_would_break_monotonicity() -> None:
    # a model that scores related pairs above its paraphrases
    curve = fit_curve({"unrelated": [0.1, 0.2], "related": [0.95, 0.96],
                       "paraphrase": [0.6, 0.7, 0.8]})
    assert all(b > a for a, b in itertools.pairwise(curve.xs))
    with pytest.raises(ConfigurationError):
        fit_curve({"unrelated": [0.1], "related": [], "paraphrase": [0.9]})


def test_calibration_json_round_trip(tmp_path: Path) -> None:
    cal = Calibration("m", LIFTED, Curve((-1.0, 0.7, 1.0), (-1.0, 0.2, 1.0)))
    path = tmp_path / "cal.json"
    path.write_text(json.dumps(cal.to_json()))
    assert load_calibration(path) == cal
    path.write_text("{not json")
    with pytest.raises(ConfigurationError):
        load_calibration(path)
    with pytest.raises(ConfigurationError):
        load_calibration(tmp_path / "missing.json")


def test_memory_curves_per_language_round_trip_through_json(tmp_path: Path) -> None:
    data = BY_LANG.to_json()
    assert data["memory_langs"] == {"en": EN.to_json(), "zh": ZH.to_json()}
    path = tmp_path / "cal.json"
    path.write_text(json.dumps(data))
    back = load_calibration(path)
    assert back == BY_LANG and hash(back) == hash(BY_LANG)
    assert back.memory_for("zh") == ZH
    # a calibration without curves per language writes none, and reads back the same
    plain = Calibration("m", LIFTED, LIFTED)
    assert "memory_langs" not in plain.to_json()
    assert Calibration.from_json(plain.to_json()) == plain
    with pytest.raises(ConfigurationError):
        Calibration.from_json({**data, "memory_langs": [["en", EN.to_json()]]})


def test_calibration_written_before_curves_per_language_still_loads() -> None:
    old = {"model": "m", "memory": LIFTED.to_json(), "query": LIFTED.to_json()}
    cal = Calibration.from_json(old)
    assert cal.memory_langs == ()
    assert cal.dedup_threshold(0.85, "zh") == cal.dedup_threshold(0.85) == pytest.approx(0.95)


def test_dedup_threshold_is_on_the_curve_of_the_language() -> None:
    for lang, curve in (("en", EN), ("zh", ZH)):
        raw = BY_LANG.dedup_threshold(0.85, lang)
        assert raw == pytest.approx(curve.inverse(0.85))
        assert BY_LANG.memory_for(lang)(raw) == pytest.approx(0.85)
    assert BY_LANG.dedup_threshold(0.85, "en") == pytest.approx(0.94)
    assert BY_LANG.dedup_threshold(0.85, "zh") == pytest.approx(0.97)


@pytest.mark.parametrize("lang", [None, "", "fr"])
def test_a_language_without_a_curve_falls_back_to_the_curve_of_all(lang: str | None) -> None:
    assert BY_LANG.memory_for(lang) is LIFTED
    assert BY_LANG.dedup_threshold(0.85, lang) == BY_LANG.dedup_threshold(0.85) \
        == pytest.approx(0.95)


async def test_fit_gives_each_language_a_curve_through_its_own_anchors() -> None:
    emb = HashingEmbedder(dim=64)
    cal = await fit(emb, "hashing")
    assert [lang for lang, _ in cal.memory_langs] == ["en", "zh"]
    pairs = labelled_pairs("fit")
    memory, _ = await pair_scores(emb, pairs)
    for lang in ("en", "zh"):
        curve = cal.memory_for(lang)
        assert curve != cal.memory
        scores = {label: [s for p, s in zip(pairs, memory, strict=True)
                          if p.lang == lang and p.label == label]
                  for label in ("unrelated", "related", "paraphrase", "distinct")}
        assert curve(statistics.median(scores["related"])) == pytest.approx(RELATED)
        assert curve(statistics.median(scores["unrelated"])) == pytest.approx(UNRELATED)
        assert curve(dedup_cut(scores)) == pytest.approx(DUPLICATE)
    # each language is cut on its own curve when merge rates are measured
    rates = await merge_rates(emb, cal, 0.85, split="fit")
    zh = [(p, s) for p, s in zip(pairs, memory, strict=True)
          if p.lang == "zh" and p.label == "paraphrase"]
    cut = cal.dedup_threshold(0.85, "zh")
    assert rates["zh"]["paraphrase"] == pytest.approx(
        sum(s > cut for _, s in zh) / len(zh))


async def test_a_model_fitted_on_one_language_has_no_curve_per_language() -> None:
    emb = HashingEmbedder(dim=64)
    assert (await fit(emb, "local:all-MiniLM-L6-v2")).memory_langs == ()
    assert (await fit(emb, "hashing", ["zh"])).memory_langs == ()


# -- the shipped pairs and calibrations ---------------------------------------------


def test_labelled_pairs_cover_both_languages_and_keep_the_test_part_apart() -> None:
    fit, test = labelled_pairs("fit"), labelled_pairs("test")
    assert len(fit) + len(test) == len(labelled_pairs()) >= 600
    for lang in ("en", "zh"):
        for label in ("unrelated", "related", "paraphrase"):
            assert sum(p.lang == lang and p.label == label for p in test) >= 20
        assert sum(p.lang == lang and p.label == "distinct" for p in test) >= 12
    fit_texts = {t for p in fit for t in (p.a, p.b)}
    assert not fit_texts & {t for p in test for t in (p.a, p.b)}
    assert all(p.a != p.b for p in fit + test)


@pytest.mark.parametrize("model", SHIPPED)
def test_every_local_model_ships_a_calibration(model: str) -> None:
    cal = shipped_calibration(model)
    assert cal is not None and not cal.is_identity
    assert cal.memory(cal.dedup_threshold(0.85)) == pytest.approx(0.85)


def test_minilm_calibration_is_close_to_the_identity() -> None:
    cal = shipped_calibration("local:all-MiniLM-L6-v2")
    assert cal is not None
    grid = np.linspace(-1, 1, 201)
    assert max(abs(cal.query(float(x)) - x) for x in grid) < 0.05
    assert cal.dedup_threshold(0.85) == pytest.approx(0.85, abs=0.03)


def test_e5_calibration_moves_unrelated_cosines_down() -> None:
    cal = shipped_calibration("local:multilingual-e5-small")
    assert cal is not None
    assert cal.query(0.78) < 0.2          # a typical unrelated pair under e5
    assert cal.dedup_threshold(0.85) > 0.9
    assert cal.memory != cal.query        # e5's query and passage roles differ


@pytest.mark.parametrize("model", ["local:multilingual-e5-small", "local:use-multilingual"])
def test_multilingual_models_ship_a_memory_curve_per_language(model: str) -> None:
    cal = shipped_calibration(model)
    assert cal is not None
    assert [lang for lang, _ in cal.memory_langs] == ["en", "zh"]
    for lang in ("en", "zh"):
        assert cal.memory_for(lang) != cal.memory
        assert cal.memory_for(lang)(cal.dedup_threshold(0.85, lang)) == pytest.approx(0.85)


def test_e5_puts_the_chinese_dedup_cut_above_the_english_one() -> None:
    cal = shipped_calibration("local:multilingual-e5-small")
    assert cal is not None
    assert cal.dedup_threshold(0.85, "en") < cal.dedup_threshold(0.85) \
        < cal.dedup_threshold(0.85, "zh")


def test_english_only_model_ships_no_curve_per_language() -> None:
    cal = shipped_calibration("local:all-MiniLM-L6-v2")
    assert cal is not None and cal.memory_langs == ()
    assert cal.dedup_threshold(0.85, "zh") == cal.dedup_threshold(0.85)


# -- scoring and hits ---------------------------------------------------------------


def test_rank_uses_the_calibrated_cosine_as_the_vector_signal() -> None:
    cand = [Candidate("a", "unrelated text", NOW, 0.8, None),
            Candidate("b", "close text", NOW, 0.95, None)]
    raw = rank(cand, [], NOW, Weights(), 2, hybrid=True)
    assert {s.candidate.id: s.vector for s in raw} == {"a": 0.8, "b": 0.95}
    cal = rank(cand, [], NOW, Weights(calibration=LIFTED), 2, hybrid=True)
    got = {s.candidate.id: s.vector for s in cal}
    assert got["a"] == pytest.approx(0.1) and got["b"] == pytest.approx(0.85)
    assert cal[0].score == pytest.approx(0.6 * 0.85 + 0.1)
    assert vector_score(0.8, LIFTED) == pytest.approx(0.1)
    assert vector_score(0.8) == pytest.approx(0.8)
    with pytest.raises(ValueError):
        Weights(calibration=0.5)  # type: ignore[arg-type]


class Calibrated(HashingEmbedder):
    """Hashing vectors with a calibration and a query role that records its calls."""

    def __init__(self, calibration: Calibration) -> None:
        super().__init__(dim=32)
        self.calibration = calibration
        self.query_calls: list[list[str]] = []

    async def embed_query(self, texts: Sequence[str]) -> list[list[float]]:
        self.query_calls.append(list(texts))
        return [self.vector(t) for t in texts]


async def engine_with(inner: HashingEmbedder, **settings: object) -> MemoryEngine:
    s = MemorySettings(backend="memory", **settings)  # type: ignore[arg-type]
    return MemoryEngine(s, InMemoryStructuredStore(), InMemoryVectorStore(inner.dim),
                        CachedEmbedder(inner))


async def test_search_embeds_the_query_role_and_reports_both_scores() -> None:
    inner = Calibrated(Calibration("lifted", LIFTED, LIFTED))
    engine = await engine_with(inner)
    await engine.store("alice", "deploy the api with helm charts")
    hits = await engine.search("alice", "deploy the api with helm")
    assert inner.query_calls == [["deploy the api with helm"]]
    (hit,) = hits
    assert hit.cosine is not None and hit.vector_score is not None
    assert hit.vector_score == pytest.approx(min(1.0, max(0.0, LIFTED(hit.cosine))))
    assert hit.vector_score != pytest.approx(hit.cosine)


async def test_uncalibrated_embedder_keeps_the_raw_cosine() -> None:
    engine = await engine_with(HashingEmbedder(dim=32))
    await engine.store("alice", "deploy the api with helm charts")
    (hit,) = await engine.search("alice", "deploy the api with helm")
    assert hit.cosine is not None
    assert hit.vector_score == pytest.approx(min(1.0, max(0.0, hit.cosine)))
    assert engine.dedup_threshold == MemorySettings().dedup_threshold


async def test_dedup_threshold_is_on_the_calibrated_scale() -> None:
    # a rewording that conflicts in nothing: it merges when its similarity is above the cut
    a, b = "alice likes green tea", "green tea is a favourite of alice"
    h = HashingEmbedder(dim=32)
    raw = float(np.dot(h.vector(a), h.vector(b)))
    assert 0.5 < raw < MemorySettings().dedup_threshold   # not a duplicate on the raw scale
    # a calibration that calls this raw cosine 0.9: the pair merges
    lifting = Curve((-1.0, raw - 0.01, 1.0), (-1.0, 0.9, 1.0))
    engine = await engine_with(Calibrated(Calibration("c", lifting, lifting)))
    assert engine.dedup_threshold < raw
    await engine.store("alice", a)
    assert (await engine.store("alice", b)).merged
    plain = await engine_with(HashingEmbedder(dim=32))
    await plain.store("alice", a)
    assert not (await plain.store("alice", b)).merged


async def test_calibration_file_in_settings_wins(tmp_path: Path) -> None:
    from dream_memory_actor.embedding import open_embedder

    path = tmp_path / "c.json"
    path.write_text(json.dumps(Calibration("x", LIFTED, LIFTED).to_json()))
    settings = MemorySettings(backend="memory", embedding_model="local:use-multilingual",
                              embedding_calibration=path)
    emb = await open_embedder(settings)
    assert emb is not None and emb.calibration.query == LIFTED


# -- roles in the cache, and text no model can take ---------------------------------


async def test_cache_keys_by_role_only_for_embedders_with_a_query_role() -> None:
    inner = Calibrated(IDENTITY)
    cached = CachedEmbedder(inner)
    assert cached.has_query_role
    await cached.embed(["same text"])
    await cached.embed_query(["same text"])
    assert cached.misses == 2 and inner.query_calls == [["same text"]]
    await cached.embed_query_one("same text")
    assert cached.hits == 1
    plain = CachedEmbedder(HashingEmbedder(dim=16))
    assert not plain.has_query_role and plain.calibration is IDENTITY
    await plain.embed(["same text"])
    await plain.embed_query(["same text"])
    assert (plain.misses, plain.hits) == (1, 1)


@pytest.mark.parametrize("text", ["", " \t\n", "\u200b\u200d", "\x07", "a\ud800b", "a\x00b"])
def test_text_no_model_can_take_is_a_typed_error(text: str) -> None:
    with pytest.raises(UnembeddableText) as info:
        check_embeddable(["fine", text])
    assert isinstance(info.value, InvalidContent)
    assert "#1" in str(info.value)


async def test_unembeddable_text_writes_nothing() -> None:
    engine = await engine_with(HashingEmbedder(dim=32))
    for text in ("\u200b", "a\ud800b"):
        with pytest.raises(InvalidContent):
            await engine.store("alice", text)
        with pytest.raises(InvalidContent):
            await engine.search("alice", text)
    assert await engine.vector.count("alice") == 0
