"""The recipient's preference page, `/p/<token>`: server-rendered HTML, no key, no cookie.

What it shows and saves is app.services.preference_page. Here: the HTTP side, and the
headers that keep it a page of its own: a CSP that allows only our stylesheet (no script
at all) and forms posted back to us, no framing, and no Referer, since the URL is the key.
"""

from __future__ import annotations

from flask import Response, render_template, request

from app.api.blueprint import Blueprint
from app.api.context import context
from app.api.contract import AUDIENCE, PUBLIC
from app.api.public import html_page
from app.errors import any_body
from app.page_headers import page_headers
from app.services import preference_page
from app.services.preference_page import PageView

blp = Blueprint(
    "preference_page",
    __name__,
    access=PUBLIC,
    tag=AUDIENCE,
    description="The recipient's preference page, reached by a signed link.",
    template_folder="templates",
    static_folder="static",
    static_url_path="/p/static",
)

SECURITY_HEADERS = page_headers(
    "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    X_Robots_Tag="noindex, nofollow",
    Cross_Origin_Opener_Policy="same-origin",
)
GONE = "This link does not work any more. Use the link in a recent message, or ask for a new one."
# The heading of a refusal: a link that leads nowhere, or a form refused (400, 403).
HEADINGS = {404: "This link does not work"}
NOT_SAVED = "Your choices were not saved"


@blp.after_request
def secure(response: Response) -> Response:
    response.headers.update(SECURITY_HEADERS)
    if request.endpoint != "preference_page.static":
        response.headers["Cache-Control"] = "no-store"
    return response


PAGE = html_page("The subscriber's switches, by category and channel, with quiet hours.", "Your preferences")
LINK_GONE = html_page("The link is forged, expired, or its subscriber was erased.", "This link does not work")


@blp.route("/p/<token>", methods=["GET"])
@blp.doc(responses={"200": PAGE, "404": LINK_GONE})
def show(token: str) -> Response:
    """Preference page.

    The subscriber's switches as they stand, for a person in a browser; the link is the key.
    """
    holder = preference_page.holder(token)
    page = None if holder is None else preference_page.view(context().db, holder)
    if holder is None or page is None:
        return _problem(404, GONE)
    return _page(token, holder.project_id, page)


@blp.route("/p/<token>", methods=["POST"])
@any_body
@blp.doc(
    requestBody={
        "content": {
            "application/x-www-form-urlencoded": {
                "schema": {"type": "object", "properties": {"csrf": {"type": "string"}}},
                "example": {"csrf": "…", "news.email": "on", "time_zone": "Europe/Paris"},
            }
        }
    },
    responses={
        "200": PAGE,
        "400": html_page("The form came without its CSRF token.", NOT_SAVED),
        "403": html_page("The form's CSRF token is another page's, or expired.", NOT_SAVED),
        "404": LINK_GONE,
        "422": html_page("Quiet hours or time zone not understood; the page marks the fields.", "Your preferences"),
    },
)
def save(token: str) -> Response:
    """Save preferences from the page.

    The form of the preference page; 400/403 without its CSRF token or with another page's,
    422 for bad times, each as a page saying the choices were not saved.
    """
    holder = preference_page.holder(token)
    if holder is None:
        return _problem(404, GONE)
    refusal = preference_page.csrf_refusal(holder.project_id, token, request.form.get("csrf"))
    if refusal is not None:
        return _problem(*refusal)
    page = preference_page.save(context().db, holder, request.form)
    if page is None:
        return _problem(404, GONE)
    return _page(token, holder.project_id, page, saved=not page.errors, status=422 if page.errors else 200)


def _page(token: str, project_id: str, page: PageView, saved: bool = False, status: int = 200) -> Response:
    html = render_template(
        "preference_page/page.html",
        page=page,
        csrf=preference_page.csrf_token(project_id, token),
        zones=preference_page.time_zones(),
        saved=saved,
    )
    return Response(html, status=status, mimetype="text/html")


def _problem(status: int, text: str) -> Response:
    heading = HEADINGS.get(status, NOT_SAVED)
    page = render_template("preference_page/problem.html", heading=heading, text=text)
    return Response(page, status=status, mimetype="text/html")
