"""Contract of superseding and history (L1): every backend must pass all of it."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from dream_memory_actor.errors import (
    DuplicateId,
    InvalidContent,
    InvalidQuery,
    ItemNotFound,
    ItemSuperseded,
    SupersessionCycle,
)
from dream_memory_actor.models import MemoryPendingItem, MemoryRule, utcnow
from dream_memory_actor.storage.ops import AddFact, AddRule, SetStatus, Supersede
from tests.conftest import Stores


async def test_supersede_closes_old_and_writes_new(stores: Stores) -> None:
    s = stores.structured
    old = await s.add_rule("alice", "Indent with spaces")
    other = await s.add_rule("alice", "Review security first")
    new = await s.supersede("alice", old.id, "Indent with tabs", by="alice",
                            reason="team style changed")
    snap = await s.load("alice")
    assert [r.content for r in snap.rules] == ["Review security first", "Indent with tabs"]
    assert new.id != old.id and new.content == "Indent with tabs"
    h = await s.history("alice", old.id)
    assert h.versions == (await s.history("alice", new.id)).versions  # either end: one chain
    assert [v.id for v in h.versions] == [old.id, new.id]
    first, last = h.versions
    assert first.valid_to is not None and first.superseded_by == new.id
    assert (first.by, first.reason) == ("alice", "team style changed")
    assert last.current and h.current == last
    assert [v.id for v in (await s.history("alice", other.id)).versions] == [other.id]


async def test_chain_of_three_and_facts(stores: Stores) -> None:
    s = stores.structured
    a = await s.add_fact("alice", "Lives in Paris")
    b = await s.supersede("alice", a.id, "Lives in Berlin", by="alice")
    c = await s.supersede("alice", b.id, "Lives in Lisbon", by="bot", reason="moved again")
    snap = await s.load("alice")
    assert [f.content for f in snap.facts] == ["Lives in Lisbon"]
    for item in (a, b, c):
        h = await s.history("alice", item.id)
        assert h.kind == "fact"
        assert [v.content for v in h.versions] == ["Lives in Paris", "Lives in Berlin",
                                                    "Lives in Lisbon"]


async def test_supersede_is_idempotent_under_op_id(stores: Stores) -> None:
    s = stores.structured
    old = await s.add_rule("alice", "Answer in English")
    one = await s.supersede("alice", old.id, "Answer in French", by="alice", op_id="op-1")
    two = await s.supersede("alice", old.id, "Answer in French", by="alice", op_id="op-1")
    assert one.id == two.id
    h = await s.history("alice", old.id)
    assert len(h.versions) == 2


async def test_supersede_into_existing_item(stores: Stores) -> None:
    s = stores.structured
    old = await s.add_rule("alice", "Use spaces")
    keep = await s.add_rule("alice", "Use tabs")
    got = await s.supersede("alice", old.id, "use  TABS", by="alice")
    assert got.id == keep.id
    assert [r.id for r in (await s.load("alice")).rules] == [keep.id]
    assert [v.id for v in (await s.history("alice", keep.id)).versions] == [old.id, keep.id]


async def test_bad_supersessions_write_nothing(stores: Stores) -> None:
    s = stores.structured
    old = await s.add_rule("alice", "Use spaces")
    bobs = await s.add_rule("bob", "Bob's rule")
    new = await s.supersede("alice", old.id, "Use tabs", by="alice")
    before = await s.load("alice")
    with pytest.raises(ItemNotFound):
        await s.supersede("alice", bobs.id, "stolen", by="alice")  # another owner's id
    with pytest.raises(ItemNotFound):
        await s.supersede("alice", "no-such-id", "x", by="alice")
    with pytest.raises(ItemSuperseded):
        await s.supersede("alice", old.id, "Use two spaces", by="alice")
    with pytest.raises(SupersessionCycle):
        await s.apply("alice", [Supersede(new.id, "Use spaces again", "alice", id=old.id)])
    with pytest.raises(SupersessionCycle):
        await s.apply("alice", [Supersede(new.id, "Use four spaces", "alice", id=new.id)])
    with pytest.raises(InvalidContent):
        await s.supersede("alice", new.id, "   ", by="alice")
    with pytest.raises(InvalidContent):
        await s.supersede("alice", new.id, "x" * (s.max_content_bytes + 1), by="alice")
    with pytest.raises(InvalidContent):
        await s.supersede("alice", new.id, "use tabs", by="alice")  # the same text
    with pytest.raises(InvalidQuery):
        await s.supersede("alice", new.id, "Use four spaces", by="")
    with pytest.raises(ItemNotFound):
        await s.history("alice", bobs.id)
    x = await s.add_fact("alice", "Likes tea")
    await s.supersede("alice", x.id, "Likes coffee", by="alice")
    before = await s.load("alice")
    with pytest.raises(DuplicateId):  # a closed id is not reused for another item
        await s.apply("alice", [Supersede(new.id, "Use four spaces", "alice", id=x.id)])
    after = await s.load("alice")
    assert after.version == before.version and after.rules == before.rules
    assert len((await s.history("alice", new.id)).versions) == 2
    assert [r.content for r in (await s.load("bob")).rules] == ["Bob's rule"]


async def test_supersede_with_other_ops_is_atomic(stores: Stores) -> None:
    s = stores.structured
    old = await s.add_rule("alice", "Use spaces")
    with pytest.raises(ItemNotFound):
        await s.apply("alice", [Supersede(old.id, "Use tabs", "alice"), AddRule("extra"),
                                Supersede("missing", "x", "alice")])
    snap = await s.load("alice")
    assert [r.content for r in snap.rules] == ["Use spaces"]
    assert len((await s.history("alice", old.id)).versions) == 1


async def test_snapshot_as_of(stores: Stores) -> None:
    s = stores.structured
    t0 = utcnow()
    old = await s.add_rule("alice", "Use spaces", )
    await s.set_status("alice", "project", "alpha")
    await asyncio.sleep(0.01)
    t1 = utcnow()
    await asyncio.sleep(0.01)
    await s.supersede("alice", old.id, "Use tabs", by="alice")
    await s.set_status("alice", "project", "beta")
    await s.set_status("alice", "mood", "tired")
    await s.delete_status("alice", "mood")
    at0 = await s.load_as_of("alice", t0 - timedelta(seconds=1))
    assert at0.rules == () and dict(at0.status) == {}
    at1 = await s.load_as_of("alice", t1)
    assert [r.content for r in at1.rules] == ["Use spaces"] and at1.rules[0].id == old.id
    assert dict(at1.status) == {"project": "alpha"}
    now = await s.load_as_of("alice", utcnow())
    assert [r.content for r in now.rules] == ["Use tabs"]
    assert dict(now.status) == {"project": "beta"}
    assert now.pending == () and now.version == 0


async def test_status_history_is_bounded(stores: Stores) -> None:
    s = stores.structured
    keep = s.limits.status_history
    for i in range(keep + 3):
        await s.set_status("alice", "step", f"v{i}")
    await s.set_status("alice", "step", f"v{keep + 2}")  # unchanged: not a change
    await s.set_status("alice", "other", "x")
    got = await s.status_history("alice", "step")
    assert [c.value for c in got] == [f"v{i}" for i in range(3, keep + 3)]
    await s.delete_status("alice", "step")
    got = await s.status_history("alice", "step")
    assert len(got) == keep and got[-1].value is None and got[-2].value == f"v{keep + 2}"
    assert [c.value for c in await s.status_history("alice", "other")] == ["x"]


async def test_status_history_in_one_apply_and_ttl(stores: Stores) -> None:
    s = stores.structured
    await s.apply("alice", [SetStatus("a", "1"), SetStatus("a", "2"),
                            SetStatus("b", "x", ttl_s=0.05)])
    assert [c.value for c in await s.status_history("alice", "a")] == ["1", "2"]
    [b] = await s.status_history("alice", "b")
    assert b.expires_at is not None
    assert dict((await s.load_as_of("alice", b.at)).status) == {"a": "2", "b": "x"}
    await asyncio.sleep(0.1)
    assert "b" not in (await s.load_as_of("alice", utcnow())).status


async def test_a_new_version_of_a_fact_waits_as_a_correction(stores: Stores) -> None:
    s = stores.structured
    java = await s.add_fact("alice", "The user is a Java developer")
    other = await s.add_fact("alice", "The user lives in Berlin")
    queued = await s.add_fact("alice", "The user is a Go developer")
    assert isinstance(queued, MemoryPendingItem)
    assert (queued.kind, queued.supersedes, queued.supersedes_content) == (
        "fact", java.id, java.content)
    assert "'Java' -> 'Go'" in (queued.evidence or "")
    snap = await s.load("alice")
    assert [f.content for f in snap.facts] == [java.content, other.content]  # not beside it
    assert [p.id for p in snap.pending] == [queued.id]
    assert await s.add_fact("alice", "The user is a Go developer") == queued  # queued once
    assert await s.add_fact("alice", "The user works in Berlin") != other  # a word: beside
    decided = await s.decide("alice", queued.id, "confirmed", by="alice")
    assert decided is not None
    snap = await s.load("alice")
    assert "The user is a Go developer" in [f.content for f in snap.facts]
    assert java.content not in [f.content for f in snap.facts]
    versions = (await s.history("alice", java.id)).versions
    assert [v.content for v in versions] == [java.content, "The user is a Go developer"]


async def test_only_the_doors_adds_are_reviewed(stores: Stores) -> None:
    s = stores.structured
    rule = await s.add_rule("alice", "Always answer in English")
    queued = await s.add_rule("alice", "Always answer in Chinese")
    assert isinstance(queued, MemoryPendingItem) and queued.supersedes == rule.id
    # A plain AddRule (replay, import, a caller's own list) is written as it is.
    snap = await s.apply("alice", [AddRule("Always answer in French")])
    assert [r.content for r in snap.rules] == ["Always answer in English",
                                               "Always answer in French"]
    # Two current rules fit equally: the change names neither, so it is added.
    assert isinstance(await s.add_rule("alice", "Always answer in German"), MemoryRule)
    # Reviewed ops in one apply: the second is judged against the first's result.
    snap = await s.apply("bob", [AddFact("Deploys happen on Friday", review_updates=True),
                                 AddFact("Deploys happen on Monday", review_updates=True)])
    assert [f.content for f in snap.facts] == ["Deploys happen on Friday"]
    assert [p.content for p in snap.pending] == ["Deploys happen on Monday"]
