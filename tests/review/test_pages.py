"""The review pages over the engine (memory backend), through HTTP without a browser:
access, sessions, CSRF, one-time forms and every refused input writing nothing."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from dream_memory_actor.cli import main as cli_main
from dream_memory_actor.config import MemorySettings
from dream_memory_actor.engine import operations as ops
from dream_memory_actor.engine.doors import LocalBackend
from dream_memory_actor.errors import ConfigurationError
from dream_memory_actor.models import MemorySnapshot
from dream_memory_actor.review import cli as review_cli
from dream_memory_actor.review import decisions
from dream_memory_actor.review.app import AUDIT_PAGE, LOOPBACK_HOSTS, create_app
from dream_memory_actor.review.sessions import SessionStore
from dream_memory_actor.storage.ops import AddPending, SetStatus

from .conftest import TOKEN_ADMIN, TOKEN_ALICE, TOKEN_OSCAR, hidden, queue, tokens

FETCH = {"X-Review-Fetch": "1"}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Site:
    """One review app over a fresh in-process memory, with the test queue seeded."""

    def __init__(self, **app_options: Any) -> None:
        self.backend = asyncio.run(LocalBackend.open(MemorySettings(backend="memory")))
        self.items = queue()
        self.clock = Clock()
        token_map = app_options.pop("tokens", tokens())
        options = {"sessions": SessionStore(idle_s=600, clock=self.clock),
                   "allowed_hosts": ("testserver", *LOOPBACK_HOSTS), **app_options}
        self.app = create_app(self.backend, token_map, **options)

    def seed(self, client: TestClient) -> None:
        for owner, items in self.items.items():
            client.portal.call(self.backend.engine.apply, owner, [AddPending(i) for i in items])
        client.portal.call(self.backend.engine.apply, "alice", [SetStatus("deploy", "open")])

    def client(self, base_url: str = "http://testserver") -> TestClient:
        return TestClient(self.app, base_url=base_url, follow_redirects=False)

    def state(self, client: TestClient, owner: str = "alice") -> tuple[MemorySnapshot, list[Any]]:
        snap = client.portal.call(self.backend.engine.snapshot, owner)
        audit = client.portal.call(self.backend.call, ops.audit, owner, 1000)
        return snap, audit


@pytest.fixture
def site() -> Site:
    return Site()


@pytest.fixture
def alice(site: Site) -> Iterator[TestClient]:
    with site.client() as c:
        site.seed(c)
        login(c, TOKEN_ALICE)
        yield c


def login(c: TestClient, token: str) -> None:
    page = c.get("/login")
    r = c.post("/login", data={"csrf": hidden(page.text, "csrf"), "token": token})
    assert r.status_code == 303, r.text


def decide(
    c: TestClient,
    owner: str,
    pending_id: str,
    action: str,
    edited: str | None = None,
    **override: str,
) -> Any:
    page = c.get(f"/owners/{owner}")
    assert page.status_code == 200, page.text
    after = f"pending/{pending_id}"
    data = {
        "csrf": hidden(page.text, "csrf", after),
        "form": hidden(page.text, "form", after),
        "action": action,
    }
    if edited is not None:
        data["edited"] = edited
    data.update(override)
    return c.post(f"/owners/{owner}/pending/{pending_id}", data=data, headers=FETCH), data


def test_confirm_with_edit_then_double_post_writes_once(site: Site, alice: TestClient) -> None:
    rule = site.items["alice"][0]
    r, form = decide(alice, "alice", rule.id, "confirm", "Prefer pytest")
    assert r.status_code == 200 and "Confirmed</strong> by ana" in r.text
    snap, audit = site.state(alice)
    again = alice.post(f"/owners/alice/pending/{rule.id}", data=form, headers=FETCH)
    assert again.status_code == 409
    assert "Already confirmed by ana at" in again.text and "Nothing was written again" in again.text
    assert site.state(alice) == (snap, audit)
    assert [r.content for r in snap.rules] == ["Prefer pytest"]
    assert [(e.action, e.by, e.written) for e in audit] == [("confirmed", "ana", "Prefer pytest")]


def test_second_reviewer_gets_the_first_decision(site: Site, alice: TestClient) -> None:
    fact = site.items["alice"][1]
    with site.client() as ops:
        login(ops, TOKEN_ADMIN)
        page = ops.get("/owners/alice").text  # ops opens the page before alice decides
        after = f"pending/{fact.id}"
        form = {"csrf": hidden(page, "csrf", after), "form": hidden(page, "form", after)}
        assert decide(alice, "alice", fact.id, "reject")[0].status_code == 200
        url = f"/owners/alice/pending/{fact.id}"
        r = ops.post(url, headers=FETCH, data={**form, "action": "confirm"})
    assert r.status_code == 409 and "Already rejected by ana at" in r.text
    snap, audit = site.state(alice)
    assert fact.content not in [f.content for f in snap.facts]
    assert [(e.action, e.by) for e in audit] == [("rejected", "ana")]


def test_a_token_for_every_owner_sees_the_listed_owners() -> None:
    site = Site(owners=["alice", "oscar", "carol"])
    with site.client() as ops:
        site.seed(ops)
        login(ops, TOKEN_ADMIN)
        page = ops.get("/").text
        rows = [page.index(f">{o}</a>") for o in ("alice", "oscar", "carol")]
        assert rows == sorted(rows)  # the most waiting first; carol has nothing waiting
        assert "nothing waiting" in page[rows[2] :] and 'name="owner"' in page
        assert ops.get("/open?owner=dave").headers["location"] == "/owners/dave"
        assert ops.get("/owners/dave").status_code == 200
        r, _ = decide(ops, "oscar", site.items["oscar"][0].id, "confirm")
        assert r.status_code == 200 and "by ops" in r.text


def test_supersession_is_shown_side_by_side(alice: TestClient) -> None:
    page = alice.get("/owners/alice").text
    assert "Replaces: current value of deploy" in page
    old, new = page.index('class="old"'), page.index('class="new"')
    assert old < page.index("open", old) < new < page.index("frozen until Friday", new)


@pytest.mark.parametrize("case", ["unknown", "foreign", "bad-id", "empty", "too-long", "no-action"])
def test_bad_decisions_write_nothing(site: Site, alice: TestClient, case: str) -> None:
    rule = site.items["alice"][0]
    oscar_item = site.items["oscar"][0]
    before = site.state(alice)
    limit = site.backend.settings.max_content_bytes
    r: Any
    if case in ("unknown", "foreign", "bad-id"):
        pending_id = {"unknown": "no-such-item", "foreign": oscar_item.id, "bad-id": "x" * 300}[
            case
        ]
        page = alice.get("/owners/alice").text
        r = alice.post(
            f"/owners/alice/pending/{pending_id}",
            headers=FETCH,
            data={"csrf": hidden(page, "csrf"), "form": "f", "action": "confirm"},
        )
        expected = {"unknown": 403, "foreign": 403, "bad-id": 400}[case]
    else:
        edited = {"empty": "   ", "too-long": "é" * limit, "no-action": "x"}[case]
        r, _ = decide(alice, "alice", rule.id, "confirm" if case != "no-action" else "hold", edited)
        expected = 400
    assert r.status_code == expected, r.text
    assert 'class="notice error"' in r.text
    assert site.state(alice) == before
    with site.client() as oscar_client:  # oscar's item is untouched
        login(oscar_client, TOKEN_OSCAR)
        assert oscar_item.content in oscar_client.get("/owners/oscar").text


def test_unknown_item_with_a_real_form_is_404(site: Site, alice: TestClient) -> None:
    before = site.state(alice)
    session = site.app.state.review.sessions.get(alice.cookies["dm_review"])
    for pending_id in ("no-such-item", site.items["oscar"][0].id):
        r = alice.post(
            f"/owners/alice/pending/{pending_id}",
            headers=FETCH,
            data={
                "csrf": session.csrf,
                "form": session.issue(f"decide:alice:{pending_id}"),
                "action": "confirm",
            },
        )
        assert r.status_code == 404 and "no pending item" in r.text
    assert site.state(alice) == before


def test_refused_edit_gives_the_card_back_with_a_fresh_form(site: Site, alice: TestClient) -> None:
    rule = site.items["alice"][0]
    r, spent = decide(alice, "alice", rule.id, "confirm", "")
    assert r.status_code == 400 and "edited content is empty" in r.text
    assert f'id="item-{rule.id}"' in r.text and hidden(r.text, "form") != spent["form"]
    replay = alice.post(f"/owners/alice/pending/{rule.id}", data=spent, headers=FETCH)
    assert replay.status_code == 409 and "already submitted" in replay.text
    ok = alice.post(
        f"/owners/alice/pending/{rule.id}",
        headers=FETCH,
        data={**spent, "form": hidden(r.text, "form"), "edited": "Use pytest"},
    )
    assert ok.status_code == 200


@pytest.mark.parametrize("forgery", ["no-csrf", "wrong-csrf", "no-form", "other-origin"])
def test_forged_posts_are_refused(site: Site, alice: TestClient, forgery: str) -> None:
    rule = site.items["alice"][0]
    before = site.state(alice)
    page = alice.get("/owners/alice").text
    after = f"pending/{rule.id}"
    data = {
        "csrf": hidden(page, "csrf", after),
        "form": hidden(page, "form", after),
        "action": "reject",
    }
    headers = dict(FETCH)
    if forgery == "no-csrf":
        del data["csrf"]
    elif forgery == "wrong-csrf":
        data["csrf"] = "x" * 43
    elif forgery == "no-form":
        del data["form"]
    else:
        headers["Origin"] = "https://evil.example"
    r = alice.post(f"/owners/alice/pending/{rule.id}", data=data, headers=headers)
    assert r.status_code == 403 and "nothing was done" in r.text
    assert site.state(alice) == before


def test_sessions_missing_expired_and_logged_out(site: Site, alice: TestClient) -> None:
    rule = site.items["alice"][0]
    before = site.state(alice)
    page = alice.get("/owners/alice").text
    data = {"csrf": hidden(page, "csrf"), "form": hidden(page, "form"), "action": "reject"}
    with site.client() as stranger:
        r = stranger.post(f"/owners/alice/pending/{rule.id}", data=data)
        assert r.status_code == 401 and "not logged in" in r.text
        assert stranger.get("/owners/alice").headers["location"] == "/login"
    site.clock.now += 601
    r = alice.post(f"/owners/alice/pending/{rule.id}", data=data, headers=FETCH)
    assert r.status_code == 401 and "session expired" in r.text and 'href="/login"' in r.text
    r = alice.post(f"/owners/alice/pending/{rule.id}", data=data)
    assert r.status_code == 401 and "session expired" in r.text and 'name="token"' in r.text
    assert alice.get("/owners/alice").status_code == 401
    assert site.state(alice) == before
    login(alice, TOKEN_ALICE)
    page = alice.get("/").text
    assert alice.post("/logout", data={}).status_code == 403
    assert alice.post("/logout", data={"csrf": hidden(page, "csrf")}).status_code == 303
    assert alice.get("/").headers["location"] == "/login"  # the session is gone


def test_login_refusals(site: Site) -> None:
    with site.client() as c:
        page = c.get("/login")
        csrf = hidden(page.text, "csrf")
        r = c.post("/login", data={"csrf": csrf, "token": "not-a-token"})
        assert r.status_code == 401 and "not known" in r.text
        r = c.post("/login", data={"token": TOKEN_ALICE})
        assert r.status_code == 403 and "dm_review" not in r.cookies
        r = c.post("/login", data={"csrf": csrf, "token": TOKEN_ALICE, "pad": "x" * 300_000})
        assert r.status_code == 413


def test_other_owner_is_refused(site: Site, alice: TestClient) -> None:
    assert "oscar" not in alice.get("/").text.split("<main>")[1]
    r = alice.get("/owners/oscar")
    assert r.status_code == 403 and "may not access" in r.text
    assert site.items["oscar"][0].content not in r.text


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_session_cookie_flags(site: Site, scheme: str) -> None:
    with site.client(f"{scheme}://testserver") as c:
        page = c.get("/login")
        r = c.post("/login", data={"csrf": hidden(page.text, "csrf"), "token": TOKEN_ALICE})
    cookie = next(v for k, v in r.headers.items() if k == "set-cookie" and "dm_review=" in v)
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie
    assert ("Secure" in cookie) == (scheme == "https")
    csp = page.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "frame-ancestors 'none'" in csp


@pytest.mark.parametrize("tokens_given", [False, True])
def test_only_allowed_host_names_are_answered(tokens_given: bool) -> None:
    """DNS rebinding: a page that points its own name at 127.0.0.1 sends that name as
    Host, and is refused (421) in either mode; this machine's names are served."""
    site = Site(allowed_hosts=LOOPBACK_HOSTS, **({} if tokens_given else {"tokens": None}))
    for base in ("http://localhost:8766", "http://127.0.0.1:8766", "http://[::1]:8766",
                 "http://127.0.0.1"):
        with site.client(base) as c:
            assert c.get("/login" if tokens_given else "/").status_code in (200, 303), base
    for base in ("http://evil.example:8766", "http://127.0.0.1.evil.example",
                 "http://localhost.:8766"):
        with site.client(base) as c:
            for path in ("/", "/login", "/owners/alice", "/static/review.css"):
                r = c.get(path)
                assert r.status_code == 421 and "alice" not in r.text, (base, path)
            r = c.post(f"/owners/alice/pending/{site.items['alice'][0].id}",
                       data={"action": "reject"})
            assert r.status_code == 421
    with site.client("http://127.0.0.1:8766") as c:  # nothing was decided by those posts
        assert site.state(c)[1] == []


