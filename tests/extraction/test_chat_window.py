"""The L3 chat window and the audit trail in the structured store (memory and PostgreSQL)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from dream_memory_actor import MemoryEngine
from dream_memory_actor.errors import AuditNotWritable, InvalidContent, InvalidOwnerId, InvalidQuery
from dream_memory_actor.models import AuditEntry, ChatMessage, MemoryPendingItem
from dream_memory_actor.storage.base import StructuredStore
from dream_memory_actor.storage.ops import AddAudit, AddPending, RemovePending
from tests.conftest import fresh_schema, make_stores
from tests.extraction.conftest import EXTRACTION_BACKENDS, service


@pytest.fixture(params=EXTRACTION_BACKENDS)
async def store(request: pytest.FixtureRequest) -> AsyncIterator[StructuredStore]:
    stores = await make_stores(request.param, request, dim=None)
    try:
        yield stores.structured
    finally:
        await stores.structured.close()
        await stores.vector.close()


def msgs(*texts: str, role: str = "user") -> list[ChatMessage]:
    return [ChatMessage(role=role, content=t) for t in texts]


def texts(messages: tuple[ChatMessage, ...]) -> list[str]:
    return [m.content for m in messages]


async def test_order_and_window_size(store: StructuredStore) -> None:
    first = await store.append_messages("alice", "c1", msgs("m1", "m2", "m3"), window=4)
    assert texts(first.window) == ["m1", "m2", "m3"] and first.overflow == ()
    second = await store.append_messages("alice", "c1", msgs("m4", "m5", "m6"), window=4)
    assert texts(second.window) == ["m3", "m4", "m5", "m6"]
    assert texts(second.overflow) == ["m1", "m2"]
    assert texts(await store.load_window("alice", "c1")) == ["m3", "m4", "m5", "m6"]
    # more new messages than the window: the oldest new ones overflow too, in order
    third = await store.append_messages("alice", "c1", msgs(*"abcdef"), window=4)
    assert texts(third.window) == list("cdef")
    assert texts(third.overflow) == ["m3", "m4", "m5", "m6", "a", "b"]


async def test_a_retried_append_is_applied_once(store: StructuredStore) -> None:
    first = await store.append_messages("alice", "c1", msgs("m1", "m2", "m3"), window=2,
                                        op_id="append-1")
    assert texts(first.window) == ["m2", "m3"] and texts(first.overflow) == ["m1"]
    again = await store.append_messages("alice", "c1", msgs("m1", "m2", "m3"), window=2,
                                        op_id="append-1")
    assert texts(again.window) == ["m2", "m3"] and again.overflow == ()
    other = await store.append_messages("alice", "c1", msgs("m4"), window=2, op_id="append-2")
    assert texts(other.window) == ["m3", "m4"] and texts(other.overflow) == ["m2"]
    # op ids belong to their owner: bob's append with the same id is his first
    bobs = await store.append_messages("bob", "c1", msgs("b1"), window=2, op_id="append-1")
    assert texts(bobs.window) == ["b1"]
    with pytest.raises(InvalidQuery):
        await store.append_messages("alice", "c1", msgs("x"), window=2, op_id="")
    assert texts(await store.load_window("alice", "c1")) == ["m3", "m4"]


async def test_messages_keep_role_and_time(store: StructuredStore) -> None:
    sent = msgs("question") + msgs("answer", role="assistant")
    await store.append_messages("alice", "c1", sent, window=20)
    assert await store.load_window("alice", "c1") == tuple(sent)


async def test_a_smaller_window_trims(store: StructuredStore) -> None:
    await store.append_messages("alice", "c1", msgs(*"abcde"), window=20)
    trimmed = await store.append_messages("alice", "c1", [], window=2)
    assert texts(trimmed.window) == ["d", "e"] and texts(trimmed.overflow) == list("abc")


async def test_conversations_and_owners_are_apart(store: StructuredStore) -> None:
    await store.append_messages("alice", "c1", msgs("a1"), window=5)
    await store.append_messages("alice", "c2", msgs("a2"), window=5)
    await store.append_messages("bob", "c1", msgs("b1"), window=5)
    assert texts(await store.load_window("alice", "c1")) == ["a1"]
    assert texts(await store.load_window("alice", "c2")) == ["a2"]
    assert texts(await store.load_window("bob", "c1")) == ["b1"]
    assert await store.load_window("carol", "c1") == ()


async def test_end_conversation_returns_and_clears(store: StructuredStore) -> None:
    await store.append_messages("alice", "c1", msgs("x", "y"), window=5)
    assert texts(await store.end_conversation("alice", "c1")) == ["x", "y"]
    assert await store.load_window("alice", "c1") == ()
    assert await store.end_conversation("alice", "c1") == ()


async def test_concurrent_appends_lose_nothing(store: StructuredStore) -> None:
    results = await asyncio.gather(*(
        store.append_messages("alice", "c1", msgs(f"{i}a", f"{i}b"), window=5)
        for i in range(10)))
    window = await store.load_window("alice", "c1")
    overflow = [m for r in results for m in r.overflow]
    assert len(window) == 5
    assert sorted(texts(window) + [m.content for m in overflow]) == sorted(
        f"{i}{s}" for i in range(10) for s in "ab")
    for i in range(10):  # the two messages of one call stay in order
        seen = [t for t in texts(window) + [m.content for m in overflow] if t[:-1] == str(i)]
        assert len(seen) == 2


async def test_arguments_are_checked(store: StructuredStore) -> None:
    with pytest.raises(InvalidOwnerId):
        await store.append_messages("bad owner", "c1", msgs("x"), window=5)
    with pytest.raises(InvalidQuery):
        await store.append_messages("alice", "bad conv!", msgs("x"), window=5)
    with pytest.raises(InvalidQuery):
        await store.append_messages("alice", "c1", msgs("x"), window=0)
    with pytest.raises(InvalidQuery):
        await store.append_messages("alice", "c1", ["x"], window=5)  # type: ignore[list-item]
    with pytest.raises(InvalidContent):
        await store.append_messages("alice", "c1", msgs("  "), window=5)
    with pytest.raises(InvalidQuery):
        await store.audit("alice", limit=0)
    assert await store.load_window("alice", "c1") == ()


async def test_audit_entries_are_kept_atomically_once(store: StructuredStore) -> None:
    item = MemoryPendingItem(kind="fact", content="The user likes tea", confidence=0.6)
    other = MemoryPendingItem(kind="rule", content="Use tabs", confidence=0.7)
    await store.apply("alice", [AddPending(item), AddPending(other)])
    first = await store.decide("alice", item.id, "rejected", "alice")
    assert first is not None
    # the item is gone: a later decision writes nothing, the first decision stands
    assert await store.decide("alice", item.id, "confirmed", "bob") is None
    with pytest.raises(AuditNotWritable):  # nor can apply write one
        await store.apply("alice", [AddAudit(AuditEntry(
            pending_id=item.id, action="confirmed", by="bob", item=item, written="x"))])
    second = await store.decide("alice", other.id, "confirmed", "alice")
    assert second is not None and second[1].written == "Use tabs"
    assert await store.audit("alice") == [second[1], first[1]]
    assert await store.audit("alice", limit=1) == [second[1]]
    assert await store.audit("alice", pending_id=item.id) == [first[1]]
    assert await store.audit("bob") == []
    # a failing apply records no audit entry
    lost = AuditEntry(pending_id="gone", action="rejected", by="alice", item=other)
    with pytest.raises(AuditNotWritable):
        await store.apply("alice", [RemovePending("gone"), AddAudit(lost)])
    assert await store.audit("alice", pending_id="gone") == []
    with pytest.raises(AuditNotWritable):
        await store.apply("alice", [AddAudit("not an entry")])  # type: ignore[arg-type]


async def test_pending_evidence_round_trips(store: StructuredStore) -> None:
    item = MemoryPendingItem(kind="fact", content="The user likes tea", confidence=0.6,
                             evidence="I like tea")
    snap = await store.apply("alice", [AddPending(item)])
    assert snap.pending == (item,)
    assert (await store.load("alice")).pending[0].evidence == "I like tea"


async def test_overflow_and_finished_conversations_go_to_extraction(
        store: StructuredStore) -> None:
    from dream_memory_actor.config import MemorySettings
    from dream_memory_actor.storage.memory import InMemoryVectorStore

    engine = MemoryEngine(MemorySettings(backend="memory"), store, InMemoryVectorStore())
    svc = service(engine, chat_window=2)
    appended, report = await svc.observe("alice", "c1", msgs("From now on, use tabs.", "ok"))
    assert report is None and appended.overflow == ()
    appended, report = await svc.observe("alice", "c1", msgs("Remember that I use vim.", "k"))
    assert texts(appended.overflow) == ["From now on, use tabs.", "ok"]
    assert report is not None and report.counts["written"] == 1
    final = await svc.finish("alice", "c1")
    assert final is not None and final.counts["written"] == 1
    snap = await engine.snapshot("alice")
    assert [r.content for r in snap.rules] == ["Use tabs"]
    assert [f.content for f in snap.facts] == ["I use vim"]
    assert await svc.finish("alice", "c1") is None


@pytest.mark.postgres
async def test_postgres_window_survives_a_reopen(pg_dsn: str) -> None:
    from dream_memory_actor.config import MemorySettings
    from dream_memory_actor.storage import open_stores

    settings = MemorySettings(backend="postgres", postgres_dsn=pg_dsn,
                              postgres_schema=fresh_schema(), postgres_pool_max=2)
    for round_ in range(2):
        structured, vector = await open_stores(settings, None)
        await structured.setup()
        try:
            if round_ == 0:
                await structured.append_messages("alice", "c1", msgs("a", "b"), window=5)
            else:
                assert texts(await structured.load_window("alice", "c1")) == ["a", "b"]
                from dream_memory_actor.storage.postgres import PostgresStructuredStore
                from dream_memory_actor.storage.postgres.migrations import MIGRATIONS

                assert isinstance(structured, PostgresStructuredStore)
                async with structured.backend.connection() as conn:
                    versions = await conn.fetch(
                        f"SELECT version FROM {settings.postgres_schema}.schema_migrations "
                        "ORDER BY version")
                assert [r["version"] for r in versions] == [v for v, _, _ in MIGRATIONS]
        finally:
            await structured.close()
            await vector.close()
