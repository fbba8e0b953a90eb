"""Who is looking: login by token, server-side sessions, CSRF and one-time forms.

A reviewer logs in with a token of the MCP server's token map (:mod:`..engine.auth`);
the session keeps the token's grant (its name and owners), never the token. The
browser holds only a random session id in a cookie that is ``HttpOnly``,
``SameSite=Strict`` and, when served over https, ``Secure``. A session ends after
``idle_s`` without a request or ``max_age_s`` after login, whichever comes first.

Every form carries the session's CSRF token and a one-time form id. A post is
accepted only with both: the CSRF token proves the page came from this server to
this login; the form id, spent by the first post, makes a replayed form fail
instead of acting twice. The login form, before any session exists, is protected
by a double-submit cookie.
"""

from __future__ import annotations

import hmac
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from ..engine.auth import Grant
from ..errors import DreamMemoryError

COOKIE = "dm_review"
LOGIN_COOKIE = "dm_review_login"
#: Forms issued and not yet posted, per session (the oldest are forgotten first).
MAX_OPEN_FORMS = 2000
#: Spent form ids remembered per session, to tell a replay from a forgery.
MAX_SPENT_FORMS = 2000


class ReviewError(DreamMemoryError):
    """A request the review pages refuse; ``status`` is its HTTP status."""

    status = 400


class NotLoggedIn(ReviewError):
    status = 401


class Forbidden(ReviewError):
    status = 403


class ReplayedForm(ReviewError):
    """The form was posted before (to the same place, in the same session)."""

    status = 409


@dataclass
class Session:
    id: str
    grant: Grant
    csrf: str
    created: float
    seen: float
    #: form id -> what the form is for (e.g. ``confirm:alice:<pending id>``)
    open_forms: OrderedDict[str, str] = field(default_factory=OrderedDict)
    spent_forms: OrderedDict[str, str] = field(default_factory=OrderedDict)

    def issue(self, purpose: str) -> str:
        """A one-time form id for a form that does ``purpose``."""
        form_id = secrets.token_urlsafe(16)
        self.open_forms[form_id] = purpose
        while len(self.open_forms) > MAX_OPEN_FORMS:
            self.open_forms.popitem(last=False)
        return form_id

    def check_csrf(self, csrf: str) -> None:
        """``Forbidden`` unless ``csrf`` is this login's CSRF token."""
        if not csrf or not hmac.compare_digest(csrf.encode(), self.csrf.encode()):
            raise Forbidden(
                "the form's CSRF token is missing or wrong; nothing was done. "
                "Reload the page and try again."
            )

    def spend(self, csrf: str, form_id: str, purpose: str) -> None:
        """Accept a posted form once: CSRF token of this login, an open form id issued
        for this ``purpose``. ``Forbidden`` for a forgery, ``ReplayedForm`` for a replay."""
        self.check_csrf(csrf)
        if form_id in self.spent_forms and self.spent_forms[form_id] == purpose:
            raise ReplayedForm("this form was already submitted; nothing was done again")
        if self.open_forms.get(form_id) != purpose:
            raise Forbidden(
                "this form was not issued to this login (or it is too old); "
                "nothing was done. Reload the page and try again."
            )
        del self.open_forms[form_id]
        self.spent_forms[form_id] = purpose
        while len(self.spent_forms) > MAX_SPENT_FORMS:
            self.spent_forms.popitem(last=False)


class SessionStore:
    """Sessions of this server process (in memory: a restart logs everyone out)."""

    def __init__(
        self,
        *,
        idle_s: float = 1800.0,
        max_age_s: float = 12 * 3600.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.idle_s = idle_s
        self.max_age_s = max_age_s
        self.clock = clock
        self._sessions: dict[str, Session] = {}

    def create(self, grant: Grant) -> Session:
        now = self.clock()
        for k in [k for k, s in self._sessions.items() if self._expired(s, now)]:
            del self._sessions[k]
        s = Session(
            id=secrets.token_urlsafe(32),
            grant=grant,
            csrf=secrets.token_urlsafe(32),
            created=now,
            seen=now,
        )
        self._sessions[s.id] = s
        return s

    def get(self, session_id: str | None) -> Session:
        """The live session ``session_id``; ``NotLoggedIn`` if there is none or it expired."""
        now = self.clock()
        s = self._sessions.get(session_id or "")
        if s is None:
            raise NotLoggedIn("you are not logged in (or the server was restarted)")
        if self._expired(s, now):  # kept until the next login prunes it, so every page says why
            raise NotLoggedIn("your session expired; log in again")
        s.seen = now
        return s

    def end(self, session_id: str | None) -> None:
        self._sessions.pop(session_id or "", None)

    def _expired(self, s: Session, now: float) -> bool:
        return now - s.seen > self.idle_s or now - s.created > self.max_age_s


def same_token(a: str | None, b: str | None) -> bool:
    """Both present and equal (constant time): the login form's double-submit check."""
    return bool(a) and bool(b) and hmac.compare_digest(str(a).encode(), str(b).encode())
