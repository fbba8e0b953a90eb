"""The engine-level flow: extract, gate, write or queue; confirm, reject, expiry, audit.

Every test runs on the in-memory reference and on PostgreSQL.
"""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Any

import pytest

from dream_memory_actor import MemoryEngine
from dream_memory_actor.errors import (
    AuditNotWritable,
    ExtractionError,
    InvalidOwnerId,
    InvalidQuery,
    PendingItemDecided,
    PendingItemNotFound,
)
from dream_memory_actor.models import AuditEntry, ChatMessage, MemoryPendingItem, utcnow
from dream_memory_actor.storage.ops import AddAudit, AddPending
from tests.extraction.conftest import llm, service
from tests.support.openai_server import ScriptedOpenAIServer

SAID = ("From now on answer in Chinese. I think I am a Java developer. Maybe I like tea. "
        "Possibly I hate cats. We went live on Kubernetes yesterday. I am so tired today.")
CONVERSATION = [ChatMessage(role="user", content=SAID)]


def it(kind: str, text: str, confidence: float, evidence: str, **kw: Any) -> dict[str, Any]:
    body = {"kind": kind, "confidence": confidence, "evidence": evidence, **kw}
    if kind != "status":
        body["content"] = text
    return body


def reply(*items: dict[str, Any]) -> str:
    return json.dumps({"items": list(items)})


async def test_gate_boundaries_end_to_end(engine: MemoryEngine,
                                          api: ScriptedOpenAIServer) -> None:
    api.queue_chat(reply(
        it("rule", "Reply in Chinese", 0.82, "From now on answer in Chinese"),
        it("fact", "The user is a Java developer", 0.8199, "I am a Java developer"),
        it("fact", "The user likes tea", 0.55, "I like tea"),
        it("fact", "The user hates cats", 0.5499, "I hate cats"),
        it("memory", "Went live on Kubernetes", 0.9, "We went live on Kubernetes yesterday"),
        it("status", "", 0.6, "I am so tired today", key="mood", value="tired"),
    ))
    svc = service(engine, llm(api))
    before = utcnow()
    report = await svc.extract("alice", CONVERSATION)
    assert report.counts == {"written": 2, "queued": 3, "already_pending": 0, "duplicate": 0,
                             "skipped": 1}
    assert [o.result for o in report.outcomes] == ["written", "queued", "queued", "skipped",
                                                   "written", "queued"]
    snap = await engine.snapshot("alice")
    assert [(r.content, r.source) for r in snap.rules] == [("Reply in Chinese", "extracted:llm")]
    assert snap.facts == () and dict(snap.status) == {}
    assert [(p.kind, p.content or p.value, p.confidence) for p in snap.pending] == [
        ("fact", "The user is a Java developer", 0.8199), ("fact", "The user likes tea", 0.55),
        ("status", "tired", 0.6)]
    assert [o.pending_id for o in report.outcomes if o.result == "queued"] == [
        p.id for p in snap.pending]
    assert snap.pending[0].evidence == "I am a Java developer"
    for p in snap.pending:
        assert p.expires_at is not None
        assert before + timedelta(days=7) <= p.expires_at <= utcnow() + timedelta(days=7)
    (memory,) = await engine.list("alice")
    assert memory.content == "Went live on Kubernetes"
    assert memory.metadata["confidence"] == 0.9 and memory.metadata["source"] == "extracted:llm"
    said = CONVERSATION[0].created_at  # the conversation's date, as the memory's context
    assert memory.context == f"{said.day} {said:%B %Y}"
    assert report.version == snap.version and report.usage.prompt_tokens > 0
    assert svc.stats()["written"] == 2 and svc.stats()["extractions"] == 1


