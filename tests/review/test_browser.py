"""The review pages in a real browser (Playwright driving Debian's Chromium) over a
running memory system: decisions go through the owner actors, agents see them at once.

The browser is not downloaded: the tests drive the Chromium at ``/usr/bin/chromium``
(``apt-get install chromium``; ``.ci/run`` installs it) and fail when it is missing.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect, sync_playwright  # the dev extras hold it

from dream_memory_actor.engine import operations as ops
from dream_memory_actor.review.app import create_app
from dream_memory_actor.review.decisions import decide
from dream_memory_actor.runtime import MemorySystem
from dream_memory_actor.runtime.doors import RayBackend
from dream_memory_actor.storage.ops import AddPending
from tests.runtime.conftest import start_system

from .conftest import (
    CHROMIUM,
    CHROMIUM_ARGS,
    TOKEN_ALICE,
    TOKEN_OSCAR,
    hidden,
    queue,
    served,
    tokens,
)

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "review.png"
SYSTEM = "test-review"


@pytest.fixture
def browser() -> Iterator[Any]:
    """Chromium, for one test: the sync API holds this thread's event loop while it runs."""
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(
            f"the review page tests need Chromium at {CHROMIUM} "
            "(apt-get install chromium), none found"
        )
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture(scope="module")
def system(ray_runtime: None, pg_dsn: str) -> Iterator[MemorySystem]:
    # the test embedder puts every untagged text on one axis: no merging of near-duplicates
    s = start_system(pg_dsn, "sharded", SYSTEM, dedup_threshold=1.0)
    try:
        yield s
    finally:
        s.shutdown(grace_period_s=1)


def log_in(context: Any, base: str, token: str) -> Any:
    page = context.new_page()
    page.goto(base + "/")
    assert page.url == base + "/login"  # a first visit is sent to the login page
    page.fill("#token", token)
    page.click("button.primary")
    page.wait_for_url(base + "/")
    return page


