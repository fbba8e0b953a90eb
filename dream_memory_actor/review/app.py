"""The review pages: routes of a Starlette app over the doors' memory interface
(``engine.doors.MemoryBackend``).

``GET /`` lists the owners the reviewer may see with what waits for them;
``GET /owners/{owner}`` shows one owner's queue, snapshot, audit trail (``?page=``)
and search (``?q=``); ``POST /owners/{owner}/pending/{id}`` confirms (optionally
with an edit) or rejects one item. A post from the page's script gets only the
item's card back, to replace it in place; a plain form post gets the whole page.
A consolidation proposal is a before/after card; a confirmed one is undone from the
audit trail (``POST /owners/{owner}/proposals/{id}/undo``, answered with the page).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from importlib import resources
from typing import Any
from urllib.parse import quote

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from .. import validation as check
from ..engine import operations as ops
from ..engine.auth import TokenMap
from ..engine.doors import MemoryBackend
from ..errors import DreamMemoryError, InvalidInput
from ..extraction.service import HitlDecision
from ..models import AuditAction, MemoryPendingItem, MemorySnapshot, utcnow
from . import decisions
from .access import (
    Review,
    current_session,
    login,
    login_page,
    logout,
    refusal,
    review_of,
    with_session,
)
from .decisions import AUDIT_REACH, decision_of, in_place
from .render import proposed, stamp
from .sessions import (
    Forbidden,
    ReplayedForm,
    ReviewError,
    Session,
    SessionStore,
)
from .web import page, read_form, same_origin, status_of, wants_fragment

AUDIT_PAGE = 20
SEARCH_LIMIT = 10
_ACTIONS: dict[str, AuditAction] = {"confirm": "confirmed", "reject": "rejected"}


# -- pages -----------------------------------------------------------------------------------


async def _overview(review: Review, session: Session) -> list[dict[str, Any]]:
    """The reviewer's owners, most waiting first, then the oldest waiting first."""
    rows: list[dict[str, Any]] = []
    for owner in review.listed(session.grant):
        snap = await review.backend.snapshot(owner)
        oldest = min((p.created_at for p in snap.pending), default=None)
        rows.append({"owner": owner, "count": len(snap.pending), "oldest": oldest})
    rows.sort(key=lambda r: (-r["count"], r["oldest"] or utcnow(), r["owner"]))
    return rows


def _page_number(raw: str | None) -> int:
    pages = AUDIT_REACH // AUDIT_PAGE
    if raw is None or raw == "":
        return 1
    if not (raw.isascii() and raw.isdigit()) or not 1 <= int(raw) <= pages:  # not "²"
        raise ReviewError(f"page must be a number in 1..{pages}")
    return int(raw)


def _forms(session: Session, owner: str, items: Iterable[MemoryPendingItem]) -> dict[str, str]:
    return {p.id: session.issue(f"decide:{owner}:{p.id}") for p in items}


def _undo_forms(session: Session, owner: str, undo: dict[str, bool]) -> dict[str, str]:
    return {pid: session.issue(f"undo:{owner}:{pid}") for pid, applied in undo.items()
            if applied}


async def _owner_context(
    review: Review, session: Session, owner: str, request: Request
) -> dict[str, Any]:
    number = _page_number(request.query_params.get("page"))
    query = request.query_params.get("q", "").strip()
    snap = await review.backend.snapshot(owner)
    entries = await review.backend.call(ops.audit, owner,
                                        min(AUDIT_REACH, number * AUDIT_PAGE + 1))
    hits: list[Any] = []
    search_error = None
    earlier: list[list[Any]] = []
    if query:
        try:
            hits = await review.backend.search([owner], query, SEARCH_LIMIT)
        except InvalidInput as exc:
            search_error = str(exc)
        # What each found memory was before: the wordings merged into it, the versions
        # it replaced (its history without the current version).
        chains = await asyncio.gather(
            *(review.backend.call(ops.memory_history, owner, h.memory.id) for h in hits))
        earlier = [[v for v in chain if v.valid_to is not None] for chain in chains]
    shown = entries[(number - 1) * AUDIT_PAGE : number * AUDIT_PAGE]
    undo = await in_place(review.backend, owner, shown, entries)
    return {
        "session": session,
        "owner": owner,
        "snap": snap,
        "route": review.backend.route,
        "forms": _forms(session, owner, snap.pending),
        "messages": {},
        "results": [],
        "audit": shown,
        "undo": undo,
        "undo_forms": _undo_forms(session, owner, undo),
        "notice": None,
        "page": number,
        "has_next": len(entries) > number * AUDIT_PAGE,
        "query": query,
        "hits": hits,
        "earlier": earlier,
        "search_error": search_error,
        "max_bytes": review.backend.settings.max_content_bytes,
    }


