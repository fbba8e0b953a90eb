"""The LangGraph store: what LangGraph's own InMemoryStore does, over the memory; and a
LangGraph graph that uses it."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any, TypedDict

import pytest

pytest.importorskip("langgraph", reason="the langgraph extra is not installed")

from langchain_core.embeddings import Embeddings
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore, InvalidNamespaceError, PutOp
from langgraph.store.memory import InMemoryStore

from dream_memory_actor.config import MemorySettings
from dream_memory_actor.engine import MemoryEngine
from dream_memory_actor.errors import (
    EmbeddingModelMismatch,
    InvalidFilter,
    InvalidInput,
    InvalidMetadata,
    InvalidOwnerId,
)
from dream_memory_actor.integrations.langgraph import DreamMemoryStore
from tests.conftest import BACKENDS, backend_settings

#: The backends whose storage other doors share.
SHARED = [b for b in BACKENDS if b != "memory"]


def shared_settings(backend: str, request: pytest.FixtureRequest) -> MemorySettings:
    """``backend_settings``, with the store's keyspace dropped after the test as well."""
    settings = backend_settings(backend, request)
    if backend.startswith("redis"):
        from tests.support.redis_cluster import drop_cluster_prefix
        from tests.support.redis_servers import drop_prefix

        drop = drop_cluster_prefix if backend == "redis-cluster" else drop_prefix
        keyspace = f"{settings.redis_prefix}_langgraph"
        url = settings.redis_url.get_secret_value() if settings.redis_url else ""
        request.addfinalizer(lambda: drop(url, keyspace))
    return settings


@pytest.fixture
def store() -> Iterator[DreamMemoryStore]:
    s = DreamMemoryStore(MemorySettings(backend="memory"))
    try:
        yield s
    finally:
        s.close()


