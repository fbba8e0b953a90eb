"""Consolidation proposals on the review pages: before/after cards (a merge's memories and
its editable result, a supersession's old and new text, an expiry's memory or status
value and its last change), confirmed (with an edit) and rejected as other items, undone
from the audit trail; refusals write nothing. Over HTTP without a browser, and once in
Chromium with a screenshot of the four cards (docs/review-consolidation.png).

The memories are stored without the write-time judgement (as an import leaves them), so
the pass has duplicates, an outdated value, an old memory and an old status value to
propose on.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from dream_memory_actor.config import MemorySettings
from dream_memory_actor.engine import operations as ops
from dream_memory_actor.engine.doors import LocalBackend
from dream_memory_actor.models import MemoryPendingItem, utcnow
from dream_memory_actor.review.app import LOOPBACK_HOSTS, create_app
from dream_memory_actor.review.render import editable, sides
from dream_memory_actor.review.sessions import SessionStore
from dream_memory_actor.storage.dedup import Cuts
from dream_memory_actor.storage.ops import SetStatus

from .conftest import CHROMIUM, CHROMIUM_ARGS, TOKEN_ALICE, hidden, served, tokens
from .test_pages import FETCH, decide, login

SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "review-consolidation.png"
TEA = ("Alice likes green tea", "alice likes green tea.")
CLUSTER = ("The cluster runs Kubernetes 1.27", "The cluster runs Kubernetes 1.29")
OLD = "The office wifi is called orchard-guest"
DESK = ("desk", "3rd floor, window seat")


class Site:
    """A review app over in-process memory whose pass lets memories of a year expire;
    alice's memories stored as they are, and a pass run over them."""

    def __init__(self) -> None:
        settings = MemorySettings(backend="memory", consolidation_expire_after_days=365)
        self.backend = asyncio.run(LocalBackend.open(settings))
        self.app = create_app(self.backend, tokens(), sessions=SessionStore(idle_s=600),
                              allowed_hosts=("testserver", *LOOPBACK_HOSTS))
        self.ids: dict[str, str] = {}
        self.proposals: dict[str, MemoryPendingItem] = {}

    async def seed(self) -> None:
        engine = self.backend.engine
        for text in (OLD, *CLUSTER, *TEA):
            old = utcnow() - timedelta(days=400) if text == OLD else None
            stored = await engine.vector.store("alice", text, threshold=Cuts.off(),
                                               embed=engine.embed, now=old)
            self.ids[text] = stored.memory.id
        await engine.apply("alice", [SetStatus(*DESK)], now=utcnow() - timedelta(days=400))
        report = await self.backend.call(ops.consolidate, "alice")
        self.proposals = {"status" if p.status_expiry else p.kind: p for p in report.proposals}

    async def status(self) -> dict[str, str]:
        return dict((await self.backend.engine.snapshot("alice")).status)

    async def contents(self) -> list[str]:
        return sorted(m.content for m in await self.backend.engine.list("alice", limit=100))


@pytest.fixture
def site() -> Site:
    return Site()


@pytest.fixture
def alice(site: Site) -> Iterator[TestClient]:
    with TestClient(site.app, follow_redirects=False) as c:
        c.portal.call(site.seed)
        login(c, TOKEN_ALICE)
        yield c


def card(page: str, item: MemoryPendingItem) -> str:
    start = page.index(f'id="item-{item.id}"')
    return page[start:page.index("</article>", start)]


def undo(c: TestClient, pending_id: str, *, fetch: bool = False, **override: str) -> Any:
    page = c.get("/owners/alice").text
    after = f"proposals/{pending_id}/undo"
    data = {"csrf": hidden(page, "csrf", after), "form": hidden(page, "form", after), **override}
    return c.post(f"/owners/alice/{after}", data=data, headers=FETCH if fetch else None)