@pytest.mark.parametrize("script", [
    {"content": "no JSON here"},
    {"content": '{"items": [{"kind": "rule", "content": "Reply in Chinese"}]}'},
    {"content": reply(it("rule", "Reply in Chinese", 0.95, "answer in Chinese"),
                      it("fact", "The user likes tea", 1.5, "I like tea"))},
    {"status": 500},
    {"status": 429},
    {"content": reply(it("rule", "Reply in Chinese", 0.95, "answer in Chinese")),
     "delay_s": 3.0},
], ids=["malformed", "missing-fields", "out-of-range", "500", "429", "slow"])
async def test_nothing_is_written_when_extraction_fails(
        engine: MemoryEngine, api: ScriptedOpenAIServer, script: dict[str, Any]) -> None:
    api.queue_chat(**script)
    svc = service(engine, llm(api, extraction_timeout_s=0.3))
    with pytest.raises(ExtractionError):
        await svc.extract("alice", CONVERSATION)
    snap = await engine.snapshot("alice")
    assert (snap.version, snap.rules, snap.facts, snap.pending) == (0, (), (), ())
    assert await engine.list("alice") == []
    assert sum(v for k, v in svc.stats().items() if k.startswith("failed:")) == 1


async def test_same_candidate_twice_is_one_pending_item(engine: MemoryEngine) -> None:
    svc = service(engine)
    msgs = [ChatMessage(role="user", content="I am a Java developer.")]
    first = await svc.extract("alice", msgs)
    second = await svc.extract("alice", msgs)
    (pending,) = (await engine.snapshot("alice")).pending
    assert first.outcomes[0].result == "queued" and first.outcomes[0].pending_id == pending.id
    assert (second.outcomes[0].result, second.outcomes[0].pending_id) == ("already_pending",
                                                                         pending.id)
    both = await svc.extract("alice", msgs + msgs)  # twice in one extraction, too
    assert [o.result for o in both.outcomes] == ["already_pending", "duplicate"]
    assert len((await engine.snapshot("alice")).pending) == 1


async def test_a_known_rule_or_fact_is_not_queued(engine: MemoryEngine) -> None:
    await engine.structured.add_fact("alice", "The user is a Java developer")
    await engine.structured.add_rule("alice", "Use tabs")
    svc = service(engine)
    report = await svc.extract("alice", [ChatMessage(
        role="user", content="I am a java developer. From now on, use tabs. 以后用空格")])
    assert [(o.result, o.reason) for o in report.outcomes] == [
        ("duplicate", "already a rule, fact or status"), ("duplicate", "already known"),
        ("queued", "confidence")]
    snap = await engine.snapshot("alice")
    assert [p.content for p in snap.pending] == ["用空格"] and len(snap.rules) == 1


async def test_confirm_writes_once_and_is_audited(engine: MemoryEngine) -> None:
    svc = service(engine)
    await svc.extract("alice", [ChatMessage(role="user", content="I am a Java developer.")])
    (item,) = await svc.pending("alice")
    decision = await svc.confirm("alice", item.id, by="alice")
    assert decision.applied and decision.entry.action == "confirmed"
    snap = await engine.snapshot("alice")
    assert [(f.content, f.source) for f in snap.facts] == [("The user is a Java developer",
                                                           "confirmed")]
    assert snap.pending == ()
    again = await svc.confirm("alice", item.id, by="alice")
    assert not again.applied and again.entry == decision.entry
    assert (await engine.snapshot("alice")).version == snap.version  # nothing written twice
    (entry,) = await svc.audit("alice")
    assert (entry.pending_id, entry.action, entry.by) == (item.id, "confirmed", "alice")
    assert entry.item == item and entry.written == "The user is a Java developer"
    assert utcnow() - entry.at < timedelta(seconds=30)
    with pytest.raises(PendingItemDecided, match="already confirmed by 'alice'"):
        await svc.reject("alice", item.id, by="bob")


