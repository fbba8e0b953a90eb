"""Contract of L2 updates and supersessions: history, current-only reads, bad input."""

from __future__ import annotations

from datetime import timedelta

import pytest

from dream_memory_actor.errors import (
    InvalidContent,
    InvalidMetadata,
    InvalidQuery,
    MemoryNotFound,
    MemorySuperseded,
)
from dream_memory_actor.models import utcnow
from tests.conftest import Stores
from tests.contract.test_vector import spread, vec


async def test_update_keeps_the_previous_version(stores: Stores) -> None:
    v = stores.vector
    t0 = utcnow() - timedelta(hours=1)
    first = (
        await v.store(
            "alice", "deploys with helm", embedding=spread(0), metadata={"agent": "deploy"}, now=t0
        )
    ).memory
    new = await v.update(
        "alice",
        first.id,
        "deploys with argo cd",
        embedding=spread(1),
        now=t0 + timedelta(minutes=5),
    )
    assert new.id == first.id and new.content == "deploys with argo cd"
    assert new.metadata == {"agent": "deploy"}  # kept when not given
    assert (await v.get("alice", first.id)).content == "deploys with argo cd"
    assert await v.count("alice") == 1
    hist = await v.memory_history("alice", first.id)
    assert [h.content for h in hist] == ["deploys with helm", "deploys with argo cd"]
    assert hist[0].valid_to == t0 + timedelta(minutes=5) and hist[0].change == "update"
    assert hist[1].valid_to is None
    # re-embedded: the new vector is found, the old one no longer is
    hits = await v.search("alice", "zzz", embedding=spread(1))
    assert hits[0].memory.id == first.id and hits[0].cosine == pytest.approx(1.0, abs=1e-6)
    assert (await v.search("alice", "argo"))[0].memory.content == "deploys with argo cd"
    assert await v.search("alice", "helm") == []


async def test_update_replaces_metadata_when_given(stores: Stores) -> None:
    v = stores.vector
    m = (await v.store("alice", "a note", embedding=spread(0), metadata={"a": 1})).memory
    new = await v.update("alice", m.id, "a note, edited", embedding=spread(0), metadata={"b": 2})
    assert new.metadata == {"b": 2}
    assert (await v.get("alice", m.id)).metadata == {"b": 2}


async def test_supersede_closes_the_old_memory(stores: Stores) -> None:
    v = stores.vector
    old = (
        await v.store("alice", "prefers tabs", embedding=spread(2), metadata={"agent": "style"})
    ).memory
    other = (await v.store("alice", "uses vim", embedding=spread(3))).memory
    new = await v.supersede_memory(
        "alice",
        old.id,
        "prefers spaces",
        embedding=spread(4),
        by="alice",
        reason="changed her mind",
    )
    assert new.id != old.id and new.metadata == {"agent": "style"}
    with pytest.raises(MemoryNotFound):
        await v.get("alice", old.id)
    assert {m.id for m in await v.list("alice")} == {new.id, other.id}
    assert await v.count("alice") == 2
    assert [h.memory.id for h in await v.search("alice", "prefers")] == [new.id]
    assert all(h.memory.id != old.id for h in await v.search("alice", "x", embedding=spread(2)))
    for mid in (old.id, new.id):  # the chain from either end
        hist = await v.memory_history("alice", mid)
        assert [h.content for h in hist] == ["prefers tabs", "prefers spaces"]
        assert hist[0].superseded_by == new.id and hist[0].change == "supersede"
        assert hist[0].by == "alice" and hist[0].reason == "changed her mind"
        assert hist[1].valid_to is None and hist[1].memory_id == new.id


async def test_chain_of_updates_and_supersessions(stores: Stores) -> None:
    v = stores.vector
    a = (await v.store("alice", "v1", embedding=spread(5))).memory
    await v.update("alice", a.id, "v2", embedding=spread(5))
    b = await v.supersede_memory("alice", a.id, "v3", embedding=spread(6))
    await v.update("alice", b.id, "v4", embedding=spread(6))
    c = await v.supersede_memory("alice", b.id, "v5", embedding=spread(7))
    for mid in (a.id, b.id, c.id):
        assert [h.content for h in await v.memory_history("alice", mid)] == [
            "v1",
            "v2",
            "v3",
            "v4",
            "v5",
        ]
    assert [m.content for m in await v.list("alice")] == ["v5"]


async def test_superseded_id_is_refused(stores: Stores) -> None:
    v = stores.vector
    old = (await v.store("alice", "first", embedding=spread(0))).memory
    new = await v.supersede_memory("alice", old.id, "second", embedding=spread(1))
    with pytest.raises(MemorySuperseded) as err:
        await v.supersede_memory("alice", old.id, "third", embedding=spread(2))
    assert err.value.superseded_by == new.id
    with pytest.raises(MemorySuperseded):
        await v.get("alice", old.id)
    with pytest.raises(MemorySuperseded):
        await v.update("alice", old.id, "third", embedding=spread(2))
    assert [m.content for m in await v.list("alice")] == ["second"]
    assert len(await v.memory_history("alice", new.id)) == 2


