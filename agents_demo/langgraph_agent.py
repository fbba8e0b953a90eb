"""A LangGraph graph whose long-term memory is dream-memory.

Run it with ``python -m agents_demo.langgraph_agent``.

The graph is the usual LangGraph memory pattern: a node saves what the user said
in the store under ``(user, "memories")`` and a node recalls the memories closest
to the new message, which a model would get in its prompt. The only line that is
about dream-memory is the store; with ``InMemoryStore()`` in its place the graph
runs the same, forgetting everything when the process ends. Here the memories are
kept in the configured storage (``DREAM_MEMORY_*`` settings; the embedded
PostgreSQL by default), so a second run recalls the first run's messages. The
replies are scripted: the point is the memory, not the model.
"""

from __future__ import annotations

import sys
import uuid
from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore

from dream_memory_actor import MemorySettings
from dream_memory_actor.integrations.langgraph import DreamMemoryStore
from dream_memory_actor.process import quiet_platform_warnings


class State(TypedDict):
    user: str
    message: str
    recalled: list[str]


def remember(state: State, *, store: BaseStore) -> dict[str, Any]:
    store.put((state["user"], "memories"), uuid.uuid4().hex, {"content": state["message"]})
    return {}


def recall(state: State, *, store: BaseStore) -> dict[str, Any]:
    hits = store.search((state["user"], "memories"), query=state["message"], limit=3)
    return {"recalled": [h.value["content"] for h in hits]}


def build(store: BaseStore) -> Any:
    graph = StateGraph(State)
    graph.add_node("recall", recall)
    graph.add_node("remember", remember)
    graph.add_edge(START, "recall")
    graph.add_edge("recall", "remember")
    graph.add_edge("remember", END)
    return graph.compile(store=store)


def main(settings: MemorySettings | None = None, user: str = "langgraph-demo") -> int:
    with DreamMemoryStore(settings or MemorySettings()) as store:
        graph = build(store)
        for message in ("We deploy with helm on Kubernetes.",
                        "I prefer answers in short bullet points.",
                        "How do we deploy the new service?"):
            out = graph.invoke({"user": user, "message": message, "recalled": []})
            print(f"user: {message}")
            for text in out["recalled"]:
                print(f"  recalled: {text}")
    return 0


if __name__ == "__main__":
    quiet_platform_warnings()
    sys.exit(main())