def test_without_token_map_the_local_user_decides() -> None:
    local = Site(tokens=None)
    with local.client() as c:
        local.seed(c)
        r, _ = decide(c, "alice", local.items["alice"][1].id, "reject")
        assert r.status_code == 200
        assert [e.by for e in local.state(c)[1]] == ["local"]


def test_audit_trail_is_paginated_and_search_shows_the_signals(
    site: Site, alice: TestClient
) -> None:
    from dream_memory_actor.models import MemoryPendingItem

    extra = [
        MemoryPendingItem(kind="fact", content=f"fact number {i}", confidence=0.5)
        for i in range(AUDIT_PAGE + 3)
    ]
    alice.portal.call(site.backend.engine.apply, "alice", [AddPending(i) for i in extra])
    for item in extra:
        alice.portal.call(decisions.decide, site.backend, "alice", item.id, "rejected", "ana", None)
    first, second = alice.get("/owners/alice").text, alice.get("/owners/alice?page=2").text
    assert first.count("data-audit=") == AUDIT_PAGE and "older →" in first
    assert second.count("data-audit=") == 3 and "← newer" in second
    assert alice.get("/owners/alice?page=0").status_code == 400
    for odd in ("²", "٣", "+1", " 1", "1e1"):  # digits str.isdigit takes, int() refuses
        assert alice.get("/owners/alice", params={"page": odd}).status_code == 400
    alice.portal.call(site.backend.engine.store, "alice", "the deploy pipeline runs on helm")
    hits = alice.get("/owners/alice?q=helm+pipeline").text
    assert hits.count("data-hit") == 1 and "the deploy pipeline runs on helm" in hits
    for signal in ("score", "vector", "keyword", "time"):
        assert hits.count(f'data-signal="{signal}"') == 1

    # A hit shows what the write path did with it: the wordings merged into it and the
    # version it replaced, with the reason.
    engine = site.backend.engine
    alice.portal.call(engine.store, "alice", "The deploy pipeline runs on Helm")
    old = alice.portal.call(engine.store, "alice", "nightly backups run at 02:00")
    alice.portal.call(functools.partial(
        engine.supersede_memory, "alice", old.memory.id, "nightly backups run at 03:00",
        by="ana", reason="moved after the batch"))
    page = alice.get("/owners/alice?q=helm+pipeline").text
    assert page.count("data-earlier") == 1 and "1 wording merged" in page
    assert 'data-change="merge"' in page and "the deploy pipeline runs on helm" in page
    page = alice.get("/owners/alice?q=nightly+backups").text
    assert "replaces 1 earlier version" in page and 'data-change="supersede"' in page
    assert "moved after the batch" in page and "02:00" in page


