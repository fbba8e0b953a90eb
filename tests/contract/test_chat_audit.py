"""Contract of the L3 chat window and the HITL audit trail: every backend must pass all of it."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from dream_memory_actor.errors import (
    AuditNotWritable,
    InvalidContent,
    InvalidInput,
    InvalidOwnerId,
    InvalidQuery,
    PendingItemNotFound,
)
from dream_memory_actor.models import AuditEntry, ChatMessage, MemoryPendingItem, utcnow
from dream_memory_actor.storage.base import MAX_WINDOW, StructuredStore
from dream_memory_actor.storage.ops import AddAudit, AddPending, RemovePending
from tests.conftest import Stores


def msgs(*texts: str, role: str = "user") -> list[ChatMessage]:
    return [ChatMessage(role=role, content=t) for t in texts]


def texts(messages: tuple[ChatMessage, ...]) -> list[str]:
    return [m.content for m in messages]


def pending(content: str = "The user likes tea") -> MemoryPendingItem:
    return MemoryPendingItem(kind="fact", content=content, confidence=0.6)


def entry(item: MemoryPendingItem, action: str = "confirmed", by: str = "alice",
          **kw: object) -> AuditEntry:
    return AuditEntry(pending_id=item.id, action=action, by=by, item=item, **kw)


async def queued(s: StructuredStore, owner: str, *contents: str) -> list[MemoryPendingItem]:
    items = [pending(c) for c in contents]
    await s.apply(owner, [AddPending(i) for i in items])
    return items


# -- chat window ------------------------------------------------------------------------


async def test_order_window_size_and_overflow(stores: Stores) -> None:
    s = stores.structured
    first = await s.append_messages("alice", "c1", msgs("m1", "m2", "m3"), window=4)
    assert texts(first.window) == ["m1", "m2", "m3"] and first.overflow == ()
    second = await s.append_messages("alice", "c1", msgs("m4", "m5", "m6"), window=4)
    assert texts(second.window) == ["m3", "m4", "m5", "m6"]
    assert texts(second.overflow) == ["m1", "m2"]
    assert texts(await s.load_window("alice", "c1")) == ["m3", "m4", "m5", "m6"]
    # more new messages than the window: the oldest new ones overflow too, in order
    third = await s.append_messages("alice", "c1", msgs(*"abcdef"), window=4)
    assert texts(third.window) == list("cdef")
    assert texts(third.overflow) == ["m3", "m4", "m5", "m6", "a", "b"]
    assert texts(await s.load_window("alice", "c1")) == list("cdef")


async def test_order_is_arrival_not_created_at(stores: Stores) -> None:
    s = stores.structured
    now = utcnow()
    late = ChatMessage(role="user", content="written later", created_at=now)
    early = ChatMessage(role="assistant", content="stamped earlier",
                        created_at=now - timedelta(hours=1))
    await s.append_messages("alice", "c1", [late, early], window=3)
    await s.append_messages("alice", "c1", msgs("third"), window=3)
    out = await s.append_messages("alice", "c1", msgs("fourth"), window=3)
    assert texts(out.overflow) == ["written later"]
    assert texts(out.window) == ["stamped earlier", "third", "fourth"]


async def test_messages_keep_role_content_and_time(stores: Stores) -> None:
    s = stores.structured
    sent = (msgs("question 以后用中文 🙂") + msgs("answer ' \" % _ \\", role="assistant")
            + msgs("be brief", role="system") + msgs('{"ok": true}', role="tool"))
    appended = await s.append_messages("alice", "c1", sent, window=20)
    assert appended.window == tuple(sent)
    assert await s.load_window("alice", "c1") == tuple(sent)


async def test_window_of_one_and_the_largest_window(stores: Stores) -> None:
    s = stores.structured
    out = await s.append_messages("alice", "c1", msgs("a", "b", "c"), window=1)
    assert texts(out.window) == ["c"] and texts(out.overflow) == ["a", "b"]
    big = await s.append_messages("alice", "c2", msgs(*(f"m{i}" for i in range(300))),
                                  window=MAX_WINDOW)
    assert len(big.window) == 300 and big.overflow == ()
    assert texts(big.window)[:2] == ["m0", "m1"] and texts(big.window)[-1] == "m299"


async def test_empty_append_trims_to_a_smaller_window(stores: Stores) -> None:
    s = stores.structured
    await s.append_messages("alice", "c1", msgs(*"abcde"), window=20)
    trimmed = await s.append_messages("alice", "c1", [], window=2)
    assert texts(trimmed.window) == ["d", "e"] and texts(trimmed.overflow) == list("abc")
    same = await s.append_messages("alice", "c1", (), window=2)
    assert texts(same.window) == ["d", "e"] and same.overflow == ()
    nothing = await s.append_messages("alice", "new", [], window=2)
    assert nothing.window == () and nothing.overflow == ()
    assert await s.load_window("alice", "new") == ()


async def test_end_conversation_returns_and_deletes(stores: Stores) -> None:
    s = stores.structured
    await s.append_messages("alice", "c1", msgs("x", "y", "z"), window=2)
    assert texts(await s.end_conversation("alice", "c1")) == ["y", "z"]
    assert await s.load_window("alice", "c1") == ()
    assert await s.end_conversation("alice", "c1") == ()
    # the conversation can start again, empty
    again = await s.append_messages("alice", "c1", msgs("new"), window=2)
    assert texts(again.window) == ["new"] and again.overflow == ()


async def test_conversations_and_owners_are_isolated(stores: Stores) -> None:
    s = stores.structured
    await s.append_messages("alice", "c1", msgs("a1"), window=5)
    await s.append_messages("alice", "c2", msgs("a2"), window=5)
    await s.append_messages("bob", "c1", msgs("b1"), window=5)
    await s.append_messages("alice", "c1:x", msgs("a1x"), window=5)
    assert texts(await s.load_window("alice", "c1")) == ["a1"]
    assert texts(await s.load_window("alice", "c2")) == ["a2"]
    assert texts(await s.load_window("alice", "c1:x")) == ["a1x"]
    assert texts(await s.load_window("bob", "c1")) == ["b1"]
    assert await s.load_window("carol", "c1") == ()
    assert texts(await s.end_conversation("alice", "c1")) == ["a1"]
    assert texts(await s.load_window("alice", "c2")) == ["a2"]
    assert texts(await s.load_window("alice", "c1:x")) == ["a1x"]
    assert texts(await s.load_window("bob", "c1")) == ["b1"]
    # trimming one window leaves the others alone
    await s.append_messages("bob", "c1", msgs(*"pqr"), window=1)
    assert texts(await s.load_window("alice", "c2")) == ["a2"]
    # the chat window is not part of L1
    assert (await s.load("alice")).version == 0


async def test_concurrent_appends_lose_nothing(stores: Stores) -> None:
    s = stores.structured
    results = await asyncio.gather(*(
        s.append_messages("alice", "c1", msgs(f"{i}a", f"{i}b"), window=5) for i in range(10)))
    window = texts(await s.load_window("alice", "c1"))
    overflow = [m.content for r in results for m in r.overflow]
    assert len(window) == 5 and len(overflow) == 15
    everything = overflow + window
    assert sorted(everything) == sorted(f"{i}{x}" for i in range(10) for x in "ab")
    for i, r in enumerate(results):
        # each call's own messages are the newest of the window it returns, in order
        assert texts(r.window)[-2:] == [f"{i}a", f"{i}b"]
        # and it saw one consistent window: the newest five of what had arrived
        assert len(r.window) == 5 or r.overflow == ()
        seen = texts(r.overflow) + texts(r.window)
        for j in range(10):  # every call's messages stay together and in order
            at = [n for n, t in enumerate(seen) if t[:-1] == str(j)]
            assert len(at) != 2 or (seen[at[0]] == f"{j}a" and at[1] == at[0] + 1)


@pytest.mark.parametrize("conversation", ["", " ", "bad conv!", "-c1", "{c1}", "a/b",
                                          "x" * 129, "c\x00", None, 7])
async def test_bad_conversation_ids_rejected(stores: Stores, conversation: object) -> None:
    s = stores.structured
    with pytest.raises(InvalidQuery):
        await s.append_messages("alice", conversation, msgs("x"), window=5)  # type: ignore[arg-type]
    with pytest.raises(InvalidQuery):
        await s.load_window("alice", conversation)  # type: ignore[arg-type]
    with pytest.raises(InvalidQuery):
        await s.end_conversation("alice", conversation)  # type: ignore[arg-type]


@pytest.mark.parametrize("window", [0, -1, MAX_WINDOW + 1, True, 2.0, "3", None])
async def test_bad_window_sizes_rejected_nothing_written(stores: Stores, window: object) -> None:
    s = stores.structured
    await s.append_messages("alice", "c1", msgs("keep"), window=5)
    with pytest.raises(InvalidQuery):
        await s.append_messages("alice", "c1", msgs("x"), window=window)  # type: ignore[arg-type]
    assert texts(await s.load_window("alice", "c1")) == ["keep"]


@pytest.mark.parametrize("messages", [
    ["x"],
    "hello",
    ChatMessage(role="user", content="not in a list"),
    [{"role": "user", "content": "a dict"}],
    [ChatMessage(role="user", content="valid, but in a bad batch"), None],
])
async def test_non_messages_rejected_nothing_written(stores: Stores, messages: object) -> None:
    s = stores.structured
    with pytest.raises(InvalidQuery):
        await s.append_messages("alice", "c1", messages, window=5)  # type: ignore[arg-type]
    assert await s.load_window("alice", "c1") == ()


@pytest.mark.parametrize("content", ["", "  \n\t", "a\x00b", "x" * (32 * 1024 + 1)])
async def test_bad_message_content_rejected_nothing_written(stores: Stores, content: str) -> None:
    s = stores.structured
    batch = [*msgs("fine"), ChatMessage(role="user", content=content)]
    with pytest.raises(InvalidContent):
        await s.append_messages("alice", "c1", batch, window=5)
    assert await s.load_window("alice", "c1") == ()


async def test_bad_owner_ids_rejected(stores: Stores) -> None:
    s = stores.structured
    for owner in ["", "a b", "{alice}", "x" * 129, None]:
        with pytest.raises(InvalidOwnerId):
            await s.append_messages(owner, "c1", msgs("x"), window=5)  # type: ignore[arg-type]
        with pytest.raises(InvalidOwnerId):
            await s.load_window(owner, "c1")  # type: ignore[arg-type]
        with pytest.raises(InvalidOwnerId):
            await s.end_conversation(owner, "c1")  # type: ignore[arg-type]
        with pytest.raises(InvalidOwnerId):
            await s.audit(owner)  # type: ignore[arg-type]


# -- audit trail ------------------------------------------------------------------------


async def test_decision_is_written_with_its_audit_entry(stores: Stores) -> None:
    s = stores.structured
    (item,) = await queued(s, "alice", "The user likes tea")
    done = await s.decide("alice", item.id, "confirmed", "alice",
                          edited="The user likes green tea")
    assert done is not None
    snap, e = done
    assert snap.version == 2 and snap.pending == ()
    assert [(f.content, f.source) for f in snap.facts] == [("The user likes green tea",
                                                            "confirmed")]
    assert await s.audit("alice") == [e]
    (loaded,) = await s.audit("alice", pending_id=item.id)
    assert loaded == e and loaded.item == item and loaded.written == "The user likes green tea"
    assert loaded.by == "alice" and loaded.action == "confirmed"
    # a rejection writes nothing but the removal and its entry
    (other,) = await queued(s, "alice", "Uses tabs")
    after = await s.decide("alice", other.id, "rejected", "bob")
    assert after is not None
    assert after[0].version == 4 and after[0].facts == snap.facts and after[0].pending == ()
    assert after[1].written is None
    assert [a.action for a in await s.audit("alice")] == ["rejected", "confirmed"]


async def test_apply_cannot_write_an_audit_entry(stores: Stores) -> None:
    """A forged entry ("rejected by security-officer") is refused, whatever comes with it."""
    s = stores.structured
    (item,) = await queued(s, "alice", "The user likes tea")
    before = await s.load("alice")
    forged = entry(item, "rejected", by="security-officer")
    for ops in ([AddAudit(forged)], [RemovePending(item.id), AddAudit(forged)],
                [AddAudit("not an entry")]):  # type: ignore[arg-type]
        with pytest.raises(AuditNotWritable):
            await s.apply("alice", ops)
    assert isinstance(AuditNotWritable("x"), InvalidInput)
    assert await s.audit("alice") == []
    assert await s.load("alice") == before
    # the owner's decision is the one recorded
    done = await s.decide("alice", item.id, "confirmed", "alice")
    assert done is not None and await s.audit("alice") == [done[1]]


async def test_decision_on_an_item_not_queued_writes_nothing(stores: Stores) -> None:
    s = stores.structured
    (item,) = await queued(s, "alice", "The user likes tea")
    before = await s.load("alice")
    assert await s.decide("alice", "never-queued", "rejected", "alice") is None
    assert await s.decide("bob", item.id, "rejected", "bob") is None  # another owner's
    assert await s.audit("alice") == [] and await s.audit("bob") == []
    assert await s.load("alice") == before
    done = await s.decide("alice", item.id, "rejected", "alice")
    assert done is not None
    assert await s.decide("alice", item.id, "confirmed", "alice") is None  # decided already
    assert await s.audit("alice") == [done[1]]


async def test_concurrent_decisions_on_one_item_keep_one(stores: Stores) -> None:
    s = stores.structured
    (item,) = await queued(s, "alice", "The user likes tea")
    results = await asyncio.gather(
        *(s.decide("alice", item.id, "confirmed" if i % 2 else "rejected", f"user{i}")
          for i in range(8)), return_exceptions=True)
    won = [r for r in results if isinstance(r, tuple)]
    assert len(won) == 1
    assert all(r is None or isinstance(r, PendingItemNotFound) for r in results
               if not isinstance(r, tuple))
    assert await s.audit("alice") == [won[0][1]]
    assert (await s.load("alice")).version == 2


async def test_a_queued_again_id_gets_the_new_decision(stores: Stores) -> None:
    s = stores.structured
    (item,) = await queued(s, "alice", "The user likes tea")
    first = await s.decide("alice", item.id, "rejected", "alice")
    (other,) = await queued(s, "alice", "Use tabs")
    await s.apply("alice", [AddPending(item.model_copy(update={"content": "Tea, not coffee"}))])
    second = await s.decide("alice", item.id, "confirmed", "bob")
    assert first is not None and second is not None
    assert await s.audit("alice", pending_id=item.id) == [second[1]]
    assert await s.audit("alice") == [second[1]]
    assert [f.content for f in second[0].facts] == ["Tea, not coffee"]
    assert [p.id for p in second[0].pending] == [other.id]


async def test_audit_newest_first_with_limit_and_filter(stores: Stores) -> None:
    s = stores.structured
    items = await queued(s, "alice", *(f"fact {i}" for i in range(5)))
    recorded = []
    for i, it in enumerate(items):
        done = await s.decide("alice", it.id, "confirmed" if i % 2 else "rejected", f"user{i}")
        assert done is not None
        recorded.append(done[1])
    newest_first = list(reversed(recorded))
    assert await s.audit("alice") == newest_first
    assert await s.audit("alice", limit=3) == newest_first[:3]
    assert await s.audit("alice", limit=1) == newest_first[:1]
    assert await s.audit("alice", limit=100) == newest_first
    assert await s.audit("alice", pending_id=items[2].id) == [recorded[2]]
    assert await s.audit("alice", pending_id=items[2].id, limit=1) == [recorded[2]]
    assert await s.audit("alice", pending_id="never-decided") == []
    assert await s.audit("bob") == []
    assert await s.audit("bob", pending_id=items[2].id) == []


async def test_audit_owners_are_isolated(stores: Stores) -> None:
    s = stores.structured
    (item,) = await queued(s, "alice", "The user likes tea")
    (other,) = await queued(s, "bob", "The user likes tea")
    assert await s.decide("bob", item.id, "rejected", "bob") is None  # not bob's
    mine = await s.decide("alice", item.id, "confirmed", "alice")
    theirs = await s.decide("bob", other.id, "rejected", "bob")
    assert mine is not None and theirs is not None
    assert await s.audit("alice") == [mine[1]]
    assert await s.audit("bob") == [theirs[1]]


async def test_retried_decision_is_applied_once(stores: Stores) -> None:
    s = stores.structured
    item, other = await queued(s, "alice", "The user likes tea", "Use tabs")
    first = await s.decide("alice", item.id, "confirmed", "alice", op_id="decide-1")
    assert first is not None and first[0].version == 2
    # a retry under the same id (here: on another item) applies nothing
    again = await s.decide("alice", other.id, "rejected", "alice", op_id="decide-1")
    assert again is not None and again[0].version == 2
    assert await s.audit("alice") == [first[1]]
    snap = await s.load("alice")
    assert snap.version == 2 and [p.id for p in snap.pending] == [other.id]


async def test_audit_arguments_are_checked_nothing_written(stores: Stores) -> None:
    s = stores.structured
    (item,) = await queued(s, "alice", "The user likes tea")
    with pytest.raises(InvalidQuery):
        await s.audit("alice", limit=0)
    with pytest.raises(InvalidQuery):
        await s.audit("alice", pending_id="")
    with pytest.raises(InvalidQuery):
        await s.decide("alice", item.id, "confirmed", "")
    with pytest.raises(InvalidQuery):
        await s.decide("alice", item.id, "approved", "alice")  # type: ignore[arg-type]
    with pytest.raises(InvalidQuery):
        await s.decide("alice", "", "rejected", "alice")
    with pytest.raises(InvalidContent):
        await s.decide("alice", item.id, "confirmed", "alice", edited="  ")
    with pytest.raises(InvalidOwnerId):
        await s.decide("bad owner!", item.id, "confirmed", "alice")
    assert await s.audit("alice") == []
    assert (await s.load("alice")).version == 1