def test_proposals_are_before_after_cards(site: Site, alice: TestClient) -> None:
    page = alice.get("/owners/alice").text
    merge, supersede, expire = (site.proposals[k] for k in ("merge", "supersede", "expire"))
    # a merge: every memory it joins, the one kept marked, and the result to edit
    m = card(page, merge)
    assert 'data-proposal="merge"' in m and "2 memories say one thing" in m
    assert m.index(TEA[0]) < m.index('class="tag">kept') < m.index("After: one memory")
    assert f'data-touched="{site.ids[TEA[0]]}" class="closed"' in m
    assert f"<p data-after>{TEA[1]}</p>" in m
    assert "Edit the result before confirming" in m and f">{TEA[1]}</textarea>" in m
    # a supersession: the outdated text beside the newer one
    s = card(page, supersede)
    old, new = s.index('class="old"'), s.index('class="new"')
    assert old < s.index(CLUSTER[0]) < new < s.index(CLUSTER[1])
    assert s.count("data-touched") == 1 and "a newer version" in s
    # an expiry: the memory, when it last changed, and nothing to edit
    e = card(page, expire)
    last = (utcnow() - timedelta(days=400)).date().isoformat()
    assert OLD in e and "last changed <span" in e and last in e and "(400 d ago)" in e
    assert "After: expired" in e and "<textarea" not in e and "<meter" not in e
    assert "lapses undecided" in e and "evidence" not in e
    # a status value's expiry: the key and value, when it last changed, nothing to edit
    t = card(page, site.proposals["status"])
    assert f"<code>{DESK[0]}</code> = {DESK[1]}" in t and 'data-proposal="expire"' in t
    assert "last changed <span" in t and last in t and "(400 d ago)" in t
    assert "After: expired" in t and "status history" in t and "<textarea" not in t


def test_confirm_with_an_edit_reject_and_undo(site: Site, alice: TestClient) -> None:
    merge, supersede, expire = (site.proposals[k] for k in ("merge", "supersede", "expire"))
    r, _ = decide(alice, "alice", merge.id, "confirm", "Alice likes green tea (sencha)")
    assert r.status_code == 200 and "Confirmed</strong> by ana" in r.text
    assert "written as “Alice likes green tea (sencha)”" in r.text and "can undo it" in r.text
    r, _ = decide(alice, "alice", expire.id, "confirm")
    assert r.status_code == 200
    r, _ = decide(alice, "alice", supersede.id, "reject")
    assert r.status_code == 200 and "Rejected</strong> by ana" in r.text
    assert alice.portal.call(site.contents) == sorted([*CLUSTER, "Alice likes green tea (sencha)"])

    # the audit trail offers to undo the confirmed proposals, not the rejected one
    page = alice.get("/owners/alice").text
    for item, offered in ((merge, True), (expire, True), (supersede, False)):
        assert (f"proposals/{item.id}/undo" in page) == offered, item.kind
    r = undo(alice, merge.id)
    assert r.status_code == 200 and "Undone: [merge] 2 memories" in r.text
    assert "1 memory back as before it" in r.text
    assert 'class="notice ok"' in r.text
    assert f"proposals/{merge.id}/undo" not in r.text and "data-undone" in r.text
    assert alice.portal.call(site.contents) == sorted([*CLUSTER, *TEA])
    # the undo is a row of the trail of its own, and the proposal waits in the queue again
    (entry,) = [e for e in alice.portal.call(site.backend.call, ops.audit, "alice", 10)
                if e.action == "undone"]
    assert (entry.pending_id, entry.by, entry.restored) == (merge.id, "ana", 1)
    assert r.text.count(f'data-audit="{merge.id}"') == 2
    assert '<span class="decision undone">undone</span>' in r.text
    assert 'data-restored="1">1 memory back' in r.text
    assert f'href="#item-{entry.requeued}"' in r.text
    assert f'id="item-{entry.requeued}"' in r.text and 'data-proposal="merge"' in r.text
    # from the page's script: the notice alone
    r = undo(alice, expire.id, fetch=True)
    assert r.status_code == 200 and r.text.startswith('<p class="notice ok"')
    assert alice.portal.call(site.contents) == sorted([OLD, *CLUSTER, *TEA])
    assert alice.get("/owners/alice").text.count("data-undone") == 2
    # the same form posted again (a form of its own): the undo as recorded, nothing written
    session = site.app.state.review.sessions.get(alice.cookies["dm_review"])
    form = {"csrf": session.csrf, "form": session.issue(f"undo:alice:{merge.id}")}
    r = alice.post(f"/owners/alice/proposals/{merge.id}/undo", data=form, headers=FETCH)
    assert r.status_code == 200 and "Undone by ana at" in r.text
    assert len(alice.portal.call(site.backend.call, ops.audit, "alice", 10)) == 5

    # a later proposal closing a memory again is its own: the undone one stays undone
    from dream_memory_actor.models import Proposal, Touched
    from dream_memory_actor.storage.ops import AddPending

    memory = alice.portal.call(site.backend.engine.get, "alice", site.ids[TEA[0]])
    later = MemoryPendingItem(kind="expire", confidence=1.0, source="consolidation",
                              proposal=Proposal(touches=(Touched(
                                  id=memory.id, content=memory.content,
                                  updated_at=memory.updated_at),), reason="by hand"))
    alice.portal.call(site.backend.engine.apply, "alice", [AddPending(later)])
    assert decide(alice, "alice", later.id, "confirm")[0].status_code == 200
    page = alice.get("/owners/alice").text
    assert f"proposals/{later.id}/undo" in page and f"proposals/{merge.id}/undo" not in page
    assert page.count("data-undone") == 2


