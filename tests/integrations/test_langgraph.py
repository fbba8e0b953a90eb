"""The LangGraph store: what LangGraph's own InMemoryStore does, over the memory; and a
LangGraph graph that uses it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, TypedDict

import pytest

pytest.importorskip("langgraph", reason="the langgraph extra is not installed")

from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore, InvalidNamespaceError
from langgraph.store.memory import InMemoryStore

from dream_memory_actor.config import MemorySettings
from dream_memory_actor.errors import InvalidOwnerId
from dream_memory_actor.integrations.langgraph import DreamMemoryStore


@pytest.fixture
def store() -> Iterator[DreamMemoryStore]:
    s = DreamMemoryStore(MemorySettings(backend="memory"), owners=["alice", "bob"])
    try:
        yield s
    finally:
        s.close()


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