def test_review_in_a_browser(browser: Any, system: MemorySystem) -> None:
    items = queue()
    alice = system.owner("alice")
    alice.add_rule("Answer in English unless asked otherwise")
    alice.add_fact("Alice leads the platform team")
    alice.set_status("deploy", "open")
    alice.store("the deploy pipeline runs on Kubernetes with helm charts")
    alice.store("The deploy pipeline runs on Kubernetes with Helm charts")  # merged into it
    alice.store("Alice prefers short answers with code first")
    alice.store("Rollbacks of a deploy use helm rollback, never kubectl edits")
    for owner, queued in items.items():
        system.owner(owner).apply([AddPending(i) for i in queued])
    rule, fact, status, memory = items["alice"]
    app = create_app(RayBackend(MemorySystem.connect(SYSTEM)), tokens())
    with served(app) as base:
        ctx = browser.new_context(viewport={"width": 1280, "height": 900})
        page = log_in(ctx, base, TOKEN_ALICE)
        row = page.locator("table.owners tbody tr", has_text="alice")
        assert row.locator(".count").inner_text() == "4"
        page.click("text=alice")
        assert page.locator("[data-item]").count() == 4
        side = page.locator(f"#item-{status.id} .compare")
        assert side.locator(".old").inner_text().endswith("open")
        assert "frozen until Friday" in side.locator(".new").inner_text()

        page.fill("input[name=q]", "deploy helm")
        page.click(".search button")
        page.wait_for_url(f"{base}/owners/alice?q=deploy+helm")
        helm = page.locator("[data-hit]", has_text="helm charts")
        signals = {
            s: float(helm.locator(f"[data-signal={s}]").inner_text())
            for s in ("score", "vector", "keyword", "time")
        }
        assert signals["keyword"] > 0 and signals["score"] > 0
        helm.locator("[data-earlier] summary").click()
        assert "1 wording merged" in helm.locator("[data-earlier]").inner_text()
        assert helm.locator("[data-change=merge]").is_visible()
        assert all(0 <= v <= 1 for v in signals.values())

        # the confirm form as the page holds it, to post it again afterwards
        card = page.locator(f"#item-{rule.id}")
        replay = {
            "csrf": card.locator("input[name=csrf]").get_attribute("value"),
            "form": card.locator("input[name=form]").get_attribute("value"),
            "action": "confirm",
            "edited": "Prefer pytest in every example",
        }
        card.locator("summary").click()
        card.locator("textarea").fill("Prefer pytest in every example")
        card.locator("button[value=confirm]").click()
        done = page.locator(f"#item-{rule.id}[data-result]")
        done.wait_for()
        assert "Confirmed by ana at" in done.inner_text()
        page.locator(f"#item-{fact.id} button[value=reject]").click()
        page.locator(f"#item-{fact.id}[data-result]").wait_for()
        assert "Rejected by ana at" in page.locator(f"#item-{fact.id}").inner_text()
        assert page.locator("[data-pending-count]").inner_text() == "2"

        # the page reads the snapshot and the audit trail again after a decision
        trail = page.locator("table.audit tbody")
        expect(page.locator("[data-audit]")).to_have_count(2)
        assert "confirmed" in trail.locator(f"[data-audit='{rule.id}']").inner_text()
        assert "rejected" in trail.locator(f"[data-audit='{fact.id}']").inner_text()
        assert "Prefer pytest in every example" in page.locator("[data-rules]").inner_text()
        assert page.locator("[data-hit]").count() == 3  # the search stays on the page
        SCREENSHOT.parent.mkdir(exist_ok=True)
        page.screenshot(path=str(SCREENSHOT), full_page=True)
        assert SCREENSHOT.stat().st_size > 10_000

        # the same form again: the decision as made, no second write
        version = alice.snapshot().version
        again = ctx.request.post(f"{base}/owners/alice/pending/{rule.id}", form=replay)
        assert again.status == 409 and "Already confirmed by ana at" in again.text()
        # a forged post without the CSRF token: refused, nothing written
        forged = ctx.request.post(
            f"{base}/owners/alice/pending/{status.id}",
            form={"action": "reject", "form": replay["form"]},
        )
        assert forged.status == 403 and "CSRF" in forged.text()
        assert alice.snapshot().version == version

        # the agent's next snapshot, through a handle
        snap = alice.snapshot()
        assert "Prefer pytest in every example" in [r.content for r in snap.rules]
        assert fact.content not in [f.content for f in snap.facts]
        assert [p.id for p in snap.pending] == [status.id, memory.id]
        assert {(e.pending_id, e.action, e.by) for e in alice.audit()} == {
            (rule.id, "confirmed", "ana"),
            (fact.id, "rejected", "ana"),
        }

        # another owner's token sees neither decision nor alice's memory
        other = browser.new_context()
        oscar_page = log_in(other, base, TOKEN_OSCAR)
        assert "alice" not in oscar_page.locator("main").inner_text()
        oscar_page.click("text=oscar")
        text = oscar_page.locator("main").inner_text()
        assert items["oscar"][0].content in text
        for secret in ("Prefer pytest", fact.content, "frozen until Friday", "ana"):
            assert secret not in text
        response = oscar_page.goto(f"{base}/owners/alice")
        assert response is not None and response.status == 403
        assert "may not access" in oscar_page.locator("main").inner_text()
        oscar_csrf = hidden(oscar_page.content(), "csrf")
        refused = other.request.post(
            f"{base}/owners/alice/pending/{status.id}",
            form={"csrf": oscar_csrf, "form": "x", "action": "reject"},
        )
        assert refused.status == 403
        assert [p.id for p in alice.snapshot().pending] == [status.id, memory.id]
        other.close()
        ctx.close()


async def test_system_decisions_are_written_once(system: MemorySystem) -> None:
    from dream_memory_actor.errors import PendingItemNotFound
    from dream_memory_actor.models import MemoryPendingItem

    review = RayBackend(MemorySystem.connect(SYSTEM))
    item = MemoryPendingItem(kind="fact", content="Carol is on call this week", confidence=0.5)
    carol = system.owner("carol")
    await carol.apply_async([AddPending(item)])
    first = await decide(review, "carol", item.id, "confirmed", "ana", None)
    assert first.applied and first.entry.by == "ana"
    version = (await carol.snapshot_async()).version
    for action in ("confirmed", "rejected"):
        again = await decide(review, "carol", item.id, action, "ops", None)  # type: ignore[arg-type]
        assert not again.applied and again.entry == first.entry
    assert (await carol.snapshot_async()).version == version
    with pytest.raises(PendingItemNotFound):
        await decide(review, "carol", "no-such-item", "confirmed", "ana", None)
    assert [e.pending_id for e in await review.call(ops.audit, "carol", 10)] == [item.id]
