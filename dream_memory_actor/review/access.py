"""Who is looking: the app's state, the session of a request, the login page, refusals."""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ..engine.auth import LOCAL, Grant, TokenMap
from ..engine.doors import MemoryBackend
from ..errors import DreamMemoryError
from .sessions import (
    COOKIE,
    LOGIN_COOKIE,
    NotLoggedIn,
    ReviewError,
    Session,
    SessionStore,
    same_token,
)
from .web import page, read_form, same_origin, set_cookie, status_of, wants_fragment


@dataclass
class Review:
    """The app's state: where decisions go, who may log in, and the live sessions."""

    backend: MemoryBackend
    tokens: TokenMap | None
    sessions: SessionStore
    #: owners listed on the overview for a token granting every owner ("*")
    owners: tuple[str, ...] = ()

    def listed(self, grant: Grant) -> list[str]:
        mine = set() if grant.all_owners else set(grant.owners)
        return sorted(mine | {o for o in self.owners if grant.all_owners or o in grant.owners})


def review_of(request: Request) -> Review:
    review: Review = request.app.state.review
    return review


def current_session(review: Review, request: Request) -> Session:
    """The reviewer's session. Without a token map (loopback only) the local user gets one
    on the first page; with one, ``NotLoggedIn`` until the login page is used."""
    try:
        return review.sessions.get(request.cookies.get(COOKIE))
    except NotLoggedIn:
        if review.tokens is None and request.method == "GET":
            return review.sessions.create(LOCAL)
        raise


def with_session(response: Response, request: Request, session: Session) -> Response:
    if request.cookies.get(COOKIE) != session.id:
        set_cookie(response, request, COOKIE, session.id)
    return response


def refusal(request: Request, exc: BaseException, session: Session | None = None) -> Response:
    review = review_of(request)
    status = status_of(exc)
    if isinstance(exc, NotLoggedIn) and review.tokens is not None and not wants_fragment(request):
        if request.method == "GET" and COOKIE not in request.cookies:
            return RedirectResponse("/login", status_code=303)  # a first visit
        return _login(request, str(exc), status)
    text = str(exc) if isinstance(exc, DreamMemoryError) else "internal error"
    if wants_fragment(request):
        login = isinstance(exc, NotLoggedIn) and review.tokens is not None
        return page("notice.html", status, kind="error", message=text, login=login)
    return page("error.html", status, message=text, session=session, route=review.backend.route)


# -- login -----------------------------------------------------------------------------------


def _login(request: Request, message: str | None, status: int) -> Response:
    nonce = request.cookies.get(LOGIN_COOKIE) or secrets.token_urlsafe(24)
    response = page(
        "login.html",
        status,
        message=message,
        login_csrf=nonce,
        session=None,
        route=review_of(request).backend.route,
    )
    set_cookie(response, request, LOGIN_COOKIE, nonce, max_age=3600, path="/login")
    return response


async def login_page(request: Request) -> Response:
    if review_of(request).tokens is None:
        return RedirectResponse("/", status_code=303)
    return _login(request, None, 200)


async def login(request: Request) -> Response:
    review = review_of(request)
    if review.tokens is None:
        return RedirectResponse("/", status_code=303)
    try:
        same_origin(request)
        form = await read_form(request)
    except ReviewError as exc:
        return _login(request, str(exc), exc.status)
    if not same_token(form.get("csrf"), request.cookies.get(LOGIN_COOKIE)):
        return _login(
            request, "the login form expired or was not sent by this page; try again", 403
        )
    grant = review.tokens.verify(form.get("token", ""))
    if grant is None:
        return _login(request, "that token is not known to this server", 401)
    review.sessions.end(request.cookies.get(COOKIE))  # a fresh session id at every login
    session = review.sessions.create(grant)
    response = RedirectResponse("/", status_code=303)
    set_cookie(response, request, COOKIE, session.id)
    response.delete_cookie(LOGIN_COOKIE, path="/login")
    return response


async def logout(request: Request) -> Response:
    review = review_of(request)
    try:
        session = review.sessions.get(request.cookies.get(COOKIE))
        same_origin(request)
        session.check_csrf((await read_form(request)).get("csrf", ""))
    except ReviewError as exc:
        return refusal(request, exc)
    review.sessions.end(session.id)
    response = RedirectResponse("/login" if review.tokens else "/", status_code=303)
    response.delete_cookie(COOKIE, path="/")
    return response
