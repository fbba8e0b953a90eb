"""Hostile export documents: every mutation of a valid document is imported whole or
refused with a typed error, and a refusal writes nothing."""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

from dream_memory_actor.config import MemorySettings
from dream_memory_actor.engine import MemoryEngine
from dream_memory_actor.errors import InvalidInput
from dream_memory_actor.models import ChatMessage, MemoryPendingItem
from dream_memory_actor.storage.ops import AddPending, SetStatus

OWNER = "hostile-porter"
MUTATIONS = 600
#: Values a mutation puts in place of a field (or of a whole record).
NASTY: list[Any] = [None, "", "x" * 40_000, -1, 2**70, 1.5, float("inf"), [], {}, [1, "a"],
                    "\ud800", "victim", "{x}", "2026-13-45T99:00:00", True, "\x00", "memory",
                    "header", {"type": "end"}, [0.1] * 3]


async def _document() -> list[str]:
    engine = await MemoryEngine.open(MemorySettings(backend="memory"))
    try:
        s = engine.structured
        await s.add_rule(OWNER, "Reply in Chinese")
        await s.add_fact(OWNER, "The user is a Java developer")
        await s.apply(OWNER, [SetStatus("project", "dream"), AddPending(MemoryPendingItem(
            kind="fact", content="Likes tea", confidence=0.6))])
        await engine.store(OWNER, "went live on Kubernetes", metadata={"agent": "ops"})
        await s.append_messages(OWNER, "c1", [ChatMessage(role="user", content="hi")], window=3)
        return await engine.export(OWNER)
    finally:
        await engine.close()


def _mutate(rng: random.Random, lines: list[str]) -> list[str]:
    out = list(lines)
    i = rng.randrange(len(out))
    how = rng.randrange(5)
    if how == 0:  # a field replaced, somewhere in a record
        rec = json.loads(out[i])
        target = rec.get("item") if isinstance(rec.get("item"), dict) and rng.random() < 0.6 \
            else rec
        key = rng.choice(sorted(target))
        target[key] = rng.choice(NASTY)
        out[i] = json.dumps(rec, allow_nan=True)
    elif how == 1:  # a record dropped
        del out[i]
    elif how == 2:  # a record repeated
        out.insert(i, out[i])
    elif how == 3:  # a line cut short
        out[i] = out[i][: rng.randrange(len(out[i]))]
    else:  # a record replaced by something else
        out[i] = json.dumps(rng.choice(NASTY))
    return out


async def _state(engine: MemoryEngine) -> tuple[Any, ...]:
    snap = await engine.snapshot(OWNER)
    return (snap.version, await engine.vector.count(OWNER),
            len(await engine.structured.load_window(OWNER, "c1")))


def test_mutated_documents() -> None:
    async def go() -> tuple[int, int]:
        lines = await _document()
        rng = random.Random(20261201)
        refused = imported = 0
        for _ in range(MUTATIONS):
            doc = _mutate(rng, lines)
            engine = await MemoryEngine.open(MemorySettings(backend="memory"))
            try:
                try:
                    await engine.import_document(doc)
                    imported += 1
                except InvalidInput:
                    refused += 1
                    assert await _state(engine) == (0, 0, 0), doc
            finally:
                await engine.close()
        return refused, imported

    refused, imported = asyncio.run(go())
    assert refused + imported == MUTATIONS and refused > MUTATIONS // 2