async def test_a_forged_audit_entry_is_refused_and_the_decision_recorded(
        engine: MemoryEngine) -> None:
    """An agent writes "rejected by security-officer" for an item it then queues."""
    svc = service(engine)
    item = MemoryPendingItem(kind="rule", content="Never deploy on Fridays", confidence=0.6)
    forged = AuditEntry(pending_id=item.id, action="rejected", by="security-officer", item=item)
    for ops in ([AddAudit(forged)], [AddPending(item), AddAudit(forged)]):
        with pytest.raises(AuditNotWritable):
            await engine.apply("alice", ops)
    assert await svc.audit("alice") == [] and (await engine.snapshot("alice")).version == 0
    await engine.apply("alice", [AddPending(item)])
    decision = await svc.confirm("alice", item.id, by="alice")
    assert decision.applied and decision.entry.by == "alice"
    assert [r.content for r in (await engine.snapshot("alice")).rules] == [
        "Never deploy on Fridays"]
    assert await svc.audit("alice") == [decision.entry]


async def test_confirm_with_edited_content(engine: MemoryEngine) -> None:
    svc = service(engine)
    await svc.extract("alice", [ChatMessage(role="user", content="I am a bit tired.")])
    (item,) = await svc.pending("alice")
    await svc.confirm("alice", item.id, by="reviewer", edited_content="  The user is a nurse ")
    snap = await engine.snapshot("alice")
    assert [f.content for f in snap.facts] == ["The user is a nurse"]
    (entry,) = await svc.audit("alice")
    assert entry.item.content == "The user is a bit tired"
    assert (entry.written, entry.by) == ("The user is a nurse", "reviewer")


async def test_reject_drops_the_item_idempotently(engine: MemoryEngine) -> None:
    svc = service(engine)
    await svc.extract("alice", [ChatMessage(role="user", content="以后再说吧")])
    (item,) = await svc.pending("alice")
    first = await svc.reject("alice", item.id, by="alice")
    second = await svc.reject("alice", item.id, by="alice")
    assert first.applied and not second.applied and first.entry == second.entry
    snap = await engine.snapshot("alice")
    assert (snap.rules, snap.facts, snap.pending) == ((), (), ())
    assert first.entry.written is None
    with pytest.raises(PendingItemDecided, match="already rejected"):
        await svc.confirm("alice", item.id, by="alice")
    with pytest.raises(PendingItemNotFound):
        await svc.confirm("alice", "no-such-item", by="alice")
    with pytest.raises(PendingItemNotFound):
        await svc.reject("bob", item.id, by="bob")  # another owner's item is not found


async def test_status_and_memory_items_confirmed(engine: MemoryEngine,
                                                api: ScriptedOpenAIServer) -> None:
    api.queue_chat(reply(
        it("status", "", 0.6, "I am so tired today", key="mood", value="tired"),
        it("memory", "Went live on Kubernetes", 0.7, "We went live on Kubernetes")))
    svc = service(engine, llm(api))
    await svc.extract("alice", CONVERSATION)
    status, memory = await svc.pending("alice")
    await svc.confirm("alice", status.id, by="alice", edited_content="exhausted")
    first = await svc.confirm("alice", memory.id, by="alice")
    again = await svc.confirm("alice", memory.id, by="alice")
    assert dict((await engine.snapshot("alice")).status) == {"mood": "exhausted"}
    (stored,) = await engine.list("alice")
    assert stored.content == "Went live on Kubernetes" and stored.metadata["confidence"] == 0.7
    assert first.memory_id == again.memory_id == stored.id and not again.applied


async def test_pending_items_expire(engine: MemoryEngine) -> None:
    svc = service(engine, pending_ttl_s=0.3)
    await svc.extract("alice", [ChatMessage(role="user", content="I am a Java developer.")])
    (item,) = await svc.pending("alice")
    await asyncio.sleep(0.45)
    assert await svc.pending("alice") == ()
    with pytest.raises(PendingItemNotFound, match="expired"):
        await svc.confirm("alice", item.id, by="alice")
    assert (await engine.snapshot("alice")).facts == ()
    # once expired, the same candidate can be queued again
    again = await svc.extract("alice", [ChatMessage(role="user", content="I am a Java developer.")])
    assert again.outcomes[0].result == "queued"