def test_a_status_expiry_confirmed_and_undone(site: Site, alice: TestClient) -> None:
    item = site.proposals["status"]
    r, _ = decide(alice, "alice", item.id, "confirm")
    assert r.status_code == 200 and "Applied to the status" in r.text
    assert DESK[0] not in alice.portal.call(site.status)
    assert f"proposals/{item.id}/undo" in alice.get("/owners/alice").text
    r = undo(alice, item.id)
    assert r.status_code == 200 and "the status value back as before it" in r.text
    assert 'data-restored="1">status value back' in r.text
    assert alice.portal.call(site.status)[DESK[0]] == DESK[1]
    (entry,) = [e for e in alice.portal.call(site.backend.call, ops.audit, "alice", 10)
                if e.action == "undone"]
    assert f'id="item-{entry.requeued}"' in r.text  # waiting again
    # set again since: a second confirmation is refused, the value stays
    alice.portal.call(site.backend.engine.apply, "alice", [SetStatus(DESK[0], "2nd floor")])
    r, _ = decide(alice, "alice", entry.requeued or "", "confirm")
    assert r.status_code == 400 and "changed since proposed" in r.text
    assert alice.portal.call(site.status)[DESK[0]] == "2nd floor"


def test_refused_decisions_and_undos_write_nothing(site: Site, alice: TestClient) -> None:
    merge, supersede, expire = (site.proposals[k] for k in ("merge", "supersede", "expire"))
    engine = site.backend.engine

    def state() -> Any:
        return (alice.portal.call(site.contents),
                alice.portal.call(site.backend.call, ops.audit, "alice", 100),
                alice.portal.call(engine.snapshot, "alice").pending)

    before = state()
    # an edit of an expiry (posted by hand: the card has no field for it)
    r, _ = decide(alice, "alice", expire.id, "confirm", "something")
    assert r.status_code == 400 and "nothing to edit" in r.text and f"item-{expire.id}" in r.text
    # a proposal whose memories changed since
    alice.portal.call(lambda: engine.update("alice", site.ids[TEA[0]], "Alice likes oolong"))
    before = state()
    r, _ = decide(alice, "alice", merge.id, "confirm")
    assert r.status_code == 400 and "changed since proposed" in r.text
    assert f'id="item-{merge.id}"' in r.text  # the card again, to reject it instead
    # undo of a proposal never applied, forged, or replayed
    assert f"proposals/{supersede.id}/undo" not in alice.get("/owners/alice").text
    session = site.app.state.review.sessions.get(alice.cookies["dm_review"])
    r = alice.post(f"/owners/alice/proposals/{supersede.id}/undo",
                   data={"csrf": session.csrf, "form": "not-issued"})
    assert r.status_code == 403  # no form was issued for it: refused before the memory
    form = {"csrf": session.csrf, "form": session.issue(f"undo:alice:{supersede.id}")}
    r = alice.post(f"/owners/alice/proposals/{supersede.id}/undo", data=form)
    assert r.status_code == 404 and "no applied proposal" in r.text
    r = alice.post(f"/owners/alice/proposals/{supersede.id}/undo",
                   data={**form, "csrf": "x" * 43})
    assert r.status_code == 403
    assert alice.post(f"/owners/alice/proposals/{'x' * 300}/undo", data=form).status_code == 400
    assert state() == before

    # a confirmed merge whose kept memory changed since: the undo is refused
    fresh = state()
    r, _ = decide(alice, "alice", supersede.id, "confirm", "The cluster runs Kubernetes 1.30")
    assert r.status_code == 200
    alice.portal.call(lambda: engine.update("alice", site.ids[CLUSTER[1]], "Kubernetes 1.31"))
    after = state()
    r = undo(alice, supersede.id)
    assert r.status_code == 400 and "changed since it was applied" in r.text
    assert 'class="notice error"' in r.text and state() == after != fresh
    again = undo(alice, supersede.id, fetch=True)  # a fresh form, the same refusal
    assert again.status_code == 400 and again.text.startswith('<p class="notice error"')


