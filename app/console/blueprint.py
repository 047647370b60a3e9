"""The console's one Blueprint and what every console response shares: the CSRF check,
security headers, HTML error pages, and form reading through the API's own schemas."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from flask import Blueprint, Response, jsonify, render_template, request
from marshmallow import Schema, ValidationError
from werkzeug.exceptions import HTTPException

from app.access.ratelimit import add_rate_limit_headers
from app.console.session import CSRF_FIELD, check_csrf, csrf_token, current_viewer
from app.page_headers import page_headers
from app.pagination import InvalidCursor

HERE = Path(__file__).parent

blp = Blueprint(
    "console",
    __name__,
    url_prefix="/console",
    template_folder=str(HERE / "templates"),
    static_folder=str(HERE / "static"),
    static_url_path="/static",
)

# No inline script or style anywhere: tenant text that slipped through escaping still could not run.
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)
SECURITY_HEADERS = page_headers(CSP, Cache_Control="no-store")


@blp.before_request
def csrf() -> None:
    check_csrf()


blp.after_request(add_rate_limit_headers)


@blp.after_request
def security_headers(response: Response) -> Response:
    """Set on every console response; a route that must differ (rendered content, framed by
    the message page) has set its own before this runs, and keeps it."""
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    return response


@blp.context_processor
def shared() -> dict[str, Any]:
    return {"viewer": current_viewer(), "csrf_token": csrf_token, "csrf_field": CSRF_FIELD}


@blp.errorhandler(HTTPException)
def error_page(error: HTTPException) -> tuple[str | Response, int, dict[str, str]]:
    """The services' aborts (404 for another project's message, 409, 422, 429, and the 503 of
    an outage, app/outages.py) as a page, or as JSON to a script that asked in JSON (the
    editor's preview); with the error's own headers, such as Retry-After."""
    data = getattr(error, "data", None) or {}
    message = data.get("message") or error.description
    headers = dict(data.get("headers") or {})
    if request.is_json:
        return jsonify(message=message, errors=data.get("errors")), error.code or 500, headers
    page = render_template("console/error.html", code=error.code, message=message, errors=data.get("errors"))
    return page, error.code or 500, headers


@blp.errorhandler(InvalidCursor)
def bad_cursor(error: InvalidCursor) -> tuple[str, int]:
    return render_template("console/error.html", code=400, message=f"Bad cursor: {error}", errors=None), 400


def read_form(schema: Schema, values: Any) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """A form or query string through the API's schema for the same operation: (data, {})
    when valid, (None, errors) when not. Empty fields count as not given."""
    given = {name: value for name, value in values.items() if value != "" and name != CSRF_FIELD}
    try:
        return schema.load(given), {}
    except ValidationError as error:
        return None, error.normalized_messages()


@blp.app_template_filter("pretty")
def pretty(value: Any) -> str:
    """JSON for people, left to autoescaping like any other text."""
    return json.dumps(value, indent=2, sort_keys=True, default=str, ensure_ascii=False)


@blp.app_template_filter("when")
def when(value: datetime | None) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S") if value else ""