async def test_concurrent_decisions_on_one_item(engine: MemoryEngine) -> None:
    svc = service(engine)
    for text in ("I am a Java developer.", "I am a nurse."):
        await svc.extract("alice", [ChatMessage(role="user", content=text)])
    one, two = await svc.pending("alice")
    a, b = await asyncio.gather(svc.confirm("alice", one.id, by="x"),
                                svc.confirm("alice", one.id, by="y"))
    assert sorted([a.applied, b.applied]) == [False, True] and a.entry == b.entry
    results = await asyncio.gather(svc.confirm("alice", two.id, by="x"),
                                   svc.reject("alice", two.id, by="y"), return_exceptions=True)
    assert sum(isinstance(r, PendingItemDecided) for r in results) == 1
    snap = await engine.snapshot("alice")
    assert len(snap.facts) in (1, 2) and snap.pending == ()
    assert len(await svc.audit("alice")) == 2


async def test_two_extractions_for_one_owner_at_once(engine: MemoryEngine) -> None:
    svc = service(engine)
    msgs = [ChatMessage(role="user", content="From now on, use tabs. I am a Java developer.")]
    a, b = await asyncio.gather(svc.extract("alice", msgs), svc.extract("alice", msgs))
    snap = await engine.snapshot("alice")
    assert [r.content for r in snap.rules] == ["Use tabs"]
    (pending,) = snap.pending
    assert sorted(o.result for o in (a.outcomes[1], b.outcomes[1])) == ["already_pending",
                                                                        "queued"]
    assert a.outcomes[1].pending_id == b.outcomes[1].pending_id == pending.id
    different = [ChatMessage(role="user", content=f"Remember that server {i} is in Oslo.")
                 for i in range(6)]
    await asyncio.gather(*(svc.extract("alice", [m]) for m in different))
    assert len((await engine.snapshot("alice")).facts) == 6


async def test_arguments_are_checked(engine: MemoryEngine) -> None:
    svc = service(engine)
    msgs = [ChatMessage(role="user", content="From now on, use tabs.")]
    with pytest.raises(InvalidOwnerId):
        await svc.extract("bad owner", msgs)
    with pytest.raises(InvalidQuery):
        await svc.extract("alice", "From now on, use tabs.")  # type: ignore[arg-type]
    with pytest.raises(InvalidQuery):
        await svc.confirm("alice", "x", by="")
    empty = await svc.extract("alice", [])
    assert empty.outcomes == () and empty.version is None
    assert (await engine.snapshot("alice")).version == 0


def test_an_extracted_memory_s_context_is_its_date_and_the_turn_before() -> None:
    from datetime import datetime, timezone

    from dream_memory_actor.extraction.service import CONTEXT_TURN_CHARS, context_of

    day1, day2 = (datetime(2023, 5, d, 12, tzinfo=timezone.utc) for d in (8, 9))
    msgs = [ChatMessage(role="user", content="I finally got the job at the shelter!",
                        created_at=day1),
            ChatMessage(role="assistant", content="That's great, congrats!", created_at=day1),
            ChatMessage(role="user", content="x" * 5000, created_at=day2),
            ChatMessage(role="user", content="I start on Monday", created_at=day2)]
    assert context_of(msgs, "congrats") == (
        "8 May 2023\nuser: I finally got the job at the shelter!")
    assert context_of(msgs, "I finally got the job") == "8 May 2023"  # nothing before it
    assert context_of(msgs, "congrats", turns=2, date=False) == (
        "user: I finally got the job at the shelter!")
    long = context_of(msgs, "start on Monday")
    assert long == "9 May 2023\nuser: " + "x" * CONTEXT_TURN_CHARS
    assert context_of(msgs, "not said", turns=3) == "9 May 2023"  # the last message's day
    assert context_of(msgs, "congrats", turns=0, date=False) is None
