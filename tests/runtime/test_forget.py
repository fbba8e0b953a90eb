"""Forgetting an owner through its actor, on a real Ray runtime and PostgreSQL."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dream_memory_actor.errors import InvalidQuery
from dream_memory_actor.models import ChatMessage
from dream_memory_actor.runtime import MemorySystem


def test_forget_through_the_owner_actor(system: MemorySystem) -> None:
    gone, kept = system.owner("rt-forget-me"), system.owner("rt-forget-kept")
    gone.add_rule("Answer in Chinese")
    gone.set_status("project", "dream-saas")
    gone.store("went live on Kubernetes with helm", {"agent": "deploy"})
    gone.append_messages("c1", [ChatMessage(role="user", content="hello there")])
    kept.add_fact("The user is a Java developer")
    before = gone.snapshot()
    assert before.version == 2 and gone.snapshot() == before  # held by this client too

    tomb = gone.forget(by="admin", op_id="forget-rt-1")
    assert tomb.by == "admin"
    assert (tomb.counts["rules"], tomb.counts["status"], tomb.counts["memories"]) == (1, 1, 1)

    # no stale copy: not from the actor, not from this client's cache, not in L2
    snap = gone.snapshot()
    assert (snap.version, snap.rules, dict(snap.status)) == (0, (), {})
    assert system.owner("rt-forget-me").snapshot().version == 0
    assert gone.list() == [] and gone.search("Kubernetes helm") == []
    assert [f.content for f in kept.snapshot().facts] == ["The user is a Java developer"]

    # idempotent; the owner starts afresh
    assert gone.forget(by="admin", op_id="forget-rt-1") == tomb
    assert gone.add_rule("A new start").content == "A new start"
    assert gone.snapshot().version == 1


async def test_forget_async_and_bad_input(system: MemorySystem) -> None:
    owner = system.owner("rt-forget-async")
    await owner.store_async("a memory to forget")
    for by in ("", "x" * 65, None):
        with pytest.raises(InvalidQuery):
            owner.forget(by=by)  # type: ignore[arg-type]
    assert len(await owner.list_async()) == 1  # refused before any remote call
    tomb = await owner.forget_async(by="rt-forget-async")
    assert tomb.by == "the owner" and tomb.counts["memories"] == 1
    assert await owner.list_async() == []


def test_a_cached_snapshot_of_the_same_version_is_not_confirmed(system: MemorySystem) -> None:
    owner = system.owner("rt-forget-same-version")
    owner.add_rule("the erased rule")
    assert owner.snapshot().version == 1  # cached here at version 1
    owner.forget(by="admin")
    owner.add_rule("the rule after")  # version 1 again, of a new lineage
    assert [r.content for r in owner.snapshot().rules] == ["the rule after"]


def windows_of(lines: list[str]) -> list[dict[str, Any]]:
    return [r for r in map(json.loads, lines) if r["type"] == "window"]


def test_export_and_import_through_the_owner_actor(system: MemorySystem) -> None:
    from dream_memory_actor.errors import InvalidImport, OwnerNotEmpty

    owner = system.owner("rt-porter")
    owner.add_rule("Reply in Chinese")
    owner.store("went live on Kubernetes with helm", {"agent": "deploy"})
    owner.append_messages("c1", [ChatMessage(role="user", content="we deploy on Friday")])
    before, memories = owner.snapshot(), owner.list()
    lines = owner.export()
    assert [(w["conversation"], [m["content"] for m in w["messages"]])
            for w in windows_of(lines)] == [("c1", ["we deploy on Friday"])]
    with pytest.raises(OwnerNotEmpty):
        owner.import_document(lines)
    with pytest.raises(InvalidImport):  # another owner's document, refused here
        system.owner("rt-someone-else").import_document(lines)
    owner.forget(by="admin")
    assert owner.import_document(lines)["memory"] == 1
    assert windows_of(owner.export()) == windows_of(lines)  # the open conversation too
    after = owner.snapshot()  # the actor holds the imported state, not the erased one
    assert (after.rules, after.facts, dict(after.status)) == (
        before.rules, before.facts, dict(before.status))
    assert owner.list() == memories
