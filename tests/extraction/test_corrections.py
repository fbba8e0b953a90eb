"""Corrections through the gate: an extracted rule or fact that replaces an existing one
waits for a person whatever its confidence; confirming supersedes, rejecting changes nothing."""

from __future__ import annotations

import json

import pytest

from dream_memory_actor import MemoryEngine
from dream_memory_actor.errors import ItemSuperseded
from dream_memory_actor.extraction.candidates import ExtractedItem, parse_reply
from dream_memory_actor.extraction.corrections import match_correction, resolve
from dream_memory_actor.extraction.rules import match_sentence
from dream_memory_actor.models import ChatMessage, MemoryRule, MemorySnapshot
from tests.extraction.conftest import llm, service
from tests.support.openai_server import ScriptedOpenAIServer


def user(text: str) -> list[ChatMessage]:
    return [ChatMessage(role="user", content=text)]


@pytest.mark.parametrize(("sentence", "kind", "content", "old"), [
    ("From now on, use tabs instead of spaces.", "rule", "Use tabs instead of spaces",
     "spaces"),
    ("Reply in French, not English anymore.", "rule", "Reply in French, not English",
     "English"),
    ("I live in Berlin, not Paris any more", "fact", "I live in Berlin, not Paris", "Paris"),
    ("以后不要用空格缩进。", "rule", "不要用空格缩进", "用空格缩进"),
    ("不要再用英文回复了", "rule", "不要用英文回复", "用英文回复"),
    ("把回复语言改成中文", "rule", "回复语言改成中文", "回复语言"),
    ("从现在开始用tab而不是空格", "rule", "用tab，而不是空格", "空格"),
])
def test_explicit_corrections(sentence: str, kind: str, content: str, old: str) -> None:
    item = match_sentence(sentence)
    assert item is not None
    assert (item.kind, item.content, item.supersedes, item.evidence) == (
        kind, content, old, sentence)


def test_plain_statements_are_not_corrections() -> None:
    assert match_correction("Reply in Chinese") is None
    item = match_sentence("From now on, reply in Chinese.")
    assert item is not None and item.supersedes is None
    assert match_sentence("Should I use tabs instead of spaces?") is None
    assert match_correction("I do not smoke anymore") is None  # a negation, not a correction


def test_resolve_by_id_text_and_words() -> None:
    spaces = MemoryRule(content="Indent with spaces")
    english = MemoryRule(content="Reply in English")
    commits = MemoryRule(content="Write commit messages in English")
    snap = MemorySnapshot(owner="a", rules=(spaces, english, commits))
    assert resolve(snap, "rule", spaces.id) == spaces
    assert resolve(snap, "rule", "indent  WITH spaces") == spaces
    assert resolve(snap, "rule", "spaces") == spaces
    assert resolve(snap, "rule", "English") is None  # two items fit: none is guessed
    assert resolve(snap, "rule", "reply in english") == english
    assert resolve(snap, "fact", "spaces") is None and resolve(snap, "rule", None) is None


def test_supersedes_is_ignored_for_status_items() -> None:
    item = ExtractedItem(kind="status", key="mood", value="ok", confidence=0.9,
                         evidence="ok", supersedes="tired")
    assert item.supersedes is None


async def test_correction_waits_then_confirm_supersedes(engine: MemoryEngine) -> None:
    svc = service(engine)
    old = await engine.structured.add_rule("alice", "Indent with spaces")
    report = await svc.extract("alice", user("From now on, use tabs instead of spaces."))
    (outcome,) = report.outcomes
    assert outcome.result == "queued" and outcome.item.confidence >= 0.82  # not written
    snap = await engine.snapshot("alice")
    assert [r.content for r in snap.rules] == ["Indent with spaces"]
    (pending,) = snap.pending
    assert (pending.supersedes, pending.supersedes_content) == (old.id, old.content)
    assert "replacing" in pending.describe()
    again = await svc.extract("alice", user("From now on, use tabs instead of spaces."))
    assert again.outcomes[0].result == "already_pending"

    decision = await svc.confirm("alice", pending.id, by="alice")
    assert decision.applied and decision.entry.item.supersedes == old.id
    snap = await engine.snapshot("alice")
    assert [r.content for r in snap.rules] == ["Use tabs instead of spaces"]
    assert snap.pending == ()
    h = await engine.structured.history("alice", old.id)
    assert [v.content for v in h.versions] == ["Indent with spaces", "Use tabs instead of spaces"]
    assert h.versions[0].by == "alice" and pending.id in (h.versions[0].reason or "")
    assert (await svc.confirm("alice", pending.id, by="alice")).applied is False  # idempotent
    assert len((await engine.structured.history("alice", old.id)).versions) == 2


