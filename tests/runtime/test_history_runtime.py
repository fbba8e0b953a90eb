"""Superseding and history through the owner handles on a real Ray runtime, both placements."""

from __future__ import annotations

import pytest

from dream_memory_actor.errors import InvalidContent, ItemNotFound, ItemSuperseded
from dream_memory_actor.models import utcnow
from dream_memory_actor.runtime import MemorySystem


def test_supersede_history_and_as_of(system: MemorySystem) -> None:
    h = system.owner("rt-history")
    old = h.add_rule("Indent with spaces")
    h.set_status("project", "alpha")
    t = utcnow()
    new = h.supersede(old.id, "Indent with tabs", by="alice", reason="style guide",
                      op_id="sup-1")
    again = h.supersede(old.id, "Indent with tabs", by="alice", op_id="sup-1")  # a retry
    assert again.id == new.id
    h.set_status("project", "beta")
    snap = h.snapshot()  # the actor's live snapshot moved with the write
    assert [r.content for r in snap.rules] == ["Indent with tabs"]
    chain = h.history(old.id)
    assert [v.id for v in chain.versions] == [old.id, new.id]
    assert chain.versions[0].reason == "style guide"
    assert h.history(new.id).versions == chain.versions
    past = h.snapshot(as_of=t)
    assert [r.content for r in past.rules] == ["Indent with spaces"]
    assert dict(past.status) == {"project": "alpha"}
    assert [c.value for c in h.status_history("project")] == ["alpha", "beta"]
    with pytest.raises(ItemSuperseded):
        h.supersede(old.id, "Indent with four spaces", by="alice")
    with pytest.raises(ItemNotFound):
        h.supersede("no-such-id", "x", by="alice")
    with pytest.raises(InvalidContent):
        h.supersede(new.id, "", by="alice")
    assert h.snapshot().version == snap.version  # nothing written by the refusals


async def test_async_twins(system: MemorySystem) -> None:
    h = system.owner("rt-history-async")
    old = await h.add_fact_async("Lives in Paris")
    new = await h.supersede_async(old.id, "Lives in Berlin", by="bob")
    assert [v.content for v in (await h.history_async(new.id)).versions] == [
        "Lives in Paris", "Lives in Berlin"]
    past = await h.snapshot_async(as_of=old.created_at)
    assert [f.content for f in past.facts] == ["Lives in Paris"]
    await h.set_status_async("mood", "ok")
    assert [c.value for c in await h.status_history_async("mood")] == ["ok"]
    with pytest.raises(ItemNotFound):  # another owner's item is unknown here
        await system.owner("rt-history-other").supersede_async(new.id, "stolen", by="eve")