def test_refuses_a_public_address_without_tokens(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(ConfigurationError, match="without a token map"):
        review_cli.serve(MemorySettings(backend="memory"), "0.0.0.0", 0, None)
    monkeypatch.delenv("DREAM_MEMORY_MCP_TOKENS", raising=False)
    monkeypatch.delenv("DREAM_MEMORY_SYSTEM", raising=False)
    assert cli_main(["review", "--host", "192.0.2.1"]) == 2
    assert "without a token map" in capsys.readouterr().err
    assert review_cli.is_loopback("127.0.0.1") and review_cli.is_loopback("::1")
    assert not review_cli.is_loopback("0.0.0.0")


def test_what_an_item_supersedes_is_found_in_the_snapshot() -> None:
    from dream_memory_actor.models import MemoryFact, MemoryPendingItem, MemoryRule
    from dream_memory_actor.review.render import replaced

    rule = MemoryRule(content="Answer in English")
    snap = MemorySnapshot(owner="alice", rules=(rule,), facts=(MemoryFact(content="x"),))
    names = MemoryPendingItem(kind="rule", content="Answer in Chinese", confidence=0.9,
                              supersedes=rule.id, supersedes_content=rule.content)
    assert replaced(names, snap) == ("the rule it supersedes", "Answer in English")
    gone = MemoryPendingItem(kind="fact", content="y", confidence=0.9, supersedes="old-id",
                             supersedes_content="the old words")
    found = replaced(gone, snap)
    assert found is not None and found.text == "the old words"
    plain = MemoryPendingItem(kind="rule", content="z", confidence=0.9)
    assert replaced(plain, snap) is None
