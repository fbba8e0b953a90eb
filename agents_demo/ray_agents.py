"""The demo's agents as Ray actors sharing one user's memory through plain handles.

Each agent is a Ray actor that receives an ``OwnerHandle`` (a picklable object
of a few hundred bytes) and talks to the memory system through it; no agent
holds a database connection or knows where the owner's actor runs.
"""

from __future__ import annotations

from typing import Any

import ray

from dream_memory_actor.models import ChatMessage
from dream_memory_actor.runtime import OwnerHandle


def _user(text: str) -> ChatMessage:
    return ChatMessage(role="user", content=text)


@ray.remote(num_cpus=0)
class ReviewAgent:
    """A code-review agent: its system prompt is built from the user's memory."""

    def __init__(self, memory: OwnerHandle) -> None:
        self.memory = memory

    def converse(self, conversation: str, lines: list[str]) -> dict[str, Any]:
        """Hand a conversation to the memory; extraction runs when it ends."""
        self.memory.append_messages(conversation, [_user(t) for t in lines])
        report = self.memory.end_conversation(conversation)
        outcomes = [] if report is None else [
            (o.item.kind, o.item.content or f"{o.item.key}={o.item.value}",
             o.item.confidence, o.result) for o in report.outcomes]
        return {"extractor": None if report is None else report.extractor,
                "outcomes": outcomes}

    def system_prompt(self) -> str:
        snap = self.memory.snapshot()
        return "You are a code-review partner. " + snap.to_prompt()


@ray.remote(num_cpus=0)
class DeployAgent:
    """A deploy agent: stores what happened, searches what was discussed."""

    def __init__(self, memory: OwnerHandle) -> None:
        self.memory = memory

    def remember(self, text: str) -> str:
        return self.memory.store(text, {"agent": "deploy"}).memory.id

    def recall(self, query: str) -> list[tuple[float, float | None, float, str]]:
        return [(h.score, h.vector_score, h.keyword_score, h.memory.content)
                for h in self.memory.search(query, limit=3)]