async def test_unknown_and_foreign_ids_are_refused(stores: Stores) -> None:
    v = stores.vector
    bob = (await v.store("bob", "bob's note", embedding=spread(0))).memory
    for mid in (bob.id, "00000000-0000-4000-8000-000000000000", "not-a-uuid"):
        with pytest.raises(MemoryNotFound):
            await v.update("alice", mid, "hijack", embedding=spread(1))
        with pytest.raises(MemoryNotFound):
            await v.supersede_memory("alice", mid, "hijack", embedding=spread(1))
        with pytest.raises(MemoryNotFound):
            await v.memory_history("alice", mid)
    assert (await v.get("bob", bob.id)).content == "bob's note"
    assert await v.count("alice") == 0
    assert len(await v.memory_history("bob", bob.id)) == 1


async def test_bad_update_input_writes_nothing(stores: Stores) -> None:
    v = stores.vector
    m = (await v.store("alice", "kept", embedding=spread(0), metadata={"a": 1})).memory
    with pytest.raises(InvalidContent):
        await v.update("alice", m.id, "   ", embedding=spread(1))
    with pytest.raises(InvalidMetadata):
        await v.update("alice", m.id, "x", embedding=spread(1), metadata={"merged_from": []})
    with pytest.raises(InvalidQuery):
        await v.supersede_memory("alice", m.id, "x", embedding=spread(1), by="")
    with pytest.raises(InvalidQuery):
        await v.supersede_memory("alice", m.id, "x", embedding=spread(1), reason="r" * 5000)
    assert (await v.get("alice", m.id)).content == "kept"
    assert len(await v.memory_history("alice", m.id)) == 1


async def test_update_and_supersede_are_idempotent(stores: Stores) -> None:
    v = stores.vector
    m = (await v.store("alice", "one", embedding=spread(0))).memory
    u1 = await v.update("alice", m.id, "two", embedding=spread(0), op_id="u")
    u2 = await v.update("alice", m.id, "two", embedding=spread(0), op_id="u")
    assert u1 == u2
    s1 = await v.supersede_memory("alice", m.id, "three", embedding=spread(1), op_id="s")
    s2 = await v.supersede_memory("alice", m.id, "three", embedding=spread(1), op_id="s")
    assert s1 == s2
    assert [h.content for h in await v.memory_history("alice", m.id)] == ["one", "two", "three"]
    assert await v.count("alice") == 1


async def test_update_in_keyword_mode(keyword_stores: Stores) -> None:
    v = keyword_stores.vector
    m = (await v.store("alice", "deploys with helm")).memory
    await v.update("alice", m.id, "deploys with argo")
    assert [h.memory.content for h in await v.search("alice", "argo")] == ["deploys with argo"]
    assert await v.search("alice", "helm") == []
    new = await v.supersede_memory("alice", m.id, "deploys with flux")
    assert [h.memory.id for h in await v.search("alice", "deploys")] == [new.id]


async def test_history_keeps_merge_records_out_of_successor(stores: Stores) -> None:
    v = stores.vector
    a = await v.store("alice", "went live on Kubernetes", embedding=vec(1, 0.1))
    merged = await v.store("alice", "went live on K8s", embedding=vec(1, 0.2))
    assert merged.merged
    new = await v.supersede_memory("alice", a.memory.id, "went live on Nomad", embedding=vec(0, 1))
    assert "merged_from" not in new.metadata
    hist = await v.memory_history("alice", new.id)
    # the content the merge replaced, then the merged memory the supersession closed
    assert [(h.change, h.content) for h in hist[:2]] == [
        ("merge", "went live on Kubernetes"), ("supersede", "went live on K8s")]
    assert hist[1].metadata["merged_from"] == ["went live on Kubernetes"]


async def test_a_memory_history_reads_the_same_twice(stores: Stores) -> None:
    v = stores.vector
    kept = await v.store("alice", "the sprint ends on Friday", embedding=vec(1))
    await v.update("alice", kept.memory.id, "the sprint ends on Thursday", embedding=vec(1))
    first = await v.memory_history("alice", kept.memory.id)
    assert first == await v.memory_history("alice", kept.memory.id)
    await v.update("alice", kept.memory.id, "the sprint ends on Monday", embedding=vec(1))
    # the version that was current is closed now: another version, with another id
    assert first[-1].id not in {h.id for h in await v.memory_history("alice", kept.memory.id)}
