"""Contract of the L3 chat window and the HITL audit trail: every backend must pass all of it."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from dream_memory_actor.errors import (
    InvalidContent,
    InvalidOwnerId,
    InvalidQuery,
    PendingItemNotFound,
)
from dream_memory_actor.models import AuditEntry, ChatMessage, MemoryPendingItem, utcnow
from dream_memory_actor.storage.base import MAX_WINDOW
from dream_memory_actor.storage.ops import AddAudit, AddFact, AddPending, RemovePending
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


async def test_audit_is_written_with_the_apply(stores: Stores) -> None:
    s = stores.structured
    item = pending()
    await s.apply("alice", [AddPending(item)])
    e = entry(item, written="The user likes green tea")
    snap = await s.apply("alice", [RemovePending(item.id), AddFact("The user likes green tea"),
                                   AddAudit(e)])
    assert snap.version == 2 and snap.pending == ()
    assert [f.content for f in snap.facts] == ["The user likes green tea"]
    assert await s.audit("alice") == [e]
    (loaded,) = await s.audit("alice", pending_id=item.id)
    assert loaded == e and loaded.item == item and loaded.written == e.written
    assert loaded.at == e.at and loaded.by == "alice" and loaded.action == "confirmed"
    # an apply of audit entries alone moves the version, the snapshot is unchanged
    other = pending("Uses tabs")
    after = await s.apply("alice", [AddAudit(entry(other, "rejected"))])
    assert after.version == 3 and after.facts == snap.facts and after.pending == ()


async def test_failed_apply_writes_no_audit_entry(stores: Stores) -> None:
    s = stores.structured
    item = pending()
    await s.apply("alice", [AddPending(item)])
    before = await s.load("alice")
    lost = entry(pending("gone"), "rejected")
    with pytest.raises(PendingItemNotFound):
        await s.apply("alice", [AddAudit(lost), RemovePending("gone")])
    with pytest.raises(PendingItemNotFound):
        await s.apply("alice", [AddAudit(entry(item)), AddFact("never"), RemovePending(item.id),
                                RemovePending(item.id)])
    assert await s.audit("alice") == []
    assert await s.audit("alice", pending_id=item.id) == []
    assert await s.load("alice") == before
    # the failures did not claim the pending id: a later decision is recorded
    ok = entry(item, "rejected")
    await s.apply("alice", [RemovePending(item.id), AddAudit(ok)])
    assert await s.audit("alice") == [ok]


async def test_first_audit_entry_per_pending_id_wins(stores: Stores) -> None:
    s = stores.structured
    item, other = pending(), pending("Use tabs")
    first = entry(item, "rejected", by="alice")
    await s.apply("alice", [AddAudit(first)])
    await s.apply("alice", [AddAudit(entry(item, "confirmed", by="bob", written="x"))])
    # within one apply too: the earlier operation wins
    a, b = entry(other, "confirmed", by="carol"), entry(other, "rejected", by="dave")
    await s.apply("alice", [AddAudit(a), AddAudit(b)])
    assert await s.audit("alice") == [a, first]
    assert await s.audit("alice", pending_id=item.id) == [first]
    assert await s.audit("alice", pending_id=other.id) == [a]


async def test_concurrent_decisions_on_one_item_keep_one(stores: Stores) -> None:
    s = stores.structured
    item = pending()
    entries = [entry(item, by=f"user{i}") for i in range(8)]
    await asyncio.gather(*(s.apply("alice", [AddAudit(e)]) for e in entries))
    (kept,) = await s.audit("alice")
    assert kept in entries
    assert (await s.load("alice")).version == 8


async def test_audit_newest_first_with_limit_and_filter(stores: Stores) -> None:
    s = stores.structured
    items = [pending(f"fact {i}") for i in range(5)]
    recorded = []
    for i, it in enumerate(items):
        e = entry(it, "confirmed" if i % 2 else "rejected", by=f"user{i}")
        await s.apply("alice", [AddAudit(e)])
        recorded.append(e)
    two_more = [entry(pending("x"), by="eve"), entry(pending("y"), by="eve")]
    await s.apply("alice", [AddAudit(e) for e in two_more])  # one apply: op order
    recorded += two_more
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
    item = pending()
    mine, theirs = entry(item, by="alice"), entry(item, "rejected", by="bob")
    await s.apply("alice", [AddAudit(mine)])
    await s.apply("bob", [AddAudit(theirs)])  # the same pending id, another owner
    assert await s.audit("alice") == [mine]
    assert await s.audit("bob") == [theirs]


async def test_retried_apply_with_audit_is_applied_once(stores: Stores) -> None:
    s = stores.structured
    item, other = pending(), pending("Use tabs")
    await s.apply("alice", [AddPending(item), AddPending(other)])
    e = entry(item, written="The user likes tea")
    first = await s.apply("alice", [RemovePending(item.id), AddFact("The user likes tea"),
                                     AddAudit(e)], op_id="decide-1")
    again = await s.apply("alice", [RemovePending(item.id), AddFact("The user likes tea"),
                                     AddAudit(e)], op_id="decide-1")
    assert again.version == first.version == 2
    # a retry under the same id with other operations applies nothing either
    await s.apply("alice", [RemovePending(other.id), AddAudit(entry(other))],
                  op_id="decide-1")
    assert await s.audit("alice") == [e]
    snap = await s.load("alice")
    assert snap.version == 2 and [p.id for p in snap.pending] == [other.id]


async def test_audit_arguments_are_checked_nothing_written(stores: Stores) -> None:
    s = stores.structured
    item = pending()
    with pytest.raises(InvalidQuery):
        await s.audit("alice", limit=0)
    with pytest.raises(InvalidQuery):
        await s.audit("alice", pending_id="")
    with pytest.raises(InvalidQuery):
        await s.apply("alice", [AddAudit("not an entry")])  # type: ignore[arg-type]
    with pytest.raises(InvalidQuery):
        await s.apply("alice", [AddAudit(entry(item)), AddAudit(entry(item, by=""))])
    with pytest.raises(InvalidContent):
        await s.apply("alice", [AddAudit(entry(item, written="  "))])
    assert await s.audit("alice") == []
    assert (await s.load("alice")).version == 0
