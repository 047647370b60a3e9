"""Routes for mail clients and people, without a key: the open pixel, the click redirect
and one-click unsubscribe (RFC 8058). A bad token changes nothing and says little."""

from __future__ import annotations

import html

from flask import Response, redirect

from app.api.blueprint import Blueprint
from app.api.context import context
from app.content.tokens import Purpose, verify
from app.content.tracking import PIXEL
from app.enums import EventType
from app.errors import abort, any_body
from app.services import engagement, unsubscribe

blp = Blueprint("public", __name__, description="Tracking pixel, click redirect, one-click unsubscribe.")


@blp.route("/t/o/<token>", methods=["GET"])
def open_pixel(token: str) -> Response:
    """A 1x1 GIF, always; an authentic, current token records the open."""
    verified = verify(Purpose.OPEN, token)
    if verified is not None and not verified.expired:
        engagement.record(context().db, verified.claims["p"], verified.claims["m"], EventType.OPENED)
    return Response(PIXEL, mimetype="image/gif", headers={"Cache-Control": "no-store, private"})


@blp.route("/t/c/<token>", methods=["GET"])
def click(token: str) -> Response:
    """302 to the link the message carried; an expired token still redirects but records nothing."""
    verified = verify(Purpose.CLICK, token)
    if verified is None or not isinstance(verified.claims.get("u"), str):
        abort(404, "This link is not one we made.")
    if not verified.expired:
        engagement.record(
            context().db, verified.claims["p"], verified.claims["m"], EventType.CLICKED, verified.claims["u"]
        )
    return redirect(verified.claims["u"], code=302)


@blp.route("/u/<token>", methods=["GET"])
def unsubscribe_page(token: str) -> Response:
    """A confirmation page with one button; a GET never unsubscribes (link scanners follow GETs)."""
    if _unsubscribe_claims(token) is None:
        return _page("This unsubscribe link is not valid.", "It may be old or mistyped.", status=404)
    button = '<form method="post"><input type="hidden" name="List-Unsubscribe" value="One-Click">'
    button += '<button type="submit">Unsubscribe</button></form>'
    return _page("Unsubscribe?", "You will no longer receive these emails.", extra=button)


@blp.route("/u/<token>", methods=["POST"])
@any_body
def unsubscribe_now(token: str) -> Response:
    """RFC 8058 one-click: the mail client POSTs `List-Unsubscribe=One-Click`; 200 when done."""
    claims = _unsubscribe_claims(token)
    if claims is None or not unsubscribe.unsubscribe(context().db, claims):
        return _page("This unsubscribe link is not valid.", "It may be old or mistyped.", status=404)
    return _page("You are unsubscribed.", "You will no longer receive these emails.")


def _unsubscribe_claims(token: str) -> dict | None:
    verified = verify(Purpose.UNSUBSCRIBE, token)
    return None if verified is None or verified.expired else verified.claims


def _page(title: str, text: str, extra: str = "", status: int = 200) -> Response:
    body = (
        '<!doctype html><html><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">'
        f"<title>{html.escape(title)}</title></head><body><h1>{html.escape(title)}</h1>"
        f"<p>{html.escape(text)}</p>{extra}</body></html>"
    )
    return Response(body, status=status, mimetype="text/html", headers={"Cache-Control": "no-store"})
