"""Contract of the consolidation pass on every backend: proposals, a person's decision,
and an undo that restores the owner exactly, is recorded in the audit trail, and puts
the proposal back in the queue."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

import pytest

from dream_memory_actor.config import MemorySettings
from dream_memory_actor.engine import MemoryEngine
from dream_memory_actor.errors import (
    InvalidInput,
    MemorySuperseded,
    ProposalChanged,
    ProposalNotApplied,
)
from dream_memory_actor.extraction.service import ExtractionService
from dream_memory_actor.models import MemoryPendingItem, utcnow
from dream_memory_actor.storage.dedup import Cuts
from dream_memory_actor.storage.ops import AddFact, AddPending, AddRule, SetStatus
from tests.conftest import DIM, Stores

OWNER = "dreamer"


def near(i: int, wobble: float = 0.0) -> list[float]:
    """A vector of axis ``i``; two with small wobbles have a cosine near 1."""
    return [1.0 if j == i else wobble for j in range(DIM)]


#: (text, vector): a duplicate pair, an update pair, a distinct pair (one word apart, as
#: alike by cosine as the duplicates), and one on its own.
MEMORIES = [
    ("Alice likes green tea", near(0)),
    ("alice likes green tea.", near(0, 0.05)),
    ("The cluster runs Kubernetes 1.27", near(1)),
    ("The cluster runs Kubernetes 1.29", near(1, 0.05)),
    ("The staging web server listens on port 8080", near(2)),
    ("The staging admin server listens on port 8080", near(2, 0.05)),
    ("Bob owns the billing service", near(3)),
]


def engine_on(stores: Stores, **settings: object) -> MemoryEngine:
    return MemoryEngine(MemorySettings(backend="memory", **settings), stores.structured,
                        stores.vector)


async def fill(engine: MemoryEngine, vectors: bool = True) -> None:
    """The memories, stored as an owner that was never judged holds them (dedup off)."""
    for text, vec in MEMORIES:
        await engine.vector.store(OWNER, text, embedding=vec if vectors else None,
                                  threshold=Cuts.off())
    await engine.structured.apply(OWNER, [SetStatus("mood", "calm")])


async def state(engine: MemoryEngine) -> tuple[object, ...]:
    """What undo must give back: the L1 items, every memory with its embedding, every
    closed version, what a search finds, and the proposals waiting (as they were
    proposed: a proposal queued again has a new id)."""
    snap = await engine.snapshot(OWNER)
    query = None if engine.vector.dim is None else near(0, 0.3)
    hits = await engine.search(OWNER, "green tea Kubernetes server", embedding=query,
                               limit=10, now=utcnow().replace(year=2100))
    return (snap.rules, snap.facts, dict(snap.status), waiting(snap.pending),
            await engine.vector.dump(OWNER), await engine.vector.versions(OWNER),
            [(h.memory.id, round(h.score, 9)) for h in hits])


def waiting(pending: Sequence[MemoryPendingItem]) -> list[str]:
    """Pending items as they were proposed, whatever their id and time in the queue."""
    return sorted(p.model_dump_json(exclude={"id", "created_at", "expires_at"})
                  for p in pending)


async def test_the_pass_proposes_a_merge_and_a_supersession_never_a_distinct_pair(
        stores: Stores) -> None:
    engine = engine_on(stores)
    await fill(engine)
    report = await engine.consolidate(OWNER)
    assert report.counts == {"merge": 1, "supersede": 1, "expire": 0,
                             "correction": 0, "status_expiry": 0}
    assert report.applied == 0
    pending = (await engine.snapshot(OWNER)).pending
    assert {p.kind for p in pending} == {"merge", "supersede"}
    by_kind = {p.kind: p for p in pending}
    merge, supersede = by_kind["merge"], by_kind["supersede"]
    assert [t.content for t in merge.proposal.touches] == ["Alice likes green tea",
                                                            "alice likes green tea."]
    assert merge.content == "alice likes green tea."  # the newest text by default
    assert supersede.content == "The cluster runs Kubernetes 1.29"
    assert "1.27" in supersede.proposal.reason and "1.29" in supersede.proposal.reason
    touched = {t.content for p in pending for t in p.proposal.touches}
    assert not any("staging" in t for t in touched)
    assert len(await engine.list(OWNER)) == len(MEMORIES)  # nothing written yet
    again = await engine.consolidate(OWNER)  # what is queued is not queued twice
    assert again.proposals == () and len((await engine.snapshot(OWNER)).pending) == 2


async def test_apply_then_undo_gives_the_owner_back_exactly(stores: Stores) -> None:
    engine = engine_on(stores)
    await fill(engine)
    # a memory with a history of its own, to see that histories come back as they were
    first = (await engine.list(OWNER, filter=None))[-1]
    await engine.vector.update(OWNER, first.id, "Alice likes green tea", embedding=near(0))
    svc = ExtractionService.for_engine(engine)
    report = await svc.consolidate(OWNER)
    before = await state(engine)  # the proposals waiting
    merge = next(p for p in report.proposals if p.kind == "merge")
    supersede = next(p for p in report.proposals if p.kind == "supersede")
    kept = await svc.confirm(OWNER, merge.id, by="carol", edited_content="Alice likes sencha")
    assert kept.applied and kept.memory_id == merge.proposal.keep
    await svc.confirm(OWNER, supersede.id, by="carol")
    after = await engine.list(OWNER, limit=100)
    assert len(after) == len(MEMORIES) - 2
    kept_now = await engine.get(OWNER, merge.proposal.keep)
    assert kept_now.content == "Alice likes sencha"
    (other,) = [t.content for t in merge.proposal.touches if t.id != merge.proposal.keep]
    (own,) = [t.content for t in merge.proposal.touches if t.id == merge.proposal.keep]
    assert kept_now.metadata["merged_from"] == [other, own]  # the newest text edited away
    assert kept_now.metadata["merge_count"] == 1
    assert "The cluster runs Kubernetes 1.27" not in {m.content for m in after}
    assert (await engine.undo_proposal(OWNER, supersede.id, by="carol")).entry.restored == 1
    assert (await engine.undo_proposal(OWNER, merge.id, by="carol")).entry.restored == 1
    assert await state(engine) == before  # the proposals waiting again, as proposed
    again = await engine.undo_proposal(OWNER, merge.id, by="carol")  # a retry: as recorded
    assert not again.applied and again.entry.restored == 1
    assert await state(engine) == before


async def test_a_closed_memory_keeps_its_history_naming_the_proposal(stores: Stores) -> None:
    engine = engine_on(stores)
    await fill(engine)
    svc = ExtractionService.for_engine(engine)
    report = await svc.consolidate(OWNER)
    supersede = next(p for p in report.proposals if p.kind == "supersede")
    await svc.confirm(OWNER, supersede.id, by="dave")
    old = supersede.proposal.touches[0]
    with pytest.raises(MemorySuperseded) as err:
        await engine.get(OWNER, old.id)
    assert err.value.superseded_by == supersede.proposal.keep
    history = await engine.memory_history(OWNER, supersede.proposal.keep)
    assert [v.content for v in history] == ["The cluster runs Kubernetes 1.27",
                                            "The cluster runs Kubernetes 1.29"]
    closed = history[0]
    assert (closed.change, closed.by) == ("supersede", "dave")
    assert supersede.id in (closed.reason or "")
    entry = (await engine.structured.audit(OWNER, limit=1))[0]
    assert (entry.action, entry.pending_id) == ("confirmed", supersede.id)


async def test_a_proposal_whose_memories_changed_is_refused_and_writes_nothing(
        stores: Stores) -> None:
    engine = engine_on(stores)
    await fill(engine)
    svc = ExtractionService.for_engine(engine)
    report = await svc.consolidate(OWNER)
    merge = next(p for p in report.proposals if p.kind == "merge")
    changed = merge.proposal.touches[0]
    await engine.vector.update(OWNER, changed.id, "Alice likes oolong", embedding=near(0))
    before = await state(engine)
    with pytest.raises(ProposalChanged, match="changed since proposed"):
        await svc.confirm(OWNER, merge.id, by="erin")
    assert await state(engine) == before  # still queued, nothing closed
    with pytest.raises(ProposalNotApplied):
        await engine.undo_proposal(OWNER, merge.id, by="erin")
    assert await engine.structured.audit(OWNER) == []


async def test_a_rejected_proposal_is_not_made_again(stores: Stores) -> None:
    engine = engine_on(stores)
    await fill(engine)
    svc = ExtractionService.for_engine(engine)
    report = await svc.consolidate(OWNER)
    for p in report.proposals:
        await svc.reject(OWNER, p.id, by="frank")
    assert len(await engine.list(OWNER, limit=100)) == len(MEMORIES)
    assert (await svc.consolidate(OWNER)).proposals == ()


async def test_an_undone_proposal_waits_in_the_queue_again(stores: Stores) -> None:
    engine = engine_on(stores)
    await fill(engine)
    report = await engine.consolidate(OWNER, apply_all=True, by="gina")
    assert report.applied == 2 and report.refused == 0
    for p in report.proposals:
        await engine.undo_proposal(OWNER, p.id, by="gina")
    pending = (await engine.snapshot(OWNER)).pending
    assert waiting(pending) == waiting(report.proposals)
    assert not {p.id for p in pending} & {p.id for p in report.proposals}
    # a pass, even one confirming what it proposes, makes none again: they wait
    assert (await engine.consolidate(OWNER, apply_all=True, by="gina")).proposals == ()
    assert len(await engine.list(OWNER, limit=100)) == len(MEMORIES)


async def test_old_memories_are_proposed_to_expire(stores: Stores) -> None:
    engine = engine_on(stores, consolidation_expire_after_days=30)
    long_ago = utcnow() - timedelta(days=90)
    old = await engine.vector.store(OWNER, "The office wifi password is hunter2",
                                    embedding=near(5), now=long_ago, threshold=Cuts.off())
    await engine.vector.store(OWNER, "The office moved to the fourth floor",
                              embedding=near(6), threshold=Cuts.off())
    report = await engine.consolidate(OWNER, apply_all=True, by="hal")
    assert [(p.kind, [t.id for t in p.proposal.touches]) for p in report.proposals] == [
        ("expire", [old.memory.id])]
    assert [m.content for m in await engine.list(OWNER)] == [
        "The office moved to the fourth floor"]
    (closed,) = await engine.memory_history(OWNER, old.memory.id)
    assert (closed.change, closed.by) == ("expire", "hal")
    undone = await engine.undo_proposal(OWNER, report.proposals[0].id, by="hal")
    assert undone.entry.restored == 1
    assert len(await engine.list(OWNER)) == 2


async def test_reads_are_recorded_and_a_memory_still_read_does_not_expire(
        stores: Stores) -> None:
    engine = engine_on(stores, consolidation_expire_after_days=30)
    long_ago = utcnow() - timedelta(days=90)
    read = await engine.vector.store(OWNER, "The VPN gateway is vpn.example.org",
                                     embedding=near(5), now=long_ago, threshold=Cuts.off())
    unread = await engine.vector.store(OWNER, "The old fax number is 555-0100",
                                       embedding=near(6), now=long_ago, threshold=Cuts.off())
    hits = await engine.search(OWNER, "VPN gateway", embedding=near(5), limit=1)
    assert [h.memory.id for h in hits] == [read.memory.id]
    report = await engine.consolidate(OWNER)  # the pass writes the reads noted first
    assert [[t.id for t in p.proposal.touches] for p in report.proposals] == [
        [unread.memory.id]]
    assert "never found by a search" in report.proposals[0].proposal.reason
    last = await engine.vector.last_reads(OWNER)
    assert set(last) == {read.memory.id}
    earlier = last[read.memory.id] - timedelta(days=1)
    await engine.vector.note_reads(OWNER, {read.memory.id: earlier})  # the latest stays
    assert await engine.vector.last_reads(OWNER) == last
    # The primitive returns the last reads of what it recorded (all: with nothing noted).
    later = last[read.memory.id] + timedelta(days=1)
    assert await engine.vector._reads(OWNER, {read.memory.id: earlier}) == last
    assert await engine.vector._reads(OWNER, {unread.memory.id: later}) == {
        unread.memory.id: later}
    assert await engine.vector._reads(OWNER, {}) == {**last, unread.memory.id: later}
    await engine.forget(OWNER, by="admin")
    assert await engine.vector.last_reads(OWNER) == {}


async def test_undo_refuses_when_the_memory_it_kept_changed_since(stores: Stores) -> None:
    engine = engine_on(stores)
    await fill(engine)
    svc = ExtractionService.for_engine(engine)
    report = await svc.consolidate(OWNER)
    merge = next(p for p in report.proposals if p.kind == "merge")
    supersede = next(p for p in report.proposals if p.kind == "supersede")
    await svc.confirm(OWNER, merge.id, by="ivy", edited_content="Alice likes sencha")
    await svc.confirm(OWNER, supersede.id, by="ivy")
    for p in (merge, supersede):
        await engine.vector.update(OWNER, p.proposal.keep, f"changed after {p.kind}",
                                   embedding=near(7))
    before = await state(engine), await engine.structured.audit(OWNER)
    for p in (merge, supersede):  # the old value would come back beside a newer one
        with pytest.raises(ProposalChanged, match="since it was applied"):
            await engine.undo_proposal(OWNER, p.id, by="ivy")
    assert (await state(engine), await engine.structured.audit(OWNER)) == before


async def test_keyword_only_owners_are_consolidated_by_their_words(
        keyword_stores: Stores) -> None:
    engine = engine_on(keyword_stores)
    await fill(engine, vectors=False)
    before = await state(engine)
    report = await engine.consolidate(OWNER, apply_all=True, by="jo")
    assert sorted(p.kind for p in report.proposals) == ["merge", "supersede"]
    assert len(await engine.list(OWNER, limit=100)) == len(MEMORIES) - 2
    for p in report.proposals:
        await engine.undo_proposal(OWNER, p.id, by="jo")
    after = await state(engine)
    assert after[:3] + after[4:] == before[:3] + before[4:]
    assert after[3] == waiting(report.proposals)  # waiting again


async def test_rules_and_facts_a_newer_one_updates_are_proposed_as_corrections(
        stores: Stores) -> None:
    engine = engine_on(stores)
    # written as an agent that does not ask for review writes them: side by side
    await engine.structured.apply(OWNER, [
        AddFact("The team deploys on Friday"), AddFact("The team deploys on Thursday"),
        AddFact("The staging database is Postgres 15"), AddRule("Reply in English"),
        AddRule("Reply in Chinese")])
    snap = await engine.snapshot(OWNER)
    report = await engine.consolidate(OWNER)
    assert report.counts["correction"] == 2
    # written at once: which one is older is the items' order, as each backend keeps it
    by_old = {p.supersedes: p for p in report.proposals}
    old_fact = next(f for f in snap.facts if f.id in by_old)
    old_rule = next(r for r in snap.rules if r.id in by_old)
    assert {by_old[old_fact.id].content, old_fact.content} == {
        "The team deploys on Friday", "The team deploys on Thursday"}
    assert {by_old[old_rule.id].content, old_rule.content} == {"Reply in English",
                                                               "Reply in Chinese"}
    svc = ExtractionService.for_engine(engine)
    await svc.confirm(OWNER, by_old[old_fact.id].id, by="kim")
    await svc.reject(OWNER, by_old[old_rule.id].id, by="kim")
    newer = by_old[old_fact.id].content
    snap = await engine.snapshot(OWNER)
    assert sorted(f.content for f in snap.facts) == sorted(
        [newer, "The staging database is Postgres 15"])
    assert len(snap.rules) == 2  # rejected: both stay
    history = await engine.history(OWNER, old_fact.id)
    assert [v.content for v in history.versions] == [old_fact.content, newer]
    assert (await engine.consolidate(OWNER)).proposals == ()  # decided: not again


async def test_a_bad_pending_id_or_decider_is_refused(stores: Stores) -> None:
    engine = engine_on(stores)
    await fill(engine)
    with pytest.raises(InvalidInput):
        await engine.undo_proposal(OWNER, "", by="kim")
    report = await engine.consolidate(OWNER, apply_all=True, by="kim")
    with pytest.raises(InvalidInput):
        await engine.undo_proposal(OWNER, report.proposals[0].id, by="")
    assert len(await engine.list(OWNER, limit=100)) == len(MEMORIES) - 2
    assert [e.action for e in await engine.structured.audit(OWNER)] == ["confirmed"] * 2
    assert (await engine.snapshot(OWNER)).pending == ()
    with pytest.raises(InvalidInput):
        await engine.consolidate(OWNER, apply_all=True, by="")
    assert (await engine.snapshot(OWNER)).pending == ()


async def test_an_undo_is_recorded_and_the_proposal_can_be_decided_again(
        stores: Stores) -> None:
    engine = engine_on(stores)
    await fill(engine)
    svc = ExtractionService.for_engine(engine)
    merge = next(p for p in (await svc.consolidate(OWNER)).proposals if p.kind == "merge")
    await svc.confirm(OWNER, merge.id, by="carol", edited_content="Alice likes sencha")
    version = (await engine.snapshot(OWNER)).version
    undone = await svc.undo_proposal(OWNER, merge.id, by="dave")
    e = undone.entry
    assert undone.applied and (e.action, e.pending_id, e.by, e.restored) == (
        "undone", merge.id, "dave", 1)
    assert e.item == merge and e.at >= e.item.created_at
    # recorded beside the confirmation it reverses, in the write queueing the proposal
    snap = await engine.snapshot(OWNER)
    assert snap.version == version + 1
    (queued,) = [p for p in snap.pending if p.kind == "merge"]
    assert queued.id == e.requeued != merge.id
    assert (queued.content, queued.proposal) == (merge.content, merge.proposal)  # unedited
    trail = await engine.structured.audit(OWNER)
    assert [(x.action, x.pending_id, x.by) for x in trail] == [
        ("undone", merge.id, "dave"), ("confirmed", merge.id, "carol")]
    assert await engine.structured.audit(OWNER, pending_id=merge.id) == trail
    assert [x.action for x in await engine.structured.audit(OWNER, limit=1)] == ["undone"]
    # a second undo, and a retried confirmation, answer what is recorded; nothing written
    again = await svc.undo_proposal(OWNER, merge.id, by="erin")
    assert not again.applied and again.entry == e
    assert (await svc.confirm(OWNER, merge.id, by="carol")).entry == trail[1]
    assert (await engine.snapshot(OWNER)).version == snap.version
    assert await engine.structured.audit(OWNER) == trail
    # waiting again: confirmed (merged again), undone again, and at last rejected
    assert (await svc.confirm(OWNER, queued.id, by="erin")).memory_id == merge.proposal.keep
    assert len(await engine.list(OWNER, limit=100)) == len(MEMORIES) - 1
    second = (await svc.undo_proposal(OWNER, queued.id, by="erin")).entry
    assert (second.restored, second.pending_id) == (1, queued.id)
    assert len(await engine.list(OWNER, limit=100)) == len(MEMORIES)
    assert second.requeued is not None
    await svc.reject(OWNER, second.requeued, by="erin")
    assert [(x.action, x.pending_id) for x in await engine.structured.audit(OWNER)] == [
        ("rejected", second.requeued), ("undone", queued.id), ("confirmed", queued.id),
        ("undone", merge.id), ("confirmed", merge.id)]
    assert await engine.propose(OWNER) == []  # rejected at last: not made again
    with pytest.raises(ProposalNotApplied):
        await svc.undo_proposal(OWNER, second.requeued, by="erin")


async def test_an_undo_of_a_proposal_never_confirmed_is_refused_and_writes_nothing(
        stores: Stores) -> None:
    engine = engine_on(stores)
    await fill(engine)
    svc = ExtractionService.for_engine(engine)
    report = await svc.consolidate(OWNER)
    merge, supersede = (next(p for p in report.proposals if p.kind == k)
                        for k in ("merge", "supersede"))
    await svc.reject(OWNER, supersede.id, by="fay")
    extracted = MemoryPendingItem(kind="fact", content="Fay likes rust", confidence=0.5)
    await engine.structured.apply(OWNER, [AddPending(extracted)])
    await svc.confirm(OWNER, extracted.id, by="fay")  # a decision, but no proposal
    before = await state(engine), await engine.structured.audit(OWNER)
    for pid in (merge.id, supersede.id, extracted.id, "no-such-proposal"):
        with pytest.raises(ProposalNotApplied):
            await svc.undo_proposal(OWNER, pid, by="fay")
    with pytest.raises(ProposalNotApplied):  # the store refuses as well
        await engine.structured.undo_decision(OWNER, merge.id, "fay", restored=0)
    assert (await state(engine), await engine.structured.audit(OWNER)) == before


async def test_an_undo_stopped_before_it_was_recorded_is_recorded_by_a_retry(
        stores: Stores) -> None:
    engine = engine_on(stores)
    await fill(engine)
    report = await engine.consolidate(OWNER, apply_all=True, by="gus")
    merge = next(p for p in report.proposals if p.kind == "merge")
    # the memories reversed, then the process stopped before the undo was recorded
    assert await engine.unapply_proposal(OWNER, merge.id) == 1
    assert [e.action for e in await engine.structured.audit(OWNER)] == ["confirmed"] * 2
    undone = await engine.undo_proposal(OWNER, merge.id, by="gus")
    assert undone.applied and undone.entry.restored == 1
    assert len(await engine.list(OWNER, limit=100)) == len(MEMORIES) - 1  # the supersession
    # the write that records it, applied twice under its operation id: recorded once
    again = await engine.structured.undo_decision(
        OWNER, merge.id, "gus", restored=1, op_id=f"hitl-undo:{merge.id}")
    assert again is None
    assert [e.action for e in await engine.structured.audit(OWNER)].count("undone") == 1
    assert len([p for p in (await engine.snapshot(OWNER)).pending if p.kind == "merge"]) == 1


async def test_undone_proposals_travel_with_an_export(stores: Stores) -> None:
    engine = engine_on(stores)
    await fill(engine)
    report = await engine.consolidate(OWNER, apply_all=True, by="hana")
    for p in report.proposals:
        await engine.undo_proposal(OWNER, p.id, by="hana")
    trail = await engine.structured.audit(OWNER, limit=None)
    assert [e.action for e in trail].count("undone") == 2
    lines = await engine.export(OWNER)
    await engine.forget(OWNER, by="admin")
    await engine.import_document(lines)
    assert await engine.structured.audit(OWNER, limit=None) == trail


async def old_status(engine: MemoryEngine) -> None:
    """A status value set long ago, one set as long ago with a TTL still running, and one
    set now."""
    long_ago = utcnow() - timedelta(days=90)
    await engine.structured.apply(OWNER, [SetStatus("city", "Berlin"),
                                          SetStatus("trip", "Rome", ttl_s=200 * 86400)],
                                  now=long_ago)
    await engine.structured.apply(OWNER, [SetStatus("mood", "calm")])


async def test_old_status_values_without_a_ttl_are_proposed_to_expire(
        stores: Stores) -> None:
    engine = engine_on(stores, consolidation_expire_after_days=30)
    await old_status(engine)
    assert await engine_on(stores).propose(OWNER) == []  # off without the setting
    report = await engine.consolidate(OWNER)
    assert report.counts == {"merge": 0, "supersede": 0, "expire": 0, "correction": 0,
                             "status_expiry": 1}
    (item,) = report.proposals
    assert (item.kind, item.key, item.value, item.status_expiry) == (
        "expire", "city", "Berlin", True)
    (touched,) = item.proposal.touches
    last = (await engine.status_history(OWNER, "city"))[-1].at
    assert (touched.id, touched.content, touched.updated_at) == ("city", "Berlin", last)
    assert "unchanged since" in item.proposal.reason
    snap = await engine.snapshot(OWNER)
    assert dict(snap.status) == {"city": "Berlin", "trip": "Rome", "mood": "calm"}
    assert waiting(snap.pending) == waiting([item])  # queued, nothing else written
    assert (await engine.consolidate(OWNER)).proposals == ()  # not queued twice


async def test_a_confirmed_status_expiry_deletes_the_key_audited_and_undo_sets_it_again(
        stores: Stores) -> None:
    engine = engine_on(stores, consolidation_expire_after_days=30)
    await old_status(engine)
    svc = ExtractionService.for_engine(engine)
    (item,) = (await svc.consolidate(OWNER)).proposals
    with pytest.raises(InvalidInput):  # an expiry keeps no text to edit
        await svc.confirm(OWNER, item.id, by="lea", edited_content="Paris")
    version = (await engine.snapshot(OWNER)).version
    done = await svc.confirm(OWNER, item.id, by="lea")
    assert done.applied and done.memory_id is None
    snap = await engine.snapshot(OWNER)
    assert snap.version == version + 1  # one write: the key, the queue and the audit
    assert dict(snap.status) == {"trip": "Rome", "mood": "calm"} and snap.pending == ()
    changes = await engine.status_history(OWNER, "city")
    assert [(c.value, c.at >= item.created_at) for c in changes] == [
        ("Berlin", False), (None, True)]
    (entry,) = await engine.structured.audit(OWNER)
    assert (entry.action, entry.pending_id, entry.by, entry.item) == (
        "confirmed", item.id, "lea", item)
    assert (await svc.confirm(OWNER, item.id, by="lea")).applied is False  # once
    assert len(await engine.status_history(OWNER, "city")) == 2
    # undone: the value is back, the proposal waits again and can be confirmed again
    undone = (await svc.undo_proposal(OWNER, item.id, by="lea")).entry
    snap = await engine.snapshot(OWNER)
    assert snap.status["city"] == "Berlin" and "city" not in snap.status_expires_at
    (queued,) = snap.pending
    assert queued.id == undone.requeued and (queued.key, queued.value) == ("city", "Berlin")
    await svc.confirm(OWNER, queued.id, by="lea")
    assert "city" not in (await engine.snapshot(OWNER)).status


async def test_a_rejected_status_expiry_keeps_the_value_and_is_not_proposed_again(
        stores: Stores) -> None:
    engine = engine_on(stores, consolidation_expire_after_days=30)
    await old_status(engine)
    svc = ExtractionService.for_engine(engine)
    (item,) = (await svc.consolidate(OWNER)).proposals
    await svc.reject(OWNER, item.id, by="max")
    snap = await engine.snapshot(OWNER)
    assert snap.status["city"] == "Berlin" and snap.pending == ()
    assert len(await engine.status_history(OWNER, "city")) == 1
    assert (await svc.consolidate(OWNER)).proposals == ()
    with pytest.raises(ProposalNotApplied):
        await svc.undo_proposal(OWNER, item.id, by="max")


@pytest.mark.parametrize("values", [["Paris"], ["Paris", "Berlin"]],
                         ids=["another value", "the same value again"])
async def test_a_status_set_since_its_expiry_was_proposed_is_refused_and_writes_nothing(
        stores: Stores, values: list[str]) -> None:
    engine = engine_on(stores, consolidation_expire_after_days=30)
    await old_status(engine)
    svc = ExtractionService.for_engine(engine)
    (item,) = (await svc.consolidate(OWNER)).proposals
    for value in values:
        await engine.structured.apply(OWNER, [SetStatus("city", value)])
    before = await state(engine), await engine.status_history(OWNER, "city")
    with pytest.raises(ProposalChanged, match="changed since proposed"):
        await svc.confirm(OWNER, item.id, by="ned")
    assert (await state(engine), await engine.status_history(OWNER, "city")) == before
    assert await engine.structured.audit(OWNER) == []
    report = await engine.consolidate(OWNER, apply_all=True, by="ned")  # queued already
    assert report.proposals == ()
