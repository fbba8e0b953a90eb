"""``dream-memory consolidate`` and ``undo-proposal``, and the pending queue's commands on
the proposals they make: shown with their memories, confirmed (with an edit), rejected,
undone; bad input one ``error:`` line with nothing written.

The memories are stored without the write-time judgement (as an import leaves them), so
the pass has duplicates, an outdated value and an old memory to propose on.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from dream_memory_actor import MemoryEngine
from dream_memory_actor.config import MemorySettings
from dream_memory_actor.models import utcnow
from dream_memory_actor.storage.dedup import Cuts

from .test_cli import _json, _run, pg_env

__all__ = ["pg_env"]  # the fixture, imported for the tests below

pytestmark = pytest.mark.postgres

#: The memories of one owner: a duplicate pair, an outdated value, a year-old memory.
TEA = ("Alice likes green tea", "alice likes green tea.")
CLUSTER = ("The cluster runs Kubernetes 1.27", "The cluster runs Kubernetes 1.29")
OLD = "The office wifi is called orchard-guest"


@pytest.fixture
def settings(pg_env: MemorySettings, monkeypatch: pytest.MonkeyPatch) -> MemorySettings:
    monkeypatch.setenv("DREAM_MEMORY_CONSOLIDATION_EXPIRE_AFTER_DAYS", "365")
    return MemorySettings()


def seed(settings: MemorySettings, owner: str) -> dict[str, str]:
    """The memories above stored for ``owner`` as they are, each text with its id."""
    async def go() -> dict[str, str]:
        engine = await MemoryEngine.open(settings)
        try:
            ids = {}
            old = utcnow() - timedelta(days=400)
            for text in (OLD, *CLUSTER, *TEA):
                stored = await engine.vector.store(owner, text, threshold=Cuts.off(),
                                                   embed=engine.embed,
                                                   now=old if text == OLD else None)
                ids[text] = stored.memory.id
            return ids
        finally:
            await engine.close()

    return asyncio.run(go())


def contents(capsys: pytest.CaptureFixture[str], owner: str) -> list[str]:
    listed: Any = _json(capsys, "list", "--owner", owner, "--limit", "100")
    return sorted(m["content"] for m in listed)


def by_kind(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {p["kind"]: p for p in items}


def test_proposals_are_shown_decided_and_undone(settings: MemorySettings,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    o = ["--owner", "alice"]
    ids = seed(settings, "alice")
    rc, out, err = _run(capsys, "consolidate", *o)
    assert rc == 0 and err == ""
    assert out.startswith("3 proposal(s) for alice: 1 merge, 1 supersede, 1 expire")
    for text in (*TEA, *CLUSTER, OLD):
        assert text in out
    assert "queued for review: dream-memory pending list --owner alice" in out
    # each memory with what becomes of it
    lines = out.splitlines()
    assert any("merged" in ln and ids[TEA[0]] in ln for ln in lines)
    assert any("kept" in ln and ids[TEA[1]] in ln for ln in lines)
    assert any("superseded" in ln and CLUSTER[0] in ln for ln in lines)
    assert any("expired" in ln and OLD in ln for ln in lines)

    # queued: the same pass again proposes nothing more
    again: Any = _json(capsys, "consolidate", *o)
    assert again["proposals"] == [] and again["counts"] == {
        "merge": 0, "supersede": 0, "expire": 0, "correction": 0, "status_expiry": 0}
    rc, out, _ = _run(capsys, "pending", "list", *o)
    assert rc == 0 and "3 pending item(s) for alice" in out and "[merge] 2 memories" in out
    assert f"result  {TEA[1]}" in out and OLD in out
    assert "[expire] 1 memory: unchanged since" in out  # one memory, said so
    queued = by_kind(_json(capsys, "pending", "list", *o))  # type: ignore[arg-type]
    merge, supersede, expire = queued["merge"], queued["supersede"], queued["expire"]
    assert [t["id"] for t in merge["proposal"]["touches"]] == [ids[TEA[0]], ids[TEA[1]]]

    # an expiry keeps no text: an edit is refused and nothing is written
    before = contents(capsys, "alice")
    rc, out, err = _run(capsys, "pending", "confirm", *o, "--id", expire["id"][:10],
                        "--edit", "something")
    assert rc == 1 and out == "" and err.startswith("error: ") and "nothing to edit" in err
    assert contents(capsys, "alice") == before
    assert len(_json(capsys, "pending", "list", *o)) == 3  # type: ignore[arg-type]

    # confirm the merge with an edited result, by an id's start
    rc, out, _ = _run(capsys, "pending", "confirm", *o, "--id", merge["id"][:10],
                      "--by", "ana", "--edit", "Alice likes green tea (sencha)")
    assert rc == 0 and out.startswith(f"confirmed {merge['id']} by ana: [merge] 2 memories")
    assert "written: Alice likes green tea (sencha)" in out
    assert f"memory id: {ids[TEA[1]]}" in out
    rc, out, _ = _run(capsys, "pending", "confirm", *o, "--id", expire["id"], "--by", "ana")
    assert rc == 0 and "written:" not in out and "memory id" not in out
    decision: Any = _json(capsys, "pending", "reject", *o, "--id", supersede["id"],
                          "--by", "ana")
    assert decision["applied"] and decision["entry"]["item"]["proposal"] is not None
    assert contents(capsys, "alice") == sorted([*CLUSTER, "Alice likes green tea (sencha)"])
    rc, out, _ = _run(capsys, "audit", *o)
    assert "confirmed by ana: [merge] 2 memories" in out and "rejected by ana: [supersede]" in out

    # undo the merge by its id's start, then the expiry: every memory is back as it was
    rc, out, err = _run(capsys, "undo-proposal", *o, merge["id"][:10], "--by", "bo")
    assert rc == 0 and err == ""
    first, second = out.strip().splitlines()
    assert first == f"undid proposal {merge['id']} of alice by bo: 1 memory(ies) back as they were"
    assert second.startswith("  queued again as ")
    done: Any = _json(capsys, "undo-proposal", *o, expire["id"], "--by", "bo")
    assert done["applied"] and done["entry"]["action"] == "undone"
    assert (done["entry"]["pending_id"], done["entry"]["restored"]) == (expire["id"], 1)
    assert contents(capsys, "alice") == sorted([OLD, *CLUSTER, *TEA])
    history: Any = _json(capsys, "memory-history", *o, "--id", ids[TEA[1]])
    assert [v["content"] for v in history] == [TEA[1]]
    rc, out, _ = _run(capsys, "audit", *o)
    assert "undone by bo: [merge] 2 memories" in out and "1 memory(ies) back; queued again" in out
    # again: as recorded, nothing changed
    rc, out, _ = _run(capsys, "undo-proposal", *o, expire["id"], "--by", "bo")
    assert rc == 0 and "(undone before, at " in out and "nothing changed" in out
    # undone: waiting in the queue again, so a pass proposes none of them again
    waiting = by_kind(_json(capsys, "pending", "list", *o))  # type: ignore[arg-type]
    assert set(waiting) == {"merge", "expire"}
    assert waiting["expire"]["id"] == done["entry"]["requeued"] != expire["id"]
    assert _json(capsys, "consolidate", *o)["proposals"] == []  # type: ignore[index]


def test_bad_input_is_one_error_line_and_writes_nothing(
        settings: MemorySettings, capsys: pytest.CaptureFixture[str]) -> None:
    o = ["--owner", "bob"]
    seed(settings, "bob")
    for argv, expected in (
            (["consolidate", "--owner", "not an id!"], "owner"),
            (["consolidate", *o, "--by", ""], "by"),
            (["undo-proposal", "--owner", "not an id!", "x"], "owner"),
            (["undo-proposal", *o, "no-such-proposal"], "no applied proposal"),
            (["undo-proposal", *o, ""], "give the proposal id")):
        rc, out, err = _run(capsys, *argv)
        assert rc == 1 and out == "", argv
        assert err.startswith("error: ") and err.count("\n") == 1 and expected in err, err
    assert _json(capsys, "pending", "list", *o) == []
    assert _json(capsys, "audit", *o) == []

    # a proposal whose memories changed since: refused, nothing written, still queued
    queued = by_kind(_json(capsys, "consolidate", *o)["proposals"])  # type: ignore[index]
    merge = queued["merge"]
    kept = merge["proposal"]["keep"]
    _json(capsys, "update", *o, "--id", kept, "--content", "Bob's Alice likes oolong")
    before = contents(capsys, "bob")
    rc, out, err = _run(capsys, "pending", "confirm", *o, "--id", merge["id"])
    assert rc == 1 and out == "" and "changed since proposed; nothing was written" in err
    assert contents(capsys, "bob") == before
    assert merge["id"] in [p["id"] for p in _json(capsys, "pending", "list", *o)]  # type: ignore[union-attr]
    assert _json(capsys, "audit", *o) == []
    # a confirmed proposal whose kept memory changed since: the undo is refused
    _json(capsys, "pending", "reject", *o, "--id", merge["id"])
    _json(capsys, "pending", "confirm", *o, "--id", queued["supersede"]["id"])
    _json(capsys, "update", *o, "--id", queued["supersede"]["proposal"]["keep"],
          "--content", "The cluster runs Kubernetes 1.30")
    before = contents(capsys, "bob")
    rc, out, err = _run(capsys, "undo-proposal", *o, queued["supersede"]["id"])
    assert rc == 1 and out == "" and "changed since it was applied" in err
    assert contents(capsys, "bob") == before
    # the same when the proposal rewrote the memory it kept (an edited merge)
    seed(settings, "dave")
    d = ["--owner", "dave"]
    merge = by_kind(_json(capsys, "consolidate", *d)["proposals"])["merge"]  # type: ignore[index]
    _json(capsys, "pending", "confirm", *d, "--id", merge["id"], "--edit", "Tea: green")
    _json(capsys, "update", *d, "--id", merge["proposal"]["keep"], "--content", "Tea: oolong")
    before = contents(capsys, "dave")
    rc, out, err = _run(capsys, "undo-proposal", *d, merge["id"])
    assert rc == 1 and out == "" and "changed since it was applied" in err
    assert contents(capsys, "dave") == before


def test_apply_all_confirms_every_proposal(settings: MemorySettings,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    o = ["--owner", "carol"]
    seed(settings, "carol")
    rc, out, _ = _run(capsys, "consolidate", *o, "--apply-all", "--by", "nightly")
    assert rc == 0 and out.startswith("3 proposal(s) for carol")
    assert out.rstrip().endswith("applied 3") and "queued for review" not in out
    assert _json(capsys, "pending", "list", *o) == []
    trail: Any = _json(capsys, "audit", *o)
    assert sorted((e["item"]["kind"], e["by"]) for e in trail) == [
        ("expire", "nightly"), ("merge", "nightly"), ("supersede", "nightly")]
    assert contents(capsys, "carol") == [CLUSTER[1], TEA[1]]


def test_an_owner_who_opted_in_has_every_pass_applied(
        settings: MemorySettings, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DREAM_MEMORY_CONSOLIDATION_AUTO_APPLY", "true")
    seed(settings, "erin")
    rc, out, _ = _run(capsys, "consolidate", "--owner", "erin")
    assert rc == 0 and out.rstrip().endswith("applied 3") and "queued" not in out
    assert {e["by"] for e in _json(capsys, "audit", "--owner", "erin")} == {  # type: ignore[union-attr]
        "consolidation"}