class Letters(Embeddings):
    """A LangGraph embedding of its own: letter counts, normalised (26 dimensions)."""

    def _one(self, text: str) -> list[float]:
        counts = [float(text.lower().count(chr(97 + i))) for i in range(26)]
        norm = sum(c * c for c in counts) ** 0.5 or 1.0
        return [c / norm for c in counts]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._one(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._one(text)


def _same_calls(s: BaseStore) -> list[Any]:
    """One sequence of LangGraph store calls; what each returned, without timestamps."""
    out: list[Any] = []
    s.put(("alice", "memories"), "m1", {"content": "went live on Kubernetes", "kind": "ops",
                                        "n": 3})
    s.put(("alice", "memories"), "m2", {"content": "prefers tea", "kind": "taste", "n": 7})
    s.put(("alice", "memories"), "m3", {"content": "prefers tea", "kind": "taste", "n": 9})
    s.put(("alice", "notes", "2026"), "n1", {"content": "quarterly plan"})
    s.put(("bob", "memories"), "m1", {"content": "bob's own", "kind": "ops", "n": 1})
    got = s.get(("alice", "memories"), "m1")
    out.append(None if got is None else (got.namespace, got.key, got.value))
    out.append(s.get(("alice", "memories"), "missing"))
    s.put(("alice", "memories"), "m1", {"content": "went live on Kubernetes with helm",
                                        "kind": "ops", "n": 4})
    got = s.get(("alice", "memories"), "m1")
    out.append(None if got is None else got.value)
    s.delete(("alice", "memories"), "m2")
    out.append(s.get(("alice", "memories"), "m2"))

    def keys(items: list[Any]) -> list[tuple[tuple[str, ...], str]]:
        return sorted((i.namespace, i.key) for i in items)

    out.append(keys(s.search(("alice",))))
    out.append(keys(s.search(("alice", "memories"), filter={"kind": "ops"})))
    out.append(keys(s.search(("alice", "memories"), filter={"n": {"$gte": 5}})))
    out.append(keys(s.search(("alice", "memories"), filter={"kind": {"$ne": "ops"}})))
    out.append(len(s.search(("alice",), limit=1)) + len(s.search(("alice",), offset=2)))
    out.append(s.list_namespaces(prefix=("alice",)))
    out.append(s.list_namespaces(prefix=("alice",), max_depth=2))
    out.append(s.list_namespaces(suffix=("memories",)))
    out.append(s.list_namespaces(prefix=("alice", "*", "2026")))
    return out


def test_behaves_as_langgraphs_in_memory_store(store: DreamMemoryStore) -> None:
    assert _same_calls(store) == _same_calls(InMemoryStore())


def test_timestamps_and_a_replaced_item_keep_created_at(store: DreamMemoryStore) -> None:
    store.put(("alice", "m"), "k", {"content": "first"})
    first = store.get(("alice", "m"), "k")
    store.put(("alice", "m"), "k", {"content": "second"})
    again = store.get(("alice", "m"), "k")
    assert first is not None and again is not None
    assert again.created_at == first.created_at and again.updated_at >= first.updated_at
    assert [i.key for i in store.search(("alice", "m"))] == ["k"]  # replaced, not added


def test_query_uses_the_hybrid_search(store: DreamMemoryStore) -> None:
    store.put(("alice", "memories"), "k8s", {"content": "went live on Kubernetes with helm"})
    store.put(("alice", "memories"), "tea", {"content": "prefers green tea in the morning"})
    store.put(("bob", "memories"), "k8s", {"content": "Kubernetes cluster of bob"})
    hits = store.search(("alice", "memories"), query="Kubernetes helm deployment")
    assert hits and hits[0].key == "k8s" and hits[0].namespace == ("alice", "memories")
    assert hits[0].score is not None and hits[0].score > 0
    assert all(h.namespace[0] == "alice" for h in hits)
    assert not store.search(("alice", "memories"), query="Kubernetes", filter={"x": 1})


def test_a_second_put_of_the_same_value_keeps_the_item(store: DreamMemoryStore) -> None:
    store.put(("alice",), "k", {"content": "same"})
    store.put(("alice",), "k", {"content": "same"})
    got = store.get(("alice",), "k")
    assert got is not None and got.value == {"content": "same"}
    assert len(store.search(("alice",))) == 1


def test_one_key_and_value_in_nested_namespaces_are_three_items(store: DreamMemoryStore
                                                                 ) -> None:
    spaces = [("foo",), ("foo", "child"), ("foo", "child", "deep")]
    for ns in spaces:
        store.put(ns, "k", {"content": "one value"})
    assert all(store.get(ns, "k") is not None for ns in spaces)
    assert sorted(i.namespace for i in store.search(("foo",))) == sorted(spaces)
    assert store.list_namespaces(prefix=("foo",)) == sorted(spaces)


def test_index_false_stores_the_item_unembedded() -> None:
    with DreamMemoryStore(MemorySettings(backend="memory"),
                          index={"dims": 26, "embed": Letters()}) as s:
        s.put(("docs",), "a", {"text": "banana bread"})
        s.put(("docs",), "b", {"text": "banana bread"}, index=False)
        hits = s.search(("docs",), query="banana")
        assert [h.key for h in hits] == ["a", "b"]
        assert hits[0].score is not None and hits[1].score is None


def test_a_query_ranks_without_a_model_and_filters_nothing(store: DreamMemoryStore) -> None:
    store.put(("alice", "cars"), "red", {"text": "a red car"})
    store.put(("alice", "cars"), "blue", {"text": "a blue bicycle"})
    hits = store.search(("alice",), query="vehicle")  # no word in common: all, unscored
    assert sorted(h.key for h in hits) == ["blue", "red"]
    assert all(h.score is None for h in hits)
    hits = store.search(("alice",), query="red")
    assert [h.key for h in hits] == ["red", "blue"]
    assert hits[0].score is not None and hits[0].score > 0 and hits[1].score is None


def test_langgraph_embeddings_score_by_the_cosine_of_the_best_field() -> None:
    letters = Letters()
    index = {"dims": 26, "embed": letters, "fields": ["title", "body"]}
    with DreamMemoryStore(MemorySettings(backend="memory"), index=index) as s:
        assert s.index_config is not None and s.index_config["dims"] == 26
        s.put(("docs",), "a", {"title": "zzz", "body": "apple"})
        s.put(("docs",), "b", {"title": "pear", "body": "qqq"})
        hits = s.search(("docs",), query="apple")
        assert [h.key for h in hits] == ["a", "b"]
        best = sum(x * y for x, y in zip(letters.embed_query("apple"),
                                         letters.embed_query("apple"), strict=True))
        assert hits[0].score == pytest.approx(best, abs=1e-6)
        assert hits[1].score == pytest.approx(sum(x * y for x, y in zip(
            letters.embed_query("apple"), letters.embed_query("pear"), strict=True)), abs=1e-6)


async def test_concurrent_first_calls_open_one_memory(monkeypatch: pytest.MonkeyPatch
                                                      ) -> None:
    import asyncio

    opened: list[object] = []
    real = MemoryEngine.open.__func__  # type: ignore[attr-defined]

    async def counting(cls: type[MemoryEngine], *a: Any, **k: Any) -> MemoryEngine:
        await asyncio.sleep(0.05)
        engine = await real(cls, *a, **k)
        opened.append(engine)
        return engine

    monkeypatch.setattr(MemoryEngine, "open", classmethod(counting))
    with DreamMemoryStore(MemorySettings(backend="memory")) as s:
        await asyncio.gather(*(s.aput(("alice",), f"k{i}", {"n": i}) for i in range(10)))
        assert len(await s.asearch(("alice",), limit=20)) == 10
    assert len(opened) == 1


@pytest.mark.parametrize("backend", SHARED)
def test_items_are_apart_from_the_other_doors(backend: str, request: pytest.FixtureRequest
                                              ) -> None:
    import asyncio

    settings = shared_settings(backend, request)
    text = '{"content": "We deploy with helm"}'  # the text of the item below

    async def other_door() -> list[str]:
        engine = await MemoryEngine.open(settings)
        try:
            await engine.store("alice", text)
            return [m.id for m in await engine.list("alice")]
        finally:
            await engine.close()

    first = asyncio.run(other_door())
    with DreamMemoryStore(settings) as s:
        s.put(("alice",), "k", {"content": "We deploy with helm"})
        s.delete(("alice",), "k")
        assert s.get(("alice",), "k") is None
    # the other door's memory was neither merged into nor erased by the store: storing
    # its text again merges into that same memory
    assert asyncio.run(other_door()) == first


def test_records_that_are_not_items_are_passed_over(request: pytest.FixtureRequest) -> None:
    import asyncio

    settings = shared_settings("postgres", request)
    with DreamMemoryStore(settings) as s:
        s.put(("alice",), "k", {"content": "a real item"})

        async def forge() -> None:  # records in the store's keyspace that are not items
            engine = await MemoryEngine.open(s.settings)
            try:
                for meta in ({"lg": "junk", "lg:part": 0, "lg:id": "x"},
                             {"lg": {"key": 1}, "lg:part": 0},
                             {"lg:part": 0, "lg:0": "alice"}, {"langgraph": {"key": "k"}}):
                    await engine.vector.store("items", "a real item, forged", metadata=meta,
                                              threshold=1.0)
            finally:
                await engine.close()

        asyncio.run(forge())
        assert [i.key for i in s.search(("alice",))] == ["k"]
        assert [i.key for i in s.search(("alice",), query="real item")] == ["k"]
        assert s.list_namespaces() == [("alice",)]
        got = s.get(("alice",), "k")
        assert got is not None and got.value == {"content": "a real item"}


@pytest.mark.parametrize("backend", SHARED)
def test_the_keyspace_records_langgraphs_embeddings(backend: str,
                                                    request: pytest.FixtureRequest) -> None:
    settings = shared_settings(backend, request)
    with DreamMemoryStore(settings, index={"dims": 26, "embed": Letters()}) as s:
        s.put(("docs",), "a", {"text": "apple"})
    with pytest.raises(EmbeddingModelMismatch), DreamMemoryStore(
            settings, index={"dims": 26, "embed": lambda texts: [[1.0] * 26 for _ in texts]}
    ) as other:
        other.get(("docs",), "a")
    with DreamMemoryStore(settings, index={"dims": 26, "embed": Letters()}) as again:
        got = again.get(("docs",), "a")
        assert got is not None and got.value == {"text": "apple"}


def test_owner_label_and_refusals() -> None:
    with DreamMemoryStore(MemorySettings(backend="memory"), owner_label=1) as s:
        s.put(("memories", "carol"), "a", {"content": "x"})
        got = s.get(("memories", "carol"), "a")
        assert got is not None and got.namespace == ("memories", "carol")
        with pytest.raises(InvalidNamespaceError):
            s.put(("memories",), "a", {"content": "x"})
        with pytest.raises(InvalidOwnerId):
            s.put(("memories", "not an owner"), "a", {"content": "x"})
        with pytest.raises(InvalidNamespaceError):  # no owner named, none known
            s.search(("memories",))
        with pytest.raises(NotImplementedError):
            s.put(("memories", "carol"), "b", {"content": "x"}, ttl=5)


@pytest.mark.parametrize("value", [{"when": datetime(2026, 1, 1)}, {"n": float("nan")},
                                   {"text": "a\x00b"}, {"text": "x" * 20_000}],
                         ids=["datetime", "nan", "nul", "too-large"])
def test_a_value_the_memory_cannot_keep_is_a_typed_error_and_writes_nothing(
        store: DreamMemoryStore, value: dict[str, Any]) -> None:
    store.put(("alice", "m"), "k", {"content": "kept"})
    with pytest.raises(InvalidMetadata, match=r"item 'k' of \('alice', 'm'\)"):
        store.put(("alice", "m"), "k", value)
    with pytest.raises(InvalidMetadata):
        store.put(("alice", "m"), "new", value, index=False)
    got = store.get(("alice", "m"), "k")
    assert got is not None and got.value == {"content": "kept"}
    assert store.get(("alice", "m"), "new") is None
    assert [i.key for i in store.search(("alice",))] == ["k"]


def test_bad_keys_values_and_operators_are_typed_errors(store: DreamMemoryStore) -> None:
    with pytest.raises(InvalidInput):
        store.put(("alice", "m"), "", {"content": "x"})
    with pytest.raises(InvalidInput):
        store.batch([PutOp(("alice", "m"), "k", ["not", "a", "dict"])])  # type: ignore[arg-type]
    store.put(("alice", "m"), "k", {"n": 1})
    with pytest.raises(InvalidFilter):
        store.search(("alice",), filter={"n": {"$in": [1]}})
    assert store.search(("alice",)) and store.get(("alice", "m"), "") is None


def test_the_embeddings_are_exposed_as_langgraphs_stores_expose_them() -> None:
    letters = Letters()
    with DreamMemoryStore(MemorySettings(backend="memory"),
                          index={"dims": 26, "embed": letters}) as s:
        assert s.embeddings is letters and s.index_config is not None
        assert s.index_config["dims"] == 26
    with DreamMemoryStore(MemorySettings(backend="memory")) as s:
        assert s.embeddings is None and s.index_config is None
    assert InMemoryStore().embeddings is None  # what LangGraph's store says without an index


async def test_async_twins(store: DreamMemoryStore) -> None:
    await store.aput(("alice", "a"), "k", {"content": "async put"})
    got = await store.aget(("alice", "a"), "k")
    assert got is not None and got.value == {"content": "async put"}
    assert [i.key for i in await store.asearch(("alice", "a"))] == ["k"]
    assert await store.alist_namespaces(prefix=("alice",)) == [("alice", "a")]
    await store.adelete(("alice", "a"), "k")
    assert await store.aget(("alice", "a"), "k") is None


class State(TypedDict):
    user: str
    said: str
    recalled: list[str]


def _remember(state: State, *, store: BaseStore) -> dict[str, Any]:
    store.put((state["user"], "memories"), f"m{len(state['said'])}", {"content": state["said"]})
    return {}


def _recall(state: State, *, store: BaseStore) -> dict[str, Any]:
    hits = store.search((state["user"], "memories"), query=state["said"], limit=3)
    return {"recalled": [h.value["content"] for h in hits]}


async def _arecall(state: State, *, store: BaseStore) -> dict[str, Any]:
    hits = await store.asearch((state["user"], "memories"), query=state["said"], limit=3)
    return {"recalled": [h.value["content"] for h in hits]}


def _graph(recall: Any) -> StateGraph:
    g = StateGraph(State)
    g.add_node("remember", _remember)
    g.add_node("recall", recall)
    g.add_edge(START, "remember")
    g.add_edge("remember", "recall")
    g.add_edge("recall", END)
    return g


async def test_a_langgraph_graph_runs_on_the_store(store: DreamMemoryStore) -> None:
    graph = _graph(_recall).compile(store=store)
    out = graph.invoke({"user": "alice", "said": "we deploy with helm on Kubernetes",
                        "recalled": []})
    assert out["recalled"] == ["we deploy with helm on Kubernetes"]
    agraph = _graph(_arecall).compile(store=store)
    out = await agraph.ainvoke({"user": "alice", "said": "helm charts live in infra",
                                "recalled": []})
    assert "helm charts live in infra" in out["recalled"]
    assert len(store.search(("alice", "memories"))) == 2
    assert store.search(("bob", "memories")) == []  # another owner's memory is apart


def test_the_example_in_agents_demo(capsys: pytest.CaptureFixture[str]) -> None:
    from agents_demo.langgraph_agent import main

    assert main(MemorySettings(backend="memory")) == 0
    out = capsys.readouterr().out
    last = out.split("user: How do we deploy the new service?")[1]
    assert "recalled: We deploy with helm on Kubernetes." in last
