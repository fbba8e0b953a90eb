"""Contract of forgetting an owner: every layer, every backend, nothing left behind."""

from __future__ import annotations

import pytest

from dream_memory_actor.engine.erasure import forget_owner
from dream_memory_actor.errors import InvalidOwnerId, InvalidQuery
from dream_memory_actor.models import ChatMessage, MemoryPendingItem
from dream_memory_actor.storage.ops import AddFact, AddPending, AddRule, SetStatus
from dream_memory_actor.storage.tombstones import SELF
from tests.conftest import DIM, Stores
from tests.support.residue import stored_texts

GONE = "erased-owner-7f3a"
KEPT = "kept-owner-2b9c"
#: Marker words in the erased owner's texts; none may be found anywhere afterwards.
MARKERS = ("zanzibarite", "quokkaphile", "ptarmiganic", "xylocarpa", "wombatine",
           "narwhalist", "okapiform")


def vec(i: int) -> list[float]:
    return [1.0 if j == i % DIM else 0.0 for j in range(DIM)]


async def fill(stores: Stores, owner: str, word: str = "") -> None:
    """Rules, facts, status, a pending item, a decided item (audit), memories (with and
    without op ids), a chat window: something on every layer."""
    s, v = stores.structured, stores.vector
    w = word or owner
    await s.apply(owner, [AddRule(f"rule {w} {MARKERS[0] if word else ''}".strip()),
                          AddFact(f"fact {w} {MARKERS[1] if word else ''}".strip()),
                          SetStatus("project", f"{w}-{MARKERS[2] if word else 'p'}")],
                  op_id=f"op-{owner}")
    waiting = MemoryPendingItem(kind="fact", content=f"pending {w}", confidence=0.6)
    decided = MemoryPendingItem(kind="rule", content=f"decided {w} {MARKERS[3] if word else ''}",
                                confidence=0.7)
    await s.apply(owner, [AddPending(waiting), AddPending(decided)])
    assert await s.decide(owner, decided.id, "confirmed", "reviewer") is not None
    await v.store(owner, f"memory one {w} {MARKERS[4] if word else ''}", embedding=vec(1),
                  metadata={"agent": w}, op_id=f"store-{owner}")
    await v.store(owner, f"memory two {w} {MARKERS[5] if word else ''}", embedding=vec(2))
    await s.append_messages(owner, "c1", [ChatMessage(
        role="user", content=f"chat {w} {MARKERS[6] if word else ''}")], window=5,
        op_id=f"chat-{owner}")


async def test_forget_removes_every_layer_and_leaves_one_tombstone(stores: Stores) -> None:
    s, v = stores.structured, stores.vector
    await fill(stores, GONE, word="secret")
    await fill(stores, KEPT)
    kept_before = await s.load(KEPT)

    tomb = await forget_owner(s, v, GONE, by="admin", op_id="forget-1")
    assert tomb.by == "admin"
    assert tomb.counts == {"rules": 2, "facts": 1, "status": 1, "pending": 1, "memories": 2,
                           "audit": 1}

    snap = await s.load(GONE)
    assert (snap.version, snap.rules, snap.facts, dict(snap.status), snap.pending) == (
        0, (), (), {}, ())
    assert await v.count(GONE) == 0 and await v.list(GONE) == []
    assert await v.search(GONE, "memory secret", embedding=vec(1)) == []
    assert await s.load_window(GONE, "c1") == ()
    assert await s.audit(GONE) == []

    # nothing stored anywhere names the owner or quotes its contents
    residue = [t for t in await stored_texts(stores)
               if GONE in t or any(m in t for m in MARKERS) or "secret" in t]
    assert residue == []

    # the other owner is untouched
    after = await s.load(KEPT)
    assert (after.rules, after.facts, after.status, after.pending) == (
        kept_before.rules, kept_before.facts, kept_before.status, kept_before.pending)
    assert await v.count(KEPT) == 2 and len(await s.audit(KEPT)) == 1
    assert len(await s.load_window(KEPT, "c1")) == 1

    # a retry is answered with the first tombstone; there is one in all
    again = await forget_owner(s, v, GONE, by="admin", op_id="forget-1")
    assert again == tomb
    assert await s.tombstones() == [tomb]


async def test_forgotten_owner_starts_afresh(stores: Stores) -> None:
    s, v = stores.structured, stores.vector
    await fill(stores, GONE)
    await forget_owner(s, v, GONE, by=GONE)
    # old op ids are forgotten too: the same op id applies again
    snap = await s.apply(GONE, [AddRule("a new rule")], op_id=f"op-{GONE}")
    assert [r.content for r in snap.rules] == ["a new rule"] and snap.version == 1
    again = await v.store(GONE, "memory one again", embedding=vec(1), op_id=f"store-{GONE}")
    assert again.merged is False and await v.count(GONE) == 1


async def test_tombstone_does_not_name_the_owner(stores: Stores) -> None:
    s, v = stores.structured, stores.vector
    await fill(stores, GONE)
    tomb = await forget_owner(s, v, GONE, by=GONE)  # the owner erased itself
    assert tomb.by == SELF and GONE not in tomb.model_dump_json()
    # an unknown owner: nothing to remove, a tombstone of zeros
    empty = await forget_owner(s, v, "never-seen", by="admin")
    assert set(empty.counts.values()) == {0}
    assert await s.tombstones(limit=1) == [empty]


async def test_forget_bad_input_writes_nothing(stores: Stores) -> None:
    s, v = stores.structured, stores.vector
    await fill(stores, KEPT)
    for owner in ("", "{x}", "a" * 200, None):
        with pytest.raises(InvalidOwnerId):
            await s.forget(owner, by="admin")  # type: ignore[arg-type]
        with pytest.raises(InvalidOwnerId):
            await v.forget(owner)  # type: ignore[arg-type]
    for by in ("", "x" * 65, None):
        with pytest.raises(InvalidQuery):
            await s.forget(KEPT, by=by)  # type: ignore[arg-type]
    with pytest.raises(InvalidQuery):
        await s.forget(KEPT, by="admin", op_id="")
    assert await s.tombstones() == []
    assert (await s.load(KEPT)).version == 3 and await v.count(KEPT) == 2