def test_what_a_card_shows_of_each_kind() -> None:
    from dream_memory_actor.models import Proposal, Touched

    a, b = (Touched(id=i, content=f"text {i}", updated_at=utcnow()) for i in "ab")
    merge = MemoryPendingItem(kind="merge", content="text b", confidence=0.9,
                              proposal=Proposal(touches=(a, b), keep="b"))
    assert sides(merge) == ([(a, True), (b, False)], "text b") and editable(merge)
    newer = merge.model_copy(update={"kind": "supersede"})
    assert sides(newer) == ([(a, True)], "text b") and editable(newer)
    gone = MemoryPendingItem(kind="expire", confidence=1.0,
                             proposal=Proposal(touches=(a,)))
    assert sides(gone) == ([(a, True)], None) and not editable(gone)
    rule = MemoryPendingItem(kind="rule", content="x", confidence=0.6)
    assert sides(rule) == ([], None) and editable(rule)


@pytest.mark.slow
def test_proposals_in_a_browser(site: Site, tmp_path: Path) -> None:
    from playwright.sync_api import expect, sync_playwright  # the dev extras hold it

    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"the review page tests need Chromium at {CHROMIUM} "
                    "(apt-get install chromium), none found")
    asyncio.run(site.seed())
    merge, supersede, expire = (site.proposals[k] for k in ("merge", "supersede", "expire"))
    with served(site.app) as base, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
            page.goto(base + "/login")
            page.fill("#token", TOKEN_ALICE)
            page.click("button.primary")
            page.wait_for_url(base + "/")
            page.click("text=alice")
            expect(page.locator("[data-proposal]")).to_have_count(4)
            SCREENSHOT.parent.mkdir(exist_ok=True)
            page.screenshot(path=str(SCREENSHOT), full_page=True)
            assert SCREENSHOT.stat().st_size > 10_000

            box = page.locator(f"#item-{merge.id}")
            box.locator("summary").click()
            box.locator("textarea").fill("Alice likes green tea (sencha)")
            box.locator("button[value=confirm]").click()
            page.locator(f"#item-{merge.id}[data-result]").wait_for()
            page.locator(f"#item-{supersede.id} button[value=reject]").click()
            page.locator(f"#item-{supersede.id}[data-result]").wait_for()
            assert page.locator(f"#item-{expire.id} textarea").count() == 0
            assert page.locator("[data-pending-count]").inner_text() == "2"

            # the refreshed audit trail offers the undo; it happens in place
            undo_button = page.locator(f"[data-audit='{merge.id}'] form.undo button")
            undo_button.wait_for()
            assert page.locator(f"[data-audit='{supersede.id}'] form.undo").count() == 0
            undo_button.click()
            expect(page.locator(".notice.ok")).to_contain_text("1 memory back as before it")
            expect(page.locator(f"[data-audit='{merge.id}'] [data-undone]")).to_have_count(1)
            expect(page.locator(f"[data-audit='{merge.id}'] .decision.undone")).to_have_count(1)
            # the merge waits in the queue again, as a card to decide once more
            expect(page.locator("[data-proposal=merge]")).to_have_count(1)
            assert page.locator("[data-pending-count]").inner_text() == "3"
            page.screenshot(path=str(tmp_path / "undone.png"), full_page=True)
        finally:
            browser.close()
    assert asyncio.run(site.contents()) == sorted([OLD, *CLUSTER, *TEA])
