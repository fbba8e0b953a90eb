"""ExtractorPool on a real Ray runtime: actors, load spreading, errors, the service through it.

Ray is started here for this module unless the session already runs it (the
runtime tests start it for the session); one started here is shut down after.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence

import pytest

from dream_memory_actor import MemoryEngine, MemorySettings
from dream_memory_actor.errors import (
    ConfigurationError,
    ExtractionUnavailable,
    MalformedExtraction,
    SystemClosed,
)
from dream_memory_actor.extraction import (
    ExtractedItem,
    ExtractionResult,
    ExtractionService,
    RuleBasedExtractor,
)
from dream_memory_actor.models import ChatMessage
from dream_memory_actor.runtime.extractor_pool import ExtractorPool
from dream_memory_actor.storage.memory import InMemoryStructuredStore, InMemoryVectorStore
from tests.extraction.conftest import MODEL, llm_settings
from tests.support.openai_server import CHAT_PATH, ScriptedOpenAIServer

MESSAGES = [ChatMessage(role="user", content="From now on, reply in Chinese.")]
RULE = {"kind": "rule", "content": "Reply in Chinese", "confidence": 0.93,
        "evidence": "reply in Chinese"}


@pytest.fixture(autouse=True)
def _ray(ray_runtime: None) -> None:
    """The session's one Ray runtime (tests/conftest.py)."""


class Echo:
    """A test factory: one fact per message, tagged with the actor's settings."""

    name = "echo"
    source = "rules"

    def __init__(self, settings: MemorySettings) -> None:
        self.window = settings.chat_window

    async def extract(self, messages: Sequence[ChatMessage]) -> ExtractionResult:
        items = tuple(ExtractedItem(kind="fact", content=f"{m.content} ({self.window})",
                                    confidence=0.9, evidence=m.content) for m in messages)
        return ExtractionResult(items=items, extractor=self.name, source=self.source)


def test_rule_based_pool() -> None:
    pool = ExtractorPool(MemorySettings(backend="memory"), size=2)
    try:
        assert (pool.size, pool.name, pool.source) == (2, "rule-based", "rules")
        result = pool.extract(MESSAGES)
        assert [(i.kind, i.content) for i in result.items] == [("rule", "Reply in Chinese")]
        assert pool.extract([]).items == ()
        assert pool.stats()["in_flight"] == [0, 0]
    finally:
        pool.shutdown()
    pool.shutdown()  # twice is fine
    with pytest.raises(SystemClosed):
        pool.extract(MESSAGES)


def test_factory_and_size_from_settings() -> None:
    pool = ExtractorPool(MemorySettings(backend="memory", extraction_pool_size=1, chat_window=7),
                         factory=Echo)
    try:
        assert pool.size == 1 and pool.name == "echo"
        assert [i.content for i in pool.extract(MESSAGES).items] == [
            "From now on, reply in Chinese. (7)"]
    finally:
        pool.shutdown(force=True)
    with pytest.raises(ConfigurationError):
        ExtractorPool(MemorySettings(backend="memory"), size=0)


async def test_llm_pool_over_http(api: ScriptedOpenAIServer) -> None:
    pool = ExtractorPool(llm_settings(api), size=2)
    try:
        assert pool.name == f"llm:{MODEL}"
        api.queue_chat(json.dumps({"items": [RULE]}), delay_s=0.5, times=4)
        results = await asyncio.gather(*(pool.extract_async(MESSAGES) for _ in range(4)))
        assert [[i.content for i in r.items] for r in results] == [["Reply in Chinese"]] * 4
        assert all(r.usage.prompt_tokens > 0 for r in results)
        assert pool.stats()["calls"] == [2, 2]
        # the calls overlap: the model server had two or more waiting at one time
        assert api.most_delayed_at_once >= 2, "the four calls did not overlap"
        assert len(api.requests_to(CHAT_PATH)) == 4

        api.queue_chat(status=500)
        with pytest.raises(ExtractionUnavailable) as info:
            await pool.extract_async(MESSAGES)
        assert type(info.value) is ExtractionUnavailable  # our class, not Ray's wrapper
        api.queue_chat("this is not JSON")
        with pytest.raises(MalformedExtraction):
            pool.extract(MESSAGES)
    finally:
        pool.shutdown()


async def test_service_through_the_pool() -> None:
    settings = MemorySettings(backend="memory")
    pool = ExtractorPool(settings, size=2)
    engine = MemoryEngine(settings, InMemoryStructuredStore(), InMemoryVectorStore())
    try:
        svc = ExtractionService(engine, engine.structured, pool.as_extractor(), settings)
        report = await svc.extract("alice", [
            *MESSAGES, ChatMessage(role="user", content="I am a Java developer.")])
        assert report.extractor == "rule-based"
        assert report.counts["written"] == 1 and report.counts["queued"] == 1
        snap = await engine.snapshot("alice")
        assert [r.content for r in snap.rules] == ["Reply in Chinese"]
        assert [p.content for p in snap.pending] == ["The user is a Java developer"]
    finally:
        pool.shutdown()
        await engine.close()


def test_the_pool_can_be_sent_to_other_actors() -> None:
    import ray

    pool = ExtractorPool(MemorySettings(backend="memory"), size=1)

    @ray.remote(num_cpus=0)
    def use(p: ExtractorPool) -> list[str]:
        found = [i.content or "" for i in p.extract(MESSAGES).items]
        p.shutdown()  # a copy: does not end the actors
        return found

    try:
        assert ray.get(use.remote(pool), timeout=120) == ["Reply in Chinese"]
        assert [i.content for i in pool.extract(MESSAGES).items] == ["Reply in Chinese"]
    finally:
        pool.shutdown()


def test_the_rule_based_extractor_says_what_it_is() -> None:
    assert RuleBasedExtractor().name == "rule-based"
    assert "LLM" not in repr(RuleBasedExtractor())
