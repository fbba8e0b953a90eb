"""The consolidation tools over streamable HTTP: a pass's proposals in list_pending with
the memories they change, confirmed (with an edit) and rejected with the pending tools,
a confirmed one undone; refusals typed, writing nothing; a token reaches its owners only.

The memories are stored without the write-time judgement (as an import leaves them), so
the pass has duplicates, an outdated value and an old memory to propose on.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest

from dream_memory_actor.config import MemorySettings
from dream_memory_actor.models import utcnow
from dream_memory_actor.storage.dedup import Cuts

from .conftest import TOKEN_ADMIN, TOKEN_ALICE, HttpServer, http_server_on
from .test_http import error_text, ok

TEA = ("Alice likes green tea", "alice likes green tea.")
CLUSTER = ("The cluster runs Kubernetes 1.27", "The cluster runs Kubernetes 1.29")
OLD = "The office wifi is called orchard-guest"


@pytest.fixture
async def server() -> AsyncIterator[HttpServer]:
    """An HTTP server over in-process memory whose pass lets memories of a year expire."""
    async with http_server_on(MemorySettings(backend="memory",
                                             consolidation_expire_after_days=365),
                              alice={"owners": ["alice"], "name": "ana"}) as server:
        yield server


async def seed(server: HttpServer, owner: str) -> dict[str, str]:
    engine = server.backend.engine
    ids = {}
    for text in (OLD, *CLUSTER, *TEA):
        old = utcnow() - timedelta(days=400) if text == OLD else None
        stored = await engine.vector.store(owner, text, threshold=Cuts.off(),
                                           embed=engine.embed, now=old)
        ids[text] = stored.memory.id
    return ids


async def contents(server: HttpServer, owner: str) -> list[str]:
    return sorted(m.content for m in await server.backend.engine.list(owner, limit=100))


async def test_propose_decide_and_undo(server: HttpServer) -> None:
    ids = await seed(server, "alice")
    async with server.client(TOKEN_ALICE) as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
        assert not tools["consolidate"].annotations.read_only_hint  # type: ignore[union-attr]
        assert tools["undo_proposal"].annotations.destructive_hint  # type: ignore[union-attr]
        assert "confirmed proposal" in tools["undo_proposal"].input_schema["properties"][
            "pending_id"]["description"]
        done = ok(await c.call_tool("consolidate", {"owner": "alice"}))
        assert done["counts"] == {"merge": 1, "supersede": 1, "expire": 1, "correction": 0,
                                  "status_expiry": 0}
        assert done["applied"] == 0 and await contents(server, "alice") == sorted(ids)
        proposed = {p["kind"]: p for p in done["proposals"]}
        merge, supersede, expire = (proposed[k] for k in ("merge", "supersede", "expire"))
        assert [t["id"] for t in merge["proposal"]["touches"]] == [ids[TEA[0]], ids[TEA[1]]]
        assert merge["proposal"]["keep"] == ids[TEA[1]] and merge["content"] == TEA[1]
        assert supersede["proposal"]["keep"] == ids[CLUSTER[1]]
        assert expire["proposal"]["keep"] is None and expire["content"] is None
        assert expire["description"].startswith("[expire] 1 memory: unchanged since")

        # the queue shows them with their proposals; a pass again adds none
        pending = ok(await c.call_tool("list_pending", {"owner": "alice"}))["pending"]
        assert {p["id"]: p["proposal"] for p in pending} == {
            p["id"]: p["proposal"] for p in done["proposals"]}
        assert ok(await c.call_tool("consolidate", {"owner": "alice"}))["proposals"] == []

        # an expiry keeps no text to edit: refused, nothing written
        text = error_text(await c.call_tool("confirm_pending", {
            "owner": "alice", "pending_id": expire["id"], "edited_content": "x"}))
        assert "InvalidQuery" in text and "nothing to edit" in text
        assert await contents(server, "alice") == sorted(ids)

        merged = ok(await c.call_tool("confirm_pending", {
            "owner": "alice", "pending_id": merge["id"],
            "edited_content": "Alice likes green tea (sencha)"}))
        assert merged["applied"] and merged["memory_id"] == ids[TEA[1]]
        assert merged["entry"]["by"] == "ana"
        assert ok(await c.call_tool("confirm_pending", {"owner": "alice",
                                                        "pending_id": expire["id"]}))["applied"]
        ok(await c.call_tool("reject_pending", {"owner": "alice", "pending_id": supersede["id"]}))
        assert await contents(server, "alice") == sorted([*CLUSTER,
                                                          "Alice likes green tea (sencha)"])
        trail = ok(await c.call_tool("audit", {"owner": "alice"}))["entries"]
        assert {(e["item"]["kind"], e["action"]) for e in trail} == {
            ("merge", "confirmed"), ("expire", "confirmed"), ("supersede", "rejected")}

        # undone: every memory as it was, recorded, and the proposal waiting again
        undone = ok(await c.call_tool("undo_proposal", {"owner": "alice",
                                                        "pending_id": merge["id"]}))
        assert undone["applied"] and {k: undone["entry"][k] for k in (
            "action", "pending_id", "by", "restored")} == {
            "action": "undone", "pending_id": merge["id"], "by": "ana", "restored": 1}
        assert ok(await c.call_tool("undo_proposal", {"owner": "alice",
                                                      "pending_id": expire["id"]}))[
            "entry"]["restored"] == 1
        assert await contents(server, "alice") == sorted(ids)
        pending = ok(await c.call_tool("list_pending", {"owner": "alice"}))["pending"]
        assert undone["entry"]["requeued"] in {p["id"] for p in pending}
        assert {p["kind"] for p in pending} == {"merge", "expire"}
        trail = ok(await c.call_tool("audit", {"owner": "alice"}))["entries"]
        assert [e["action"] for e in trail[:2]] == ["undone", "undone"]
        again = ok(await c.call_tool("undo_proposal", {"owner": "alice",
                                                       "pending_id": merge["id"]}))
        assert not again["applied"] and again["entry"] == undone["entry"]
        text = error_text(await c.call_tool("undo_proposal", {"owner": "alice",
                                                              "pending_id": supersede["id"]}))
        assert "ProposalNotApplied" in text  # rejected: nothing was applied


async def test_refusals_write_nothing(server: HttpServer) -> None:
    ids = await seed(server, "alice")
    await seed(server, "bob")
    async with server.client(TOKEN_ALICE) as c:
        cases: list[tuple[str, dict[str, Any], str]] = [
            ("consolidate", {"owner": "not valid"}, "InvalidOwnerId"),
            ("consolidate", {"owner": "bob"}, "AccessDenied"),
            ("undo_proposal", {"owner": "bob", "pending_id": "p"}, "AccessDenied"),
            ("undo_proposal", {"owner": "alice", "pending_id": "x" * 300}, "InvalidQuery"),
            ("undo_proposal", {"owner": "alice", "pending_id": "no-such"},
             "ProposalNotApplied"),
        ]
        for tool, args, expected in cases:
            assert expected in error_text(await c.call_tool(tool, args)), (tool, args)
        assert ok(await c.call_tool("list_pending", {"owner": "alice"}))["pending"] == []
        assert (await server.backend.snapshot("bob")).pending == ()

        # memories changed since proposed: the confirmation is refused and writes nothing
        merge = next(p for p in ok(await c.call_tool("consolidate", {"owner": "alice"}))[
            "proposals"] if p["kind"] == "merge")
        ok(await c.call_tool("update_memory", {"owner": "alice", "memory_id": ids[TEA[0]],
                                               "content": "Alice likes oolong"}))
        before = await contents(server, "alice")
        text = error_text(await c.call_tool("confirm_pending", {"owner": "alice",
                                                                "pending_id": merge["id"]}))
        assert "ProposalChanged" in text and "nothing was written" in text
        assert await contents(server, "alice") == before
        assert ok(await c.call_tool("audit", {"owner": "alice"}))["entries"] == []
        assert merge["id"] in [p["id"] for p in ok(await c.call_tool(
            "list_pending", {"owner": "alice"}))["pending"]]

        # a confirmed supersession whose kept memory changed since: the undo is refused
        newer = next(p for p in ok(await c.call_tool("list_pending", {"owner": "alice"}))[
            "pending"] if p["kind"] == "supersede")
        ok(await c.call_tool("confirm_pending", {"owner": "alice", "pending_id": newer["id"]}))
        ok(await c.call_tool("update_memory", {"owner": "alice", "memory_id": ids[CLUSTER[1]],
                                               "content": "The cluster runs Kubernetes 1.30"}))
        before = await contents(server, "alice")
        text = error_text(await c.call_tool("undo_proposal", {"owner": "alice",
                                                              "pending_id": newer["id"]}))
        assert "ProposalChanged" in text and "changed since it was applied" in text
        assert await contents(server, "alice") == before


async def test_apply_all_is_recorded_as_the_caller(server: HttpServer) -> None:
    await seed(server, "carol")
    async with server.client(TOKEN_ADMIN) as c:
        done = ok(await c.call_tool("consolidate", {"owner": "carol", "apply_all": True}))
        assert (done["applied"], done["refused"]) == (3, 0)
        trail = ok(await c.call_tool("audit", {"owner": "carol"}))["entries"]
        assert sorted(e["by"] for e in trail) == ["admin"] * 3
        assert ok(await c.call_tool("list_pending", {"owner": "carol"}))["pending"] == []
    assert await contents(server, "carol") == [CLUSTER[1], TEA[1]]
