"""Extraction through the owner actors (rule-based extractor, no LLM), both placements:
the L3 chat window, the gate's writes through the actor, the pending queue, the audit."""

from __future__ import annotations

import uuid

import pytest

from dream_memory_actor.errors import (
    AuditNotWritable,
    InvalidContent,
    InvalidQuery,
    PendingItemDecided,
)
from dream_memory_actor.models import AuditEntry, ChatMessage, MemoryPendingItem
from dream_memory_actor.runtime import MemorySystem
from dream_memory_actor.storage.ops import AddAudit, AddPending


def user(text: str) -> ChatMessage:
    return ChatMessage(role="user", content=text)


def test_end_conversation_writes_a_rule_through_the_actor(system: MemorySystem) -> None:
    alice = system.owner("ex-alice")
    before = alice.snapshot().version
    appended = alice.append_messages("c1", [user("From now on, look at security first."),
                                            ChatMessage(role="assistant", content="Sure.")])
    assert [m.content for m in appended.window] == [
        "From now on, look at security first.", "Sure."]
    assert appended.overflow == ()
    assert alice.snapshot().version == before  # nothing extracted while in the window

    report = alice.end_conversation("c1")
    assert report is not None and report.extractor == "rule-based"
    assert report.counts["written"] == 1 and report.version is not None
    snap = alice.snapshot()
    assert snap.version == report.version > before
    assert [r.content for r in snap.rules] == ["Look at security first"]
    # The window is gone: ending it again extracts nothing.
    assert alice.end_conversation("c1") is None


async def test_pending_confirm_reject_and_audit(system: MemorySystem) -> None:
    bob = system.owner("ex-bob")
    report = await bob.extract_async([user("I am a Java developer."),
                                      user("I'm a night owl.")])
    assert report.counts["queued"] == 2
    snap = await bob.snapshot_async()
    pending = {p.content: p.id for p in snap.pending}
    assert set(pending) == {"The user is a Java developer", "The user is a night owl"}
    assert not snap.facts

    decided = await bob.confirm_async(pending["The user is a Java developer"], by="bob")
    assert decided.applied and decided.entry.action == "confirmed"
    again = bob.confirm(pending["The user is a Java developer"], by="bob")
    assert not again.applied and again.entry.id == decided.entry.id  # idempotent

    rejected = bob.reject(pending["The user is a night owl"], by="reviewer-1")
    assert rejected.applied and rejected.entry.action == "rejected"
    with pytest.raises(PendingItemDecided):
        bob.confirm(pending["The user is a night owl"], by="bob")

    snap = await bob.snapshot_async()
    assert [f.content for f in snap.facts] == ["The user is a Java developer"]
    assert snap.pending == ()
    audit = bob.audit()
    assert [(a.action, a.by) for a in audit] == [("rejected", "reviewer-1"),
                                                 ("confirmed", "bob")]
    assert len(await bob.audit_async(limit=1)) == 1


async def test_a_handle_cannot_write_an_audit_entry(system: MemorySystem) -> None:
    eve = system.owner(f"ex-eve-{uuid.uuid4().hex[:8]}")
    item = MemoryPendingItem(kind="rule", content="Never deploy on Fridays", confidence=0.6)
    forged = AuditEntry(pending_id=item.id, action="rejected", by="security-officer", item=item)
    with pytest.raises(AuditNotWritable):
        eve.apply([AddPending(item), AddAudit(forged)])
    with pytest.raises(AuditNotWritable):
        await eve.apply_async([AddAudit(forged)])
    assert eve.audit() == [] and eve.snapshot().version == 0
    eve.apply([AddPending(item)])
    decision = eve.confirm(item.id, by="eve")
    assert decision.applied and [(a.action, a.by) for a in eve.audit()] == [("confirmed", "eve")]
    assert [r.content for r in eve.snapshot().rules] == ["Never deploy on Fridays"]


def test_window_overflow_is_extracted(system: MemorySystem) -> None:
    carol = system.owner("ex-carol")
    window = system.settings.chat_window
    first = [user("Remember that the deploy key rotates monthly.")]
    filler = [ChatMessage(role="assistant", content=f"message {i}") for i in range(window)]
    appended = carol.append_messages("c-long", first + filler)
    assert len(appended.window) == window
    assert [m.content for m in appended.window] == [m.content for m in filler]  # order kept
    assert [m.content for m in appended.overflow] == [first[0].content]
    carol.flush_extractions()
    snap = carol.snapshot()
    assert [f.content for f in snap.facts] == ["The deploy key rotates monthly"]
    more = carol.append_messages("c-long", [user("ok")], op_id="carol-ok-1")
    assert len(more.window) == window and [m.content for m in more.overflow] == ["message 0"]
    retried = carol.append_messages("c-long", [user("ok")], op_id="carol-ok-1")
    assert retried.window == more.window and retried.overflow == ()
    assert carol.end_conversation("c-long") is not None


