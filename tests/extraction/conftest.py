"""Fixtures of the extraction tests: the scripted LLM server and engines on every backend."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from pydantic import SecretStr

from dream_memory_actor import MemoryEngine, MemorySettings
from dream_memory_actor.extraction import ExtractionService, Extractor
from dream_memory_actor.extraction.llm import LLMExtractor
from tests.conftest import make_stores
from tests.support.openai_server import ScriptedOpenAIServer

#: Backends that implement the chat window and the audit trail.
EXTRACTION_BACKENDS = ["memory", "postgres", "redis", "redis-stack"]
MODEL = "openai/gpt-4o-mini"
API_KEY = "sk-test-extraction-0123456789"


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer() as s:
        yield s


@pytest.fixture
def api(server: ScriptedOpenAIServer) -> Iterator[ScriptedOpenAIServer]:
    """The module's server, with no queued replies and no recorded requests."""
    server.clear()
    yield server
    assert server.pending() == 0, "the test queued replies that were never requested"
    assert server.errors == []


def llm_settings(api: ScriptedOpenAIServer, **overrides: Any) -> MemorySettings:
    values: dict[str, Any] = {
        "backend": "memory", "extraction_model": MODEL, "extraction_api_base": api.base_url,
        "extraction_api_key": SecretStr(API_KEY), "extraction_timeout_s": 5.0,
        "extraction_max_retries": 0,
    }
    values.update(overrides)
    return MemorySettings(**values)


def llm(api: ScriptedOpenAIServer, **overrides: Any) -> LLMExtractor:
    return LLMExtractor.from_settings(llm_settings(api, **overrides))


@pytest.fixture(params=EXTRACTION_BACKENDS)
async def engine(request: pytest.FixtureRequest) -> AsyncIterator[MemoryEngine]:
    """An engine (no embedder: keyword-only L2) on fresh storage of one backend."""
    stores = await make_stores(request.param, request, dim=None)
    e = MemoryEngine(MemorySettings(backend="memory"), stores.structured, stores.vector)
    try:
        yield e
    finally:
        await e.close()


def service(engine: MemoryEngine, extractor: Extractor | None = None,
            **settings: Any) -> ExtractionService:
    """A service on ``engine`` with ``settings`` overriding the defaults."""
    from dream_memory_actor.extraction import RuleBasedExtractor

    return ExtractionService(engine, engine.structured, extractor or RuleBasedExtractor(),
                             MemorySettings(backend="memory", **settings))
