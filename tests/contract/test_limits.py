"""Size caps and hostile input at the stores, on every backend: the same typed answer,
nothing written, and caps that hold after merges and over many calls."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from dream_memory_actor.errors import (
    DreamMemoryError,
    DuplicateId,
    InvalidContent,
    InvalidInput,
    InvalidMetadata,
    InvalidQuery,
    InvalidStatusKey,
    MemoryNotFound,
)
from dream_memory_actor.limits import DEFAULT_LIMITS, Limits
from dream_memory_actor.models import MemoryPendingItem
from dream_memory_actor.storage.ops import AddFact, AddPending, AddRule, DeleteStatus, SetStatus
from dream_memory_actor.validation import MAX_METADATA_DEPTH, MAX_OFFSET
from tests.conftest import Stores
from tests.contract.test_vector import vec


def _user_keys(meta: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in meta.items() if k not in ("merged_from", "merged_at", "merge_count")}


async def _state(s: Stores, owner: str) -> tuple[Any, ...]:
    snap = await s.structured.load(owner)
    mems = await s.vector.list(owner, limit=1000)
    return (snap.version, snap.rules, snap.facts, dict(snap.status), snap.pending,
            [(m.id, m.content, m.metadata) for m in mems])


async def test_merges_keep_metadata_and_history_within_the_caps(stores: Stores) -> None:
    v = stores.vector
    v.limits = replace(DEFAULT_LIMITS, metadata_keys=8, metadata_bytes=600, merge_history=5,
                       merge_history_bytes=200)
    for i in range(30):
        meta = {f"k{i}_{j}": "v" * 20 for j in range(4)}
        r = await v.store("alice", "went live on Kubernetes" + "!" * i + " " + "x" * 30,
                          embedding=vec(1, 0.01 * (i % 3)), metadata=meta)
        assert r.merged is (i > 0)
    got = await v.get("alice", r.memory.id)
    user = _user_keys(got.metadata)
    assert len(user) <= 8
    assert len(json.dumps(user, ensure_ascii=False).encode()) <= 600
    # the newest keys win, the oldest are dropped first
    assert {f"k29_{j}" for j in range(4)} <= set(user) and "k0_0" not in user
    history = got.metadata["merged_from"]
    assert 0 < len(history) <= 5 and sum(len(h.encode()) for h in history) <= 200
    assert history[-1].startswith("went live on Kubernetes" + "!" * 28 + " ")
    assert got.metadata["merge_count"] == 29
    [hit] = await v.search("alice", "kubernetes", embedding=vec(1))
    assert hit.memory.metadata == got.metadata


async def test_default_caps_hold_after_many_merges(stores: Stores) -> None:
    """Many near-duplicates, each with the most keys a call may carry: the merged memory
    never grows past the defaults."""
    v = stores.vector
    for i in range(12):
        meta = {f"m{i}_{j}": j for j in range(DEFAULT_LIMITS.metadata_keys)}
        text = "deploy note" + "!?"[i % 2] + " " + "y" * 8000
        r = await v.store("alice", text, embedding=vec(1),
                          metadata=meta)
    got = await v.get("alice", r.memory.id)
    user = _user_keys(got.metadata)
    assert len(user) <= DEFAULT_LIMITS.metadata_keys
    assert len(json.dumps(user, ensure_ascii=False).encode()) <= DEFAULT_LIMITS.metadata_bytes
    history = got.metadata["merged_from"]
    assert sum(len(h.encode()) for h in history) <= DEFAULT_LIMITS.merge_history_bytes
    assert len(history) == DEFAULT_LIMITS.merge_history_bytes // len(history[0].encode())


async def test_too_many_metadata_keys_in_one_call(stores: Stores) -> None:
    meta = {f"k{j}": j for j in range(DEFAULT_LIMITS.metadata_keys + 1)}
    with pytest.raises(InvalidMetadata, match="keys"):
        await stores.vector.store("alice", "note", metadata=meta)
    assert await stores.vector.count("alice") == 0


async def test_status_keys_per_owner_are_capped(stores: Stores) -> None:
    s = stores.structured
    s.limits = replace(DEFAULT_LIMITS, status_keys=3)
    await s.apply("alice", [SetStatus(f"k{i}", "v") for i in range(3)])
    before = await _state(stores, "alice")
    with pytest.raises(InvalidStatusKey, match="max_status_keys"):
        await s.set_status("alice", "k3", "v")
    with pytest.raises(InvalidStatusKey):  # all or nothing: the first op is not kept either
        await s.apply("alice", [SetStatus("k0", "changed"), SetStatus("k4", "v")])
    assert await _state(stores, "alice") == before
    await s.set_status("alice", "k0", "updated")  # updating a key adds none
    snap = await s.apply("alice", [DeleteStatus("k1"), SetStatus("k9", "v")])
    assert sorted(snap.status) == ["k0", "k2", "k9"]
    # an owner over a lowered cap keeps its keys and may still update them
    s.limits = replace(DEFAULT_LIMITS, status_keys=1)
    snap = await s.set_status("alice", "k2", "again")
    assert len(snap.status) == 3
    with pytest.raises(InvalidStatusKey):
        await s.set_status("alice", "k5", "v")


def _pending(**kw: Any) -> MemoryPendingItem:
    base: dict[str, Any] = {"kind": "fact", "content": "the user uses Helm", "confidence": 0.7}
    base.update(kw)
    return MemoryPendingItem(**base)


@pytest.mark.parametrize("field", ["evidence", "source"])
async def test_pending_side_fields_are_capped(stores: Stores, field: str) -> None:
    s = stores.structured
    cap = DEFAULT_LIMITS.pending_field_bytes
    before = await _state(stores, "alice")
    for bad in ("é" * (cap // 2 + 1), "x" * (5 * 1024 * 1024), "a\x00b", "a\ud800b"):
        with pytest.raises(InvalidContent):
            await s.apply("alice", [AddPending(_pending(**{field: bad}))])
    assert await _state(stores, "alice") == before
    snap = await s.apply("alice", [AddPending(_pending(**{field: "é" * (cap // 2)}))])
    assert getattr(snap.pending[0], field) == "é" * (cap // 2)


async def _closed(stores: Stores) -> Stores:
    await stores.structured.close()
    await stores.vector.close()
    return stores


HOSTILE = ["a\x00b", "a\ud800b", "\udcff"]


@pytest.mark.parametrize("text", HOSTILE)
async def test_nul_and_surrogates_are_refused_before_any_io(stores: Stores, text: str) -> None:
    """Each text field: the same InvalidInput on every backend, raised with the store
    closed, so no backend saw the value."""
    s = await _closed(stores)
    item = _pending()
    calls = [
        lambda: s.vector.store("alice", text),
        lambda: s.vector.search("alice", text),
        lambda: s.vector.store("alice", "ok", metadata={"k": text}),
        lambda: s.vector.store("alice", "ok", metadata={text: 1}),
        lambda: s.vector.store("alice", "ok", metadata={"k": [{"n": text}]}),
        lambda: s.vector.get("alice", text),
        lambda: s.vector.delete("alice", text),
        lambda: s.structured.add_rule("alice", text),
        lambda: s.structured.add_fact("alice", "ok", source=text),
        lambda: s.structured.set_status("alice", "k", text),
        lambda: s.structured.apply("alice", [AddRule("ok", id=text)]),
        lambda: s.structured.apply("alice", [AddPending(_pending(evidence=text))]),
        lambda: s.structured.apply("alice", [AddPending(_pending(content=text))]),
        lambda: s.structured.decide("alice", item.id, "confirmed", "ann", edited=text),
        lambda: s.structured.decide("alice", item.id, "confirmed", text),
        lambda: s.structured.audit("alice", pending_id=text),
    ]
    for call in calls:
        with pytest.raises(InvalidInput):
            await call()


async def test_nul_and_surrogates_write_nothing(stores: Stores) -> None:
    before = await _state(stores, "alice")
    for text in HOSTILE:
        for call in (stores.vector.store("alice", text),
                     stores.vector.store("alice", "ok", metadata={"k": text}),
                     stores.structured.set_status("alice", "k", text),
                     stores.structured.add_rule("alice", "ok", source=text)):
            with pytest.raises(InvalidInput):
                await call
    assert await _state(stores, "alice") == before


async def test_deeply_nested_metadata_is_refused(stores: Stores) -> None:
    deep: Any = "leaf"
    for _ in range(2000):
        deep = {"d": deep}
    with pytest.raises(InvalidMetadata, match="deeper"):
        await stores.vector.store("alice", "note", metadata={"k": deep})
    lists: Any = 1
    for _ in range(MAX_METADATA_DEPTH):
        lists = [lists]
    with pytest.raises(InvalidMetadata):
        await stores.vector.store("alice", "note", metadata={"k": lists})
    assert await stores.vector.count("alice") == 0
    ok: Any = 1
    for _ in range(MAX_METADATA_DEPTH - 2):
        ok = [ok]
    r = await stores.vector.store("alice", "note", metadata={"k": ok})
    assert r.memory.metadata == {"k": ok}


@pytest.mark.parametrize("memory_id", [None, 7, "", "x" * 129, b"id"])
async def test_get_with_a_bad_id_is_typed(stores: Stores, memory_id: Any) -> None:
    with pytest.raises(InvalidQuery):
        await stores.vector.get("alice", memory_id)


async def test_get_of_an_unknown_id_is_not_found(stores: Stores) -> None:
    with pytest.raises(MemoryNotFound):
        await stores.vector.get("alice", "no-such-memory")


@pytest.mark.parametrize("offset", [MAX_OFFSET + 1, 2**63, 2**64, -1])
async def test_huge_offsets_are_typed_on_every_backend(stores: Stores, offset: int) -> None:
    await stores.vector.store("alice", "note")
    with pytest.raises(InvalidQuery, match="offset"):
        await stores.vector.list("alice", offset=offset)
    assert await stores.vector.list("alice", offset=MAX_OFFSET) == []


async def test_ids_are_scoped_by_owner(stores: Stores) -> None:
    """Another owner's rule, fact or pending id may be reused; nothing says it exists."""
    s = stores.structured
    await s.apply("bob", [AddRule("bob's rule", id="r1"), AddFact("bob's fact", id="f1"),
                          AddPending(_pending(id="p1", content="bob's pending"))])
    snap = await s.apply("alice", [AddRule("alice's rule", id="r1"),
                                   AddFact("alice's fact", id="f1"),
                                   AddPending(_pending(id="p1", content="alice's pending"))])
    assert [(r.id, r.content) for r in snap.rules] == [("r1", "alice's rule")]
    assert [(f.id, f.content) for f in snap.facts] == [("f1", "alice's fact")]
    assert [(p.id, p.content) for p in snap.pending] == [("p1", "alice's pending")]
    bob = await s.load("bob")
    assert [r.content for r in bob.rules] == ["bob's rule"]
    assert [p.content for p in bob.pending] == ["bob's pending"]


