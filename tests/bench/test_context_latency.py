"""The context-latency benchmark on a tiny made-up conversation, with no model."""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from redis.asyncio import Redis

from benchmarks.context_latency import (
    _drop,
    add_arguments,
    compared,
    measure,
    order,
    settings_for,
    targets,
)
from benchmarks.locomo import parse_conversation
from benchmarks.report_context import context_latency_section
from dream_memory_actor.config import MemorySettings
from dream_memory_actor.embedding import CachedEmbedder
from dream_memory_actor.embedding.hashing import HashingEmbedder
from dream_memory_actor.engine import MemoryEngine
from dream_memory_actor.storage.memory import InMemoryStructuredStore, InMemoryVectorStore


class Recording(HashingEmbedder):
    """The hashing test double, noting every text it is asked to embed."""

    def __init__(self) -> None:
        super().__init__(32)
        self.texts: list[str] = []

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.texts += texts
        return await super().embed(texts)


def conversation() -> dict[str, object]:
    return {
        "sample_id": "conv-1",
        "conversation": {
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a dog."},
                {"speaker": "Bob", "dia_id": "D1:2", "text": "What breed is it?"},
                {"speaker": "Ann", "dia_id": "D1:3", "text": "A beagle called Rex."},
            ],
            "session_2_date_time": "9:05 am on 12 June, 2023",
            "session_2": [{"speaker": "Bob", "dia_id": "D2:1", "text": "How is Rex?"}],
        },
        "qa": [{"question": "What pet?", "evidence": ["D1:1"], "category": 4},
               {"question": "Dog's name?", "evidence": ["D1:3"], "category": 4},
               {"question": "Breed?", "evidence": ["D1:3"], "category": 4}],
    }


def test_the_arms_take_turns_going_first() -> None:
    assert [order(i)[0] for i in range(4)] == ["plain", "context", "plain", "context"]


def test_ratios_are_context_over_plain_of_the_p50s_and_of_each_pair() -> None:
    c = compared({"plain": [0.010, 0.020, 0.030], "context": [0.020, 0.020, 0.060]})
    assert c["plain"]["p50_ms"] == 20.0 and c["context"]["p50_ms"] == 20.0
    assert c["p50_ratio_context_over_plain"] == 1.0
    assert c["pair_ratio_context_over_plain"]["median"] == 2.0  # pairs: 2, 1, 2
    assert c["pair_ratio_context_over_plain"]["n"] == 3


def test_a_target_is_met_only_when_both_ratios_are_within_it() -> None:
    def figures(store: float, pair: float) -> dict[str, object]:
        s = {"p50_ratio_context_over_plain": store,
             "pair_ratio_context_over_plain": {"median": pair}}
        flat = {"p50_ratio_context_over_plain": 1.0,
                "pair_ratio_context_over_plain": {"median": 1.0}}
        return {"store": s, "search_vector_given": flat, "search_with_embedding": flat}

    assert targets(figures(1.2, 1.25))["store_with_context_at_most_1.3x"]["met"] is True
    assert targets(figures(1.2, 1.4))["store_with_context_at_most_1.3x"]["met"] is False
    assert targets(figures(1.31, 1.0))["store_with_context_at_most_1.3x"]["met"] is False
    assert targets(figures(1.0, 1.0))["search_unchanged_vector_given"]["met"] is True


async def test_a_store_with_context_sends_the_model_only_what_its_conversation_says_new(
        ) -> None:
    conv = parse_conversation(conversation(), Counter())
    model = Recording()
    settings = MemorySettings(backend="memory")
    engines = {arm: MemoryEngine(settings, InMemoryStructuredStore(),
                                 InMemoryVectorStore(model.dim), CachedEmbedder(model, 100))
               for arm in ("plain", "context")}
    out = await measure(engines, [conv], turns=2, limit=5)
    turns, questions = len(conv.turns), len(conv.questions)
    contents = {t.content for t in conv.turns}
    dates = {"8 May 2023", "12 June 2023"}
    # the plain arm embeds each turn; the context arm each turn and each session's date:
    # the turns before a turn, its context, were embedded when they were stored
    assert out["store"]["model_texts"] == {"plain": turns, "context": turns + len(dates)}
    assert out["embedding"]["model_texts"] == out["store"]["model_texts"]
    assert set(model.texts) == contents | dates | {q.question for q in conv.questions}
    assert out["store"]["plain"]["n"] == out["store"]["context"]["n"] == turns
    assert sum(out["store"]["outcomes"]["context"].values()) == turns
    assert out["embedding"]["median_chars"]["context"] > out["embedding"]["median_chars"][
        "plain"]
    assert out["search_vector_given"]["model_texts"] == {"plain": 0, "context": 0}
    assert out["search_with_embedding"]["model_texts"] == {"plain": questions,
                                                           "context": questions}
    assert out["search_with_embedding"]["context"]["n"] == questions
    assert set(out["targets"]) == {"store_with_context_at_most_1.3x",
                                   "search_unchanged_vector_given",
                                   "search_unchanged_with_embedding"}
    for engine in engines.values():
        await engine.close()
    # the report shows the run's figures and which targets it met
    d = {**out, "benchmark": "context-latency", "backend": "memory", "model": "hashing",
         "turns": turns, "questions": questions, "conversations": ["conv-1"],
         "context_shape": {"turns": 2}, "load_average": {"start": [0.5], "end": [0.7]}}
    lines = context_latency_section([(Path("context-latency.json"), d)])
    row = next(x for x in lines if x.startswith("| store (embedding included)"))
    assert f"{out['store']['p50_ratio_context_over_plain']:.2f}" in row
    assert f"{out['store']['context']['p50_ms']:.1f}" in row
    met = out["targets"]["store_with_context_at_most_1.3x"]["met"]
    assert f"store with context at most 1.3x: {'yes' if met else 'no'}" in "".join(lines)
    assert "No context-latency results" in context_latency_section([])[2]


async def test_a_redis_run_has_a_prefix_of_its_own_and_removes_only_its_keys(
        redis_url: str) -> None:
    """``--backend redis``: the run writes under a fresh prefix, and its keys go after it;
    a key of another prefix stays."""
    p = argparse.ArgumentParser()
    add_arguments(p)
    args = p.parse_args(["--backend", "redis", "--redis-url", redis_url])
    a, b = settings_for(args, 0.85), settings_for(args, 0.85)
    assert a.backend == "redis" and a.redis_prefix != b.redis_prefix
    assert a.redis_url is not None and a.redis_url.get_secret_value() == redis_url
    engine = await MemoryEngine.open(a.model_copy(update={"embedding_model": None}))
    client = Redis.from_url(redis_url)
    try:
        await engine.store("ann", "I adopted a dog.")
        await client.set("elsewhere:key", "1")
        assert [k async for k in client.scan_iter(match=f"{a.redis_prefix}:*")]
        await _drop(engine, a)
        assert [k async for k in client.scan_iter(match=f"{a.redis_prefix}:*")] == []
        assert await client.get("elsewhere:key") == b"1"
    finally:
        await client.delete("elsewhere:key")
        await client.aclose()
        await engine.close()