async def overview(request: Request) -> Response:
    review = review_of(request)
    session = None
    try:
        session = current_session(review, request)
        rows = await _overview(review, session)
    except DreamMemoryError as exc:
        return refusal(request, exc, session)
    response = page(
        "overview.html",
        rows=rows,
        session=session,
        route=review.backend.route,
        all_owners=session.grant.all_owners,
    )
    return with_session(response, request, session)


async def open_owner(request: Request) -> Response:
    owner = request.query_params.get("owner", "").strip()
    return RedirectResponse(f"/owners/{quote(owner, safe='')}", status_code=303)


async def owner_page(request: Request) -> Response:
    review = review_of(request)
    session = None
    try:
        session = current_session(review, request)
        owner = session.grant.owner(request.path_params["owner"])
        context = await _owner_context(review, session, owner, request)
    except DreamMemoryError as exc:
        return refusal(request, exc, session)
    return with_session(page("owner.html", **context), request, session)


# -- decisions -------------------------------------------------------------------------------


async def decide(request: Request) -> Response:
    """Confirm or reject one pending item, once."""
    review = review_of(request)
    session = owner = None
    pending_id = request.path_params["pending_id"]
    try:
        session = current_session(review, request)
        owner = session.grant.owner(request.path_params["owner"])
        check.ids([pending_id], "pending item id")
        same_origin(request)
        form = await read_form(request)
        session.spend(form.get("csrf", ""), form.get("form", ""), f"decide:{owner}:{pending_id}")
        action = _ACTIONS.get(form.get("action", ""))
        if action is None:
            raise ReviewError("choose confirm or reject; nothing was done")
        edited = _edit(review, await review.backend.snapshot(owner), pending_id, action, form)
        outcome = await decisions.decide(review.backend, owner, pending_id, action,
                                         session.grant.name, edited)
    except ReplayedForm as exc:
        assert session is not None and owner is not None
        return await _replayed(request, review, session, owner, pending_id, exc)
    except DreamMemoryError as exc:
        if session is None or owner is None or isinstance(exc, Forbidden):
            return refusal(request, exc, session)
        return await _retry(request, review, session, owner, pending_id, exc)
    return await _result(request, review, session, owner, outcome)


def _edit(
    review: Review, snap: MemorySnapshot, pending_id: str, action: AuditAction, form: dict[str, str]
) -> str | None:
    """The edited text of a confirmation, or ``None`` (unchanged, or not a confirmation)."""
    if action != "confirmed" or "edited" not in form:
        return None
    text = form["edited"].strip()
    if not text:
        raise ReviewError("the edited content is empty; nothing was done")
    text = check.content(text, review.backend.settings.max_content_bytes, "edited content")
    item = next((p for p in snap.pending if p.id == pending_id), None)
    return None if item is not None and text == proposed(item) else text


async def _result(
    request: Request, review: Review, session: Session, owner: str, outcome: HitlDecision
) -> Response:
    status = 200 if outcome.applied else 409
    if wants_fragment(request):
        return page("result.html", status, outcome=outcome, session=session)
    context = await _owner_context(review, session, owner, request)
    context["results"] = [outcome]
    return page("owner.html", status, **context)


async def _replayed(
    request: Request,
    review: Review,
    session: Session,
    owner: str,
    pending_id: str,
    exc: ReplayedForm,
) -> Response:
    """A form posted again: the decision it made, if it made one; never a second write."""
    entry = await decision_of(review.backend, owner, pending_id)
    if entry is None:
        return refusal(request, exc, session)
    return await _result(request, review, session, owner,
                         HitlDecision(entry=entry, applied=False))


async def _retry(
    request: Request,
    review: Review,
    session: Session,
    owner: str,
    pending_id: str,
    exc: DreamMemoryError,
) -> Response:
    """A refused decision: the message, and the item's card again with a fresh form."""
    try:
        snap = await review.backend.snapshot(owner)
    except DreamMemoryError:
        return refusal(request, exc, session)
    item = next((p for p in snap.pending if p.id == pending_id), None)
    if item is None:
        return refusal(request, exc, session)
    status = status_of(exc)
    if wants_fragment(request):
        return page(
            "card.html",
            status,
            item=item,
            snap=snap,
            owner=owner,
            message=str(exc),
            form_id=_forms(session, owner, [item])[item.id],
            session=session,
            max_bytes=review.backend.settings.max_content_bytes,
        )
    context = await _owner_context(review, session, owner, request)
    context["messages"] = {pending_id: str(exc)}
    return page("owner.html", status, **context)