@pytest.mark.parametrize("op", [
    lambda: AddRule("another rule", id="x1"),
    lambda: AddFact("another fact", id="x2"),
    lambda: AddPending(_pending(id="x3", content="another pending")),
])
async def test_an_id_reused_for_other_content_is_refused(stores: Stores, op: Any) -> None:
    s = stores.structured
    await s.apply("alice", [AddRule("a rule", id="x1"), AddFact("a fact", id="x2"),
                            AddPending(_pending(id="x3"))])
    before = await _state(stores, "alice")
    with pytest.raises(DuplicateId, match="alice"):
        await s.apply("alice", [SetStatus("k", "v"), op()])
    assert await _state(stores, "alice") == before
    # the same id with the same content is the same item: nothing to do, no error
    again = await s.apply("alice", [AddRule("a rule", id="x1"), AddFact("a fact", id="x2"),
                                    AddPending(_pending(id="x3"))])
    assert (len(again.rules), len(again.facts), len(again.pending)) == (1, 1, 1)


async def test_limits_come_from_the_settings() -> None:
    from dream_memory_actor.config import MemorySettings
    from dream_memory_actor.storage import open_stores

    settings = MemorySettings(backend="memory", max_status_keys=2, max_metadata_keys=3,
                              max_pending_field_bytes=9000, max_merge_history=1,
                              max_merge_history_bytes=50, max_metadata_bytes=300)
    assert settings.limits == Limits(300, 3, 1, 50, 2, 9000)
    structured, vector = await open_stores(settings, None)
    assert structured.limits == vector.limits == settings.limits
    with pytest.raises(InvalidMetadata):
        await vector.store("alice", "x", metadata={"a": 1, "b": 2, "c": 3, "d": 4})
    await structured.apply("alice", [SetStatus("a", "1"), SetStatus("b", "2")])
    with pytest.raises(DreamMemoryError):
        await structured.set_status("alice", "c", "3")