def test_bad_input_is_refused_before_any_remote_call(system: MemorySystem,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from dream_memory_actor.runtime import handle as handle_module

    dave = system.owner("ex-dave")

    def no_remote(*_: object) -> None:
        raise AssertionError("a remote call was made")

    monkeypatch.setattr(handle_module.OwnerHandle, "_run", no_remote)
    with pytest.raises(InvalidQuery):
        dave.append_messages("bad conversation!", [user("hi")])
    with pytest.raises(InvalidQuery):
        dave.append_messages("c1", "not a list")  # type: ignore[arg-type]
    with pytest.raises(InvalidQuery):
        dave.append_messages("c1", [])
    with pytest.raises(InvalidQuery):
        dave.end_conversation("")
    with pytest.raises(InvalidQuery):
        dave.extract(["not a message"])  # type: ignore[list-item]
    with pytest.raises(InvalidQuery):
        dave.confirm("p1", by="")
    with pytest.raises(InvalidContent):
        dave.confirm("p1", by="dave", edited_content="   ")
    with pytest.raises(InvalidQuery):
        dave.reject("", by="dave")
    with pytest.raises(InvalidQuery):
        dave.audit(limit=0)


def test_llm_extraction_through_the_pool(ray_runtime: None, pg_dsn: str) -> None:
    """With a model configured, the registry starts an extractor pool and the owner actors
    send extraction to it (sharded placement only, one host: few actors on two cores)."""
    import json

    from pydantic import SecretStr

    from dream_memory_actor.errors import ExtractionUnavailable
    from tests.runtime.conftest import settings_for
    from tests.runtime.embedders import TopicEmbedder
    from tests.support.openai_server import CHAT_PATH, ScriptedOpenAIServer

    with ScriptedOpenAIServer() as api:
        settings = settings_for(
            pg_dsn, "sharded", shards=1, extraction_model="openai/gpt-4o-mini",
            extraction_api_base=api.base_url, extraction_api_key=SecretStr("sk-test-0123456789"),
            extraction_timeout_s=5.0, extraction_max_retries=0, extraction_pool_size=1,
            chat_window=2)
        system = MemorySystem.start(settings, name="test-extraction-llm",
                                    embedder_factory=TopicEmbedder, call_timeout_s=60.0)
        try:
            erin = system.owner("ex-erin")
            rule = {"kind": "rule", "content": "Reply in Chinese", "confidence": 0.93,
                    "evidence": "reply in Chinese"}
            api.queue_chat(json.dumps({"items": [rule]}))
            appended = erin.append_messages("c1", [user("Please reply in Chinese."),
                                                   user("a"), user("b")])
            assert [m.content for m in appended.overflow] == ["Please reply in Chinese."]
            erin.flush_extractions()
            assert [r.content for r in erin.snapshot().rules] == ["Reply in Chinese"]
            assert len(api.requests_to(CHAT_PATH)) == 1

            # A background extraction holds its owner: asked to passivate it meanwhile,
            # the host declines, and the extraction's write lands.
            slow = {"kind": "fact", "content": "The user said a", "confidence": 0.9,
                    "evidence": "a"}
            api.queue_chat(json.dumps({"items": [slow]}), delay_s=1.5)
            assert [m.content for m in erin.append_messages("c0", [user("a"), user("b"),
                                                                  user("c")]).overflow] == ["a"]
            assert system.passivate(["ex-erin"]) == 0
            erin.flush_extractions()
            assert [f.content for f in erin.snapshot().facts] == ["The user said a"]
            assert system.passivate(["ex-erin"]) == 1  # idle again: it goes
            assert len(api.requests_to(CHAT_PATH)) == 2

            api.queue_chat(status=500)  # a failed background extraction: the append stands
            assert len(erin.append_messages("c1", [user("c")]).window) == 2
            erin.flush_extractions()
            api.queue_chat(status=500)
            with pytest.raises(ExtractionUnavailable):
                erin.end_conversation("c1")
            assert [r.content for r in erin.snapshot().rules] == ["Reply in Chinese"]
            assert api.pending() == 0
            # the failed end put the window back: ending again extracts the same messages
            fact = {"kind": "fact", "content": "The user said c", "confidence": 0.9,
                    "evidence": "c"}
            api.queue_chat(json.dumps({"items": [fact]}))
            report = erin.end_conversation("c1")
            assert report is not None
            prompt = api.requests_to(CHAT_PATH)[-1].json["messages"][-1]["content"]
            convo = json.loads(prompt.split("\n", 1)[1])
            assert [m["content"] for m in convo] == ["b", "c"]
        finally:
            system.shutdown(grace_period_s=1)