async def undo(request: Request) -> Response:
    """Undo one confirmed consolidation proposal: the page again, saying what came back."""
    review = review_of(request)
    session = owner = None
    pending_id = request.path_params["pending_id"]
    try:
        session = current_session(review, request)
        owner = session.grant.owner(request.path_params["owner"])
        check.ids([pending_id], "pending item id")
        same_origin(request)
        form = await read_form(request)
        session.spend(form.get("csrf", ""), form.get("form", ""), f"undo:{owner}:{pending_id}")
        done = await review.backend.call(ops.undo_proposal, owner, pending_id,
                                         session.grant.name)
    except DreamMemoryError as exc:
        if session is None or owner is None or isinstance(exc, (Forbidden, ReplayedForm)):
            return refusal(request, exc, session)
        return await _told(request, review, session, owner, "error", str(exc), status_of(exc))
    e = done.entry
    n = e.restored or 0
    when = "" if done.applied else f" by {e.by} at {stamp(e.at)}"
    back = ("the status value back" if e.item.status_expiry
            else f"{n} {'memory' if n == 1 else 'memories'} back")
    return await _told(request, review, session, owner, "ok", (
        f"Undone{when}: {e.item.describe()} ({back} as before it; the proposal waits for "
        "a decision again)"), 200)


async def _told(request: Request, review: Review, session: Session, owner: str, kind: str,
                message: str, status: int) -> Response:
    """The notice alone for the page's script (it reads the audit trail again), else the
    page with the notice above the audit trail."""
    if wants_fragment(request):
        return page("notice.html", status, kind=kind, message=message, login=False)
    context = await _owner_context(review, session, owner, request)
    context["notice"] = {"kind": kind, "message": message}
    return page("owner.html", status, **context)


# -- the app ---------------------------------------------------------------------------------


def _static(name: str, media_type: str) -> Route:
    body = (
        resources.files("dream_memory_actor.review")
        .joinpath("templates")
        .joinpath(name)
        .read_bytes()
    )

    async def serve(request: Request) -> Response:
        return Response(
            body,
            media_type=media_type,
            headers={"X-Content-Type-Options": "nosniff", "Cache-Control": "max-age=300"},
        )

    return Route(f"/static/{name}", serve)


#: The host names the pages answer to unless told others: this machine's own.
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")


class _HostAllowList:
    """Answers only requests whose ``Host`` names an allowed host (any port), else 421
    Misdirected Request, as the MCP server does. A web page the local user visits can
    point its own name at 127.0.0.1 (DNS rebinding); its requests then carry that name
    and are refused, so it cannot read or decide the queue through the user's browser."""

    def __init__(self, app: Any, hosts: Iterable[str]) -> None:
        self.app = app
        self.hosts = frozenset(h.lower().strip("[]") for h in hosts)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and _host_name(scope) not in self.hosts:
            response = Response("misdirected request: this host name is not served here\n",
                                status_code=421, media_type="text/plain")
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


def _host_name(scope: Any) -> str:
    raw = next((v for k, v in scope.get("headers", ()) if k == b"host"), b"").decode("latin-1")
    name = raw.lower()
    if name.startswith("["):  # [::1]:8766
        return name[1:name.find("]")] if "]" in name else name
    return name.rsplit(":", 1)[0] if name.count(":") == 1 else name


def create_app(
    backend: MemoryBackend,
    tokens: TokenMap | None,
    *,
    owners: Iterable[str] = (),
    sessions: SessionStore | None = None,
    allowed_hosts: Iterable[str] = LOOPBACK_HOSTS,
) -> Starlette:
    """The review app over ``backend``. ``tokens``: who may log in (``None``: the local
    user, for a server bound to loopback only). ``owners``: listed on the overview for a
    token that grants every owner (others may be opened by name). ``allowed_hosts``: the
    host names requests may carry (``Host``, any port); others get 421."""
    if tokens is not None and not len(tokens):
        raise ReviewError("the token map is empty: nobody could log in")
    app = Starlette(
        middleware=[Middleware(_HostAllowList, hosts=tuple(allowed_hosts))],
        routes=[
            Route("/", overview),
            Route("/login", login_page),
            Route("/login", login, methods=["POST"]),
            Route("/logout", logout, methods=["POST"]),
            Route("/open", open_owner),
            Route("/owners/{owner}", owner_page),
            Route("/owners/{owner}/pending/{pending_id}", decide, methods=["POST"]),
            Route("/owners/{owner}/proposals/{pending_id}/undo", undo, methods=["POST"]),
            _static("review.css", "text/css"),
            _static("review.js", "text/javascript"),
            Route("/favicon.ico", lambda request: Response(status_code=204)),
        ]
    )
    app.state.review = Review(
        backend, tokens, sessions or SessionStore(), tuple(check.owner_id(o) for o in owners)
    )
    return app
