"""The consolidation pass shares its event loop: the owner's writes go on while it runs."""

from __future__ import annotations

import asyncio
import gc
import time
from datetime import datetime, timedelta, timezone

import numpy as np

from dream_memory_actor.engine import consolidation
from dream_memory_actor.models import VectorMemory
from dream_memory_actor.storage.dedup import Cuts

TOPICS = ("deploys", "billing", "the office", "hiring", "the roadmap", "the database")


def _items(n: int) -> list[tuple[VectorMemory, list[float]]]:
    """``n`` memories whose embeddings are all near one another (every one a candidate
    pair of its nearest), worded apart."""
    rng = np.random.default_rng(0)
    base = rng.normal(size=64)
    at = datetime(2025, 1, 1, tzinfo=timezone.utc)
    out = []
    for i in range(n):
        m = VectorMemory(owner="o", content=f"Note {i} of the team about {TOPICS[i % 6]}.",
                         created_at=at + timedelta(minutes=i),
                         updated_at=at + timedelta(minutes=i), has_embedding=True)
        out.append((m, (base + 0.01 * rng.normal(size=64)).tolist()))
    return out


async def test_the_pass_gives_its_event_loop_back_while_it_judges() -> None:
    items = _items(1000)
    gaps: list[float] = []
    done = asyncio.Event()

    async def other_work() -> None:  # what a store waiting on the same loop would see
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    task = asyncio.create_task(other_work())
    await asyncio.sleep(0)
    # a collection of the test session's heap is a pause no yielding can shorten
    gc.disable()
    try:
        t0 = time.perf_counter()
        await consolidation.proposals(items, Cuts.uniform(0.5))
        took = time.perf_counter() - t0
    finally:
        gc.enable()
    done.set()
    await task
    assert took > 0.2  # enough judging to see the loop held or not
    assert max(gaps) < took / 4, (max(gaps), took)


async def test_two_versions_of_a_fact_are_not_merged_through_a_third_that_rewords_both(
        ) -> None:
    at = datetime(2025, 1, 1, tzinfo=timezone.utc)
    texts = ["Maria participated in a charity event last Friday and found it rewarding and "
             "heartwarming.",
             "Maria participated in a charity event last Thursday and found it rewarding and "
             "heartwarming.",
             "Maria has been doing charity work recently, which she finds rewarding and "
             "fulfilling."]
    rng = np.random.default_rng(1)
    base = rng.normal(size=64)
    items = [(VectorMemory(owner="o", content=t, created_at=at + timedelta(days=i),
                           updated_at=at + timedelta(days=i), has_embedding=True),
              (base + 0.01 * rng.normal(size=64)).tolist()) for i, t in enumerate(texts)]
    friday, thursday, recently = (m.id for m, _ in items)
    found = await consolidation.proposals(items, Cuts.uniform(0.5))
    merges = [{t.id for t in p.proposal.touches} for p in found
              if p.proposal is not None and p.kind == "merge"]
    assert merges  # each is a rewording of the newest
    assert all({friday, thursday} - m for m in merges), merges
    assert all(recently in m for m in merges)


def test_kinds_take_turns_up_to_the_cap() -> None:
    """One kind in abundance does not crowd out the others (a capped pass over an owner
    with many merges still proposes its supersessions)."""
    from dream_memory_actor.engine.consolidation import _taking_turns
    from dream_memory_actor.models import MemoryPendingItem, Proposal, Touched, utcnow

    def item(kind: str, i: int) -> MemoryPendingItem:
        touched = (Touched(id=f"00000000-0000-4000-8000-{i:012d}", content="x",
                           updated_at=utcnow()),)
        return MemoryPendingItem(kind=kind, confidence=1.0,  # type: ignore[arg-type]
                                 proposal=Proposal(touches=touched))

    found = {"merge": [item("merge", i) for i in range(10)],
             "supersede": [item("supersede", 100 + i) for i in range(2)],
             "expire": []}
    chosen = _taking_turns(found, 5)  # type: ignore[arg-type]
    assert [p.kind for p in chosen] == ["merge", "supersede", "merge", "supersede", "merge"]
    assert len(_taking_turns(found, 100)) == 12  # type: ignore[arg-type]


def test_status_values_expire_by_their_last_change_never_with_a_ttl() -> None:
    from dream_memory_actor.history import StatusChange
    from dream_memory_actor.models import FrozenMap, MemorySnapshot
    from dream_memory_actor.storage.ops import pending_fingerprint

    now = datetime(2025, 6, 1, tzinfo=timezone.utc)
    old, new = now - timedelta(days=90), now - timedelta(days=1)
    snap = MemorySnapshot(
        owner="o", status=FrozenMap({"city": "Berlin", "trip": "Rome", "mood": "calm",
                                     "team": "core"}),
        status_expires_at={"trip": now + timedelta(days=9)}, updated_at=old)
    changes = [StatusChange(key="city", value="Paris", at=old - timedelta(days=9)),
               StatusChange(key="city", value="Berlin", at=old),
               StatusChange(key="trip", value="Rome", at=old),
               StatusChange(key="mood", value="calm", at=new)]  # "team": none kept
    cut = now - timedelta(days=30)
    found = consolidation.status_expiries(snap, changes, cut)
    assert [(p.key, p.value, p.proposal.touches[0].updated_at) for p in found] == [
        ("city", "Berlin", old), ("team", "core", old)]  # at the latest when snap changed
    again = consolidation.status_expiries(snap, changes, cut,
                                          skip=[pending_fingerprint(found[0])])
    assert [p.key for p in again] == ["team"]  # a value decided before: not again
