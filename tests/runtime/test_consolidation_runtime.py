"""A consolidation pass through the owner handles: the pass reads on the VectorIndex,
its proposals wait in the owner's pending queue, and a decision applies or reverses
one through the owner's writer."""

from __future__ import annotations

import asyncio

from dream_memory_actor.config import MemorySettings
from dream_memory_actor.engine import MemoryEngine
from dream_memory_actor.runtime import MemorySystem
from dream_memory_actor.storage.dedup import Cuts


def _document(owner: str, texts: list[str]) -> list[str]:
    """An export of an owner that was never judged (an import keeps its memories as they
    are): look-alike memories side by side."""

    async def build() -> list[str]:
        engine = await MemoryEngine.open(MemorySettings(backend="memory"))
        for text in texts:
            await engine.vector.store(owner, text, threshold=Cuts.off())
        lines = await engine.export(owner)
        await engine.close()
        return lines

    return asyncio.run(build())


def test_a_pass_proposes_a_person_confirms_and_undoes(system: MemorySystem) -> None:
    owner = f"rt-dream-{system.settings.placement}"
    h = system.owner(owner)
    h.import_document(_document(owner, [
        "t9: Alice likes green tea", "t9: alice likes green tea.",
        "t9: the cluster runs Kubernetes 1.27", "t9: the cluster runs Kubernetes 1.29",
        "t9: the staging web server listens on 8080",
        "t9: the staging admin server listens on 8080"]))
    before = sorted(m.content for m in h.list())
    report = h.consolidate()
    assert report.counts == {"merge": 1, "supersede": 1, "expire": 0,
                             "correction": 0, "status_expiry": 0}
    pending = {p.kind: p for p in h.snapshot().pending}
    assert set(pending) == {"merge", "supersede"}
    decision = h.confirm(pending["merge"].id, by="ops", edited_content="t9: Alice likes tea")
    assert decision.applied and decision.memory_id == pending["merge"].proposal.keep
    h.reject(pending["supersede"].id, by="ops")
    after = sorted(m.content for m in h.list())
    assert len(after) == len(before) - 1 and "t9: Alice likes tea" in after
    assert h.consolidate().proposals == ()  # the rejected one is not made again
    undone = h.undo_proposal(pending["merge"].id, by="ana")
    assert undone.applied and (undone.entry.action, undone.entry.restored) == ("undone", 1)
    assert sorted(m.content for m in h.list()) == before
    # recorded through the owner's actor, which serves the proposal waiting again at once
    assert [p.id for p in h.snapshot().pending] == [undone.entry.requeued]
    assert [(e.action, e.by) for e in h.audit(limit=2)] == [("undone", "ana"),
                                                             ("rejected", "ops")]
    assert not h.undo_proposal(pending["merge"].id, by="ana").applied  # as recorded


def test_a_pass_runs_in_the_proposer_at_a_lower_priority(system: MemorySystem) -> None:
    """The pass is computed apart from the replica that makes the owner's writes, in a
    process the operating system serves after the others."""
    import ray

    from dream_memory_actor.runtime.placement import NAMESPACE, index_name, proposer_name

    owner = f"rt-dream-apart-{system.settings.placement}"
    h = system.owner(owner)
    h.import_document(_document(owner, ["t10: Bob drinks coffee", "t10: bob drinks coffee."]))
    assert [p.kind for p in h.propose()] == ["merge"]
    proposer = ray.get_actor(proposer_name(system.name), namespace=NAMESPACE)
    index = ray.get_actor(index_name(system.name, 0), namespace=NAMESPACE)
    apart = ray.get(proposer.info.remote())
    assert apart["pid"] != ray.get(index.info.remote())["pid"]
    assert apart["nice"] > 0