@pytest.mark.parametrize(("said", "was", "now"), [
    ("I am a Go developer.", "The user is a Java developer", "The user is a Go developer"),
    ("我是Go开发者。", "用户是Java开发者", "用户是Go开发者"),
])
async def test_an_extracted_new_version_waits_as_a_correction(
        engine: MemoryEngine, said: str, was: str, now: str) -> None:
    """Not said to replace anything, but a new version of a current fact: the snapshot
    never shows both before a person decides."""
    svc = service(engine)
    old = await engine.structured.add_fact("alice", was)
    (outcome,) = (await svc.extract("alice", user(said))).outcomes
    assert outcome.result == "queued" and "would replace fact" in outcome.reason
    snap = await engine.snapshot("alice")
    assert [f.content for f in snap.facts] == [was]
    (pending,) = snap.pending
    assert (pending.content, pending.supersedes) == (now, old.id)
    assert (await svc.confirm("alice", pending.id, by="alice")).applied
    assert [f.content for f in (await engine.snapshot("alice")).facts] == [now]


async def test_reject_leaves_both(engine: MemoryEngine) -> None:
    svc = service(engine)
    old = await engine.structured.add_rule("alice", "用空格缩进")
    await svc.extract("alice", user("以后不要用空格缩进。"))
    snap = await engine.snapshot("alice")
    (pending,) = snap.pending
    assert pending.supersedes == old.id
    decision = await svc.reject("alice", pending.id, by="alice")
    assert decision.applied
    after = await engine.snapshot("alice")
    assert after.rules == snap.rules and after.pending == ()
    assert len((await engine.structured.history("alice", old.id)).versions) == 1


async def test_confirm_after_the_item_was_superseded_writes_nothing(engine: MemoryEngine
                                                                    ) -> None:
    svc = service(engine)
    old = await engine.structured.add_rule("alice", "Indent with spaces")
    await svc.extract("alice", user("From now on, use tabs instead of spaces."))
    (pending,) = (await engine.snapshot("alice")).pending
    await engine.structured.supersede("alice", old.id, "Indent with two spaces", by="bob")
    before = await engine.snapshot("alice")
    with pytest.raises(ItemSuperseded):
        await svc.confirm("alice", pending.id, by="alice")
    after = await engine.snapshot("alice")
    assert (after.rules, after.pending, after.version) == (before.rules, before.pending,
                                                           before.version)
    assert await engine.structured.audit("alice") == []


async def test_unresolved_correction_is_an_ordinary_candidate(engine: MemoryEngine) -> None:
    svc = service(engine)
    report = await svc.extract("alice", user("From now on, use tabs instead of spaces."))
    assert report.outcomes[0].result == "written"
    snap = await engine.snapshot("alice")
    assert [r.content for r in snap.rules] == ["Use tabs instead of spaces"]


def test_reply_schema_accepts_supersedes() -> None:
    (item,) = parse_reply(json.dumps({"items": [{
        "kind": "fact", "content": "The user lives in Berlin", "confidence": 0.95,
        "evidence": "I moved to Berlin", "supersedes": "lives in Paris"}]}))
    assert item.supersedes == "lives in Paris"


async def test_llm_correction_by_text_and_by_id(engine: MemoryEngine,
                                                api: ScriptedOpenAIServer) -> None:
    paris = await engine.structured.add_fact("alice", "The user lives in Paris")
    tea = await engine.structured.add_fact("alice", "The user drinks tea")
    svc = service(engine, llm(api))
    api.queue_chat(json.dumps({"items": [
        {"kind": "fact", "content": "The user lives in Berlin", "confidence": 0.97,
         "evidence": "I moved to Berlin", "supersedes": "lives in Paris"},
        {"kind": "fact", "content": "The user drinks coffee", "confidence": 0.97,
         "evidence": "I drink coffee now", "supersedes": tea.id},
        {"kind": "fact", "content": "The user has a cat", "confidence": 0.97,
         "evidence": "my cat", "supersedes": "something never said"}]}))
    report = await svc.extract("alice", user("I moved to Berlin. I drink coffee now, my cat"))
    assert [o.result for o in report.outcomes] == ["queued", "queued", "written"]
    snap = await engine.snapshot("alice")
    assert {p.supersedes for p in snap.pending} == {paris.id, tea.id}
    assert [f.content for f in snap.facts] == ["The user lives in Paris", "The user drinks tea",
                                               "The user has a cat"]
    for p in snap.pending:
        await svc.confirm("alice", p.id, by="alice")
    facts = [f.content for f in (await engine.snapshot("alice")).facts]
    assert sorted(facts) == ["The user drinks coffee", "The user has a cat",
                             "The user lives in Berlin"]
