"""Routes for mail clients and people, without a key: the open pixel, the click redirect
and one-click unsubscribe (RFC 8058). A bad token changes nothing and says little."""

from __future__ import annotations

import html
import time

from flask import Response, redirect
from werkzeug.wrappers import Response as WerkzeugResponse

from app.api.blueprint import Blueprint
from app.api.context import context
from app.api.contract import EVENTS, PUBLIC
from app.content.tokens import Purpose, verify
from app.content.tracking import PIXEL
from app.enums import EventType
from app.errors import abort, any_body
from app.page_headers import page_headers
from app.schemas.audience import PREFERENCE_LINK_LIFETIME
from app.services import engagement, preference_page, unsubscribe

blp = Blueprint(
    "public", __name__, access=PUBLIC, tag=EVENTS, description="Tracking pixel, click redirect, one-click unsubscribe."
)


def html_page(description: str, title: str) -> dict[str, object]:
    """How the spec shows an answer that is a small page for a person."""
    example = f"<!doctype html><html><head><title>{title}</title></head><body><h1>{title}</h1></body></html>"
    return {"description": description, "content": {"text/html": {"schema": {"type": "string"}, "example": example}}}


NOT_AN_UNSUBSCRIBE_LINK = html_page("The link is not one we made, or too old.", "This unsubscribe link is not valid.")


@blp.route("/t/o/<token>", methods=["GET"])
@blp.doc(
    responses={
        "200": {
            "description": "A transparent 1x1 GIF, `Cache-Control: no-store, private`.",
            "content": {"image/gif": {"schema": {"type": "string", "format": "binary"}}},
        }
    }
)
def open_pixel(token: str) -> Response:
    """Open-tracking pixel.

    A 1x1 GIF, always; an authentic, current token records the open.
    """
    verified = verify(Purpose.OPEN, token)
    if verified is not None and not verified.expired:
        engagement.record(context().db, verified.claims["p"], verified.claims["m"], EventType.OPENED)
    return Response(PIXEL, mimetype="image/gif", headers={"Cache-Control": "no-store, private"})


@blp.route("/t/c/<token>", methods=["GET"])
@blp.doc(
    responses={
        "302": {
            "description": "To the link the message carried.",
            "headers": {"Location": {"schema": {"type": "string"}, "example": "https://acme.example/orders/17"}},
        }
    }
)
@blp.alt_response(404, description="The link is not one we made.")
def click(token: str) -> WerkzeugResponse:
    """Click-tracking redirect.

    302 to the link the message carried; an expired token still redirects but records nothing.
    """
    verified = verify(Purpose.CLICK, token)
    if verified is None or not isinstance(verified.claims.get("u"), str):
        abort(404, "This link is not one we made.")
    if not verified.expired:
        engagement.record(
            context().db, verified.claims["p"], verified.claims["m"], EventType.CLICKED, verified.claims["u"]
        )
    return redirect(verified.claims["u"], code=302)


@blp.route("/u/<token>", methods=["GET"])
@blp.doc(responses={"200": html_page("The page with its one button.", "Unsubscribe?"), "404": NOT_AN_UNSUBSCRIBE_LINK})
def unsubscribe_page(token: str) -> Response:
    """Unsubscribe page.

    A confirmation page with one button; a GET never unsubscribes (link scanners follow GETs).
    """
    claims = _unsubscribe_claims(token)
    if claims is None:
        return _page("This unsubscribe link is not valid.", "It may be old or mistyped.", status=404)
    button = '<form method="post"><input type="hidden" name="List-Unsubscribe" value="One-Click">'
    button += '<button type="submit">Unsubscribe</button></form>'
    return _page("Unsubscribe?", "You will no longer receive these emails.", extra=button + _choices(claims))


@blp.route("/u/<token>", methods=["POST"])
@blp.doc(
    requestBody={
        "content": {
            "application/x-www-form-urlencoded": {
                "schema": {"type": "object", "properties": {"List-Unsubscribe": {"type": "string"}}},
                "example": {"List-Unsubscribe": "One-Click"},
            }
        }
    },
    responses={"200": html_page("Unsubscribed.", "You are unsubscribed."), "404": NOT_AN_UNSUBSCRIBE_LINK},
)
@any_body
def unsubscribe_now(token: str) -> Response:
    """One-click unsubscribe.

    RFC 8058 one-click: the mail client POSTs `List-Unsubscribe=One-Click`; 200 when done.
    """
    claims = _unsubscribe_claims(token)
    if claims is None or not unsubscribe.unsubscribe(context().db, claims):
        return _page("This unsubscribe link is not valid.", "It may be old or mistyped.", status=404)
    return _page("You are unsubscribed.", "You will no longer receive these emails.", extra=_choices(claims))


def _choices(claims: dict) -> str:
    """A way on to the preference page, for a message that went to a subscriber: there one can
    keep some kinds of message rather than lose them all."""
    if claims.get("s") is None:
        return ""
    expires_at = int(time.time() + PREFERENCE_LINK_LIFETIME)
    url = preference_page.link_until(context().db, "", claims["p"], claims["s"], expires_at)
    return "" if url is None else f'<p><a href="{html.escape(url)}">Choose what you receive instead</a></p>'


def _unsubscribe_claims(token: str) -> dict | None:
    verified = verify(Purpose.UNSUBSCRIBE, token)
    return None if verified is None or verified.expired else verified.claims


# The unsubscribe pages hold a key to a recipient's choices in their URL: the preference
# page's guard rails, and a policy that allows no script, style or frame at all.
PAGE_HEADERS = page_headers(
    "default-src 'none'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    Cache_Control="no-store",
    X_Robots_Tag="noindex, nofollow",
)


def _page(title: str, text: str, extra: str = "", status: int = 200) -> Response:
    body = (
        '<!doctype html><html><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">'
        f"<title>{html.escape(title)}</title></head><body><h1>{html.escape(title)}</h1>"
        f"<p>{html.escape(text)}</p>{extra}</body></html>"
    )
    return Response(body, status=status, mimetype="text/html", headers=PAGE_HEADERS)
