"""HTTP plumbing of the review pages: responses with safe headers, cookies, posted forms."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from ..engine.auth import AccessDenied
from ..errors import InvalidInput, NotFound
from .render import render
from .sessions import Forbidden, ReviewError

#: A posted form larger than this is refused unread (the content limit is far below).
MAX_FORM_BYTES = 256 * 1024
#: Sent by the page's script: answer with the item's card only, not the whole page.
FETCH_HEADER = "x-review-fetch"
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'self'; script-src 'self'; "
    "img-src 'self'; connect-src 'self'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


class TooLarge(ReviewError):
    status = 413


def status_of(exc: BaseException) -> int:
    """The HTTP status of a refused request."""
    if isinstance(exc, ReviewError):
        return exc.status
    if isinstance(exc, AccessDenied):
        return 403
    if isinstance(exc, InvalidInput):
        return 400
    if isinstance(exc, NotFound):
        return 404
    return 503


def page(template: str, status: int = 200, **context: Any) -> HTMLResponse:
    return HTMLResponse(render(template, **context), status_code=status, headers=HEADERS)


def wants_fragment(request: Request) -> bool:
    return bool(request.headers.get(FETCH_HEADER))


def set_cookie(
    response: Response,
    request: Request,
    name: str,
    value: str,
    max_age: int | None = None,
    path: str = "/",
) -> None:
    """A cookie scripts cannot read, sent to this site only, over https only when served so."""
    response.set_cookie(
        name,
        value,
        max_age=max_age,
        path=path,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


async def read_form(request: Request) -> dict[str, str]:
    """The url-encoded body, first value of each field; ``TooLarge`` past the limit."""
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > MAX_FORM_BYTES):
        raise TooLarge("the form is too large; nothing was done")
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise TooLarge("the form is too large; nothing was done")
    try:
        fields = parse_qs(body.decode("utf-8"), keep_blank_values=True)
    except UnicodeDecodeError as exc:
        raise ReviewError("the form is not UTF-8 text; nothing was done") from exc
    return {k: v[0] for k, v in fields.items()}


def same_origin(request: Request) -> None:
    """Refuse a post whose browser says it comes from another site."""
    origin = request.headers.get("origin")
    if origin and origin.rstrip("/") != str(request.base_url).rstrip("/"):
        raise Forbidden("the form was posted from another site; nothing was done")
