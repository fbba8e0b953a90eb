"""Contract of the structured (L1) store: every backend must pass all of it."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from dream_memory_actor.errors import (
    FactNotFound,
    InvalidContent,
    InvalidOwnerId,
    InvalidQuery,
    InvalidStatusKey,
    PendingItemNotFound,
    RuleNotFound,
    UnknownStatusKey,
)
from dream_memory_actor.models import MemoryPendingItem, utcnow
from dream_memory_actor.storage.ops import (
    AddFact,
    AddPending,
    AddRule,
    DeleteStatus,
    RemoveFact,
    RemovePending,
    RemoveRule,
    SetStatus,
)
from tests.conftest import Stores


async def test_new_owner_has_empty_snapshot(stores: Stores) -> None:
    snap = await stores.structured.load("alice")
    assert snap.owner == "alice"
    assert (snap.rules, snap.facts, dict(snap.status), snap.pending) == ((), (), {}, ())
    assert snap.version == 0


async def test_rules_facts_status_roundtrip(stores: Stores) -> None:
    s = stores.structured
    rule = await s.add_rule("alice", "In code review, look at security first")
    fact = await s.add_fact("alice", "The user is a Java developer")
    await s.set_status("alice", "current_project", "dream-saas")
    snap = await s.load("alice")
    assert [r.content for r in snap.rules] == ["In code review, look at security first"]
    assert [f.content for f in snap.facts] == ["The user is a Java developer"]
    assert dict(snap.status) == {"current_project": "dream-saas"}
    assert snap.rules[0].id == rule.id and snap.facts[0].id == fact.id
    assert snap.version == 3
    assert "security first" in snap.to_prompt() and "current_project=dream-saas" in snap.to_prompt()


async def test_owners_are_isolated(stores: Stores) -> None:
    await stores.structured.add_rule("alice", "reply in Chinese")
    assert (await stores.structured.load("bob")).rules == ()


async def test_same_rule_twice_is_one_rule(stores: Stores) -> None:
    s = stores.structured
    a = await s.add_rule("alice", "Reply in Chinese")
    b = await s.add_rule("alice", "  reply   in chinese ")
    assert a.id == b.id
    assert len((await s.load("alice")).rules) == 1


async def test_remove_rule_and_fact(stores: Stores) -> None:
    s = stores.structured
    r = await s.add_rule("alice", "r1")
    f = await s.add_fact("alice", "f1")
    await s.apply("alice", [RemoveRule(r.id), RemoveFact(f.id)])
    snap = await s.load("alice")
    assert snap.rules == () and snap.facts == ()
    with pytest.raises(RuleNotFound):
        await s.apply("alice", [RemoveRule(r.id)])
    with pytest.raises(FactNotFound):
        await s.apply("alice", [RemoveFact(f.id)])


async def test_status_overwrite_and_delete(stores: Stores) -> None:
    s = stores.structured
    await s.set_status("alice", "mood", "tired")
    await s.set_status("alice", "mood", "happy")
    assert dict((await s.load("alice")).status) == {"mood": "happy"}
    await s.delete_status("alice", "mood")
    assert dict((await s.load("alice")).status) == {}


async def test_unknown_status_key_on_delete_is_typed_and_writes_nothing(stores: Stores) -> None:
    s = stores.structured
    await s.set_status("alice", "mood", "tired")
    before = await s.load("alice")
    with pytest.raises(UnknownStatusKey):
        await s.delete_status("alice", "nope")
    assert await s.load("alice") == before


async def test_apply_is_atomic(stores: Stores) -> None:
    s = stores.structured
    await s.add_rule("alice", "keep")
    before = await s.load("alice")
    with pytest.raises(UnknownStatusKey):
        await s.apply("alice", [AddRule("never written"), SetStatus("k", "v"), DeleteStatus("zz")])
    assert await s.load("alice") == before


async def test_status_ttl_expires(stores: Stores) -> None:
    s = stores.structured
    now = utcnow()
    await s.apply("alice", [SetStatus("mood", "tired", ttl_s=60), SetStatus("team", "core")],
                  now=now)
    assert dict((await s.load("alice", now=now + timedelta(seconds=30))).status) == {
        "mood": "tired", "team": "core"}
    later = await s.load("alice", now=now + timedelta(seconds=61))
    assert dict(later.status) == {"team": "core"}
    with pytest.raises(UnknownStatusKey):
        await s.apply("alice", [DeleteStatus("mood")], now=now + timedelta(seconds=61))


async def test_setting_status_again_without_ttl_clears_expiry(stores: Stores) -> None:
    s = stores.structured
    now = utcnow()
    await s.apply("alice", [SetStatus("mood", "tired", ttl_s=1)], now=now)
    await s.apply("alice", [SetStatus("mood", "fine")], now=now)
    snap = await s.load("alice", now=now + timedelta(seconds=5))
    assert dict(snap.status) == {"mood": "fine"}


def _pending(**kw: object) -> MemoryPendingItem:
    base: dict[str, object] = {"kind": "fact", "content": "the user uses Helm", "confidence": 0.7}
    base.update(kw)
    return MemoryPendingItem(**base)  # type: ignore[arg-type]


async def test_pending_queue_add_remove(stores: Stores) -> None:
    s = stores.structured
    item = _pending()
    snap = await s.apply("alice", [AddPending(item)])
    assert [p.id for p in snap.pending] == [item.id]
    loaded = (await s.load("alice")).pending[0]
    assert loaded.content == "the user uses Helm" and loaded.confidence == pytest.approx(0.7)
    await s.apply("alice", [RemovePending(item.id)])
    assert (await s.load("alice")).pending == ()
    with pytest.raises(PendingItemNotFound):
        await s.apply("alice", [RemovePending(item.id)])


async def test_same_pending_candidate_is_queued_once(stores: Stores) -> None:
    s = stores.structured
    await s.apply("alice", [AddPending(_pending())])
    await s.apply("alice", [AddPending(_pending(content="The user uses  Helm"))])
    await s.apply("alice", [AddPending(_pending(kind="status", content=None, key="mood",
                                                 value="ok"))])
    await s.apply("alice", [AddPending(_pending(kind="status", content=None, key="mood",
                                                 value="ok"))])
    assert len((await s.load("alice")).pending) == 2


async def test_pending_items_expire(stores: Stores) -> None:
    s = stores.structured
    now = utcnow()
    item = _pending(expires_at=now + timedelta(seconds=10))
    await s.apply("alice", [AddPending(item)], now=now)
    assert len((await s.load("alice", now=now)).pending) == 1
    assert (await s.load("alice", now=now + timedelta(seconds=11))).pending == ()


async def test_version_increments_per_apply(stores: Stores) -> None:
    s = stores.structured
    v = [(await s.set_status("alice", "n", str(i))).version for i in range(3)]
    assert v == [1, 2, 3]
    assert (await s.load("alice")).version == 3


async def test_concurrent_writes_on_one_owner_lose_nothing(stores: Stores) -> None:
    s = stores.structured
    await asyncio.gather(*(s.add_fact("alice", f"item {i} of the load is recorded")
                           for i in range(20)),
                         *(s.set_status("alice", f"k{i}", "v") for i in range(20)))
    snap = await s.load("alice")
    assert len(snap.facts) == 20 and len(snap.status) == 20 and snap.version == 40


@pytest.mark.parametrize("owner", ["", " ", "a b", "{alice}", "x" * 129, "-lead", "a/b", 7, None])
async def test_bad_owner_ids_rejected(stores: Stores, owner: object) -> None:
    with pytest.raises(InvalidOwnerId):
        await stores.structured.add_rule(owner, "r")  # type: ignore[arg-type]


@pytest.mark.parametrize("text", ["", "   \n\t", "a\x00b"])
async def test_bad_content_rejected_nothing_written(stores: Stores, text: str) -> None:
    with pytest.raises(InvalidContent):
        await stores.structured.add_rule("alice", text)
    assert (await stores.structured.load("alice")).version == 0


async def test_oversized_content_rejected(stores: Stores) -> None:
    with pytest.raises(InvalidContent):
        await stores.structured.add_fact("alice", "x" * (32 * 1024 + 1))
    assert (await stores.structured.load("alice")).version == 0


@pytest.mark.parametrize("key", ["", "1abc", "a b", "k" * 65, "a{b}"])
async def test_bad_status_keys_rejected(stores: Stores, key: str) -> None:
    with pytest.raises(InvalidStatusKey):
        await stores.structured.set_status("alice", key, "v")
    assert (await stores.structured.load("alice")).version == 0


async def test_empty_ops_rejected(stores: Stores) -> None:
    with pytest.raises(InvalidQuery):
        await stores.structured.apply("alice", [])


async def test_unicode_content_roundtrips(stores: Stores) -> None:
    await stores.structured.add_rule("alice", "以后用中文回复 🙂")
    await stores.structured.add_fact("alice", "quote ' and \" and % and _ and \\")
    snap = await stores.structured.load("alice")
    assert snap.rules[0].content == "以后用中文回复 🙂"
    assert snap.facts[0].content == "quote ' and \" and % and _ and \\"


async def test_retried_operation_id_is_applied_once(stores: Stores) -> None:
    s = stores.structured
    first = await s.apply("alice", [AddFact("uses helm"), SetStatus("n", "1")], op_id="op-1")
    again = await s.apply("alice", [AddFact("uses argo"), SetStatus("n", "2")], op_id="op-1")
    assert again.version == first.version == 1
    snap = await s.load("alice")
    assert [f.content for f in snap.facts] == ["uses helm"] and dict(snap.status) == {"n": "1"}
    # the same id on another owner is another operation
    assert (await s.apply("bob", [AddFact("x")], op_id="op-1")).version == 1
