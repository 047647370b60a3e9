"""What every project route shares: the project key, and the project's API rate limit."""

from __future__ import annotations

from collections.abc import Callable

from flask import current_app, g, request

from app.access.auth import bearer_token, require_project_key
from app.access.ratelimit import add_rate_limit_headers, limit_request
from app.api import body_budget
from app.api.blueprint import Blueprint
from app.api.context import context
from app.api.contract import PROJECT_KEY, Access
from app.config import LARGE_BODY_MIB
from app.errors import View, abort


def project_blueprint(name: str, import_name: str, tag: str, description: str) -> Blueprint:
    """A blueprint under /v1 whose routes take a project key and count against its limit."""
    blp = Blueprint(name, import_name, access=PROJECT_ACCESS, tag=tag, url_prefix="/v1", description=description)
    blp.before_request(raise_body_limit)
    blp.after_request(add_rate_limit_headers)
    blp.teardown_request(body_budget.release)
    return blp


LARGE_BODY_BYTES = LARGE_BODY_MIB * 1024 * 1024


def large_body(view: View) -> View:
    """Mark a bulk route (import, batch) that takes up to 16 MiB instead of 1 MiB."""
    view.large_body = True  # type: ignore[attr-defined]
    return view


def large_body_with(field: str) -> Callable[[View], View]:
    """Mark a route whose body may take up to 16 MiB when it has `field` (a send's
    attachments: 10 MiB of files are 13.3 MiB of base64); without it, 1 MiB as everywhere."""

    def mark(view: View) -> View:
        view.large_body_with = field  # type: ignore[attr-defined]
        return view

    return mark


def raise_body_limit() -> None:
    view = current_app.view_functions.get(request.endpoint or "")
    field = getattr(view, "large_body_with", None)
    if getattr(view, "large_body", False) or field:
        request.max_content_length = LARGE_BODY_BYTES
        body_budget.admit(context().bodies, small=current_app.config["MAX_CONTENT_LENGTH"], largest=LARGE_BODY_BYTES)
    if field and len(request.get_data()) > current_app.config["MAX_CONTENT_LENGTH"]:
        body = request.get_json(silent=True)
        if not (isinstance(body, dict) and field in body):
            abort(413, f"A body over 1 MiB is refused unless it carries {field} (then up to 16 MiB).")


def key_still_valid() -> Callable[[], bool]:
    """For a stream, which outlives its request: whether the request's key still
    authenticates the same caller, so not once it is revoked or its project changed or
    deleted (one Redis GET while nothing changed: app/access/caller_cache.py)."""
    callers, token, caller = context().callers, bearer_token(), g.caller
    return lambda: token is not None and callers.caller(token, fresh=True) == caller


def authenticate_and_limit() -> None:
    caller = require_project_key(context().callers.caller)
    limit(caller.project_id, caller.rate_limit_per_min)


PROJECT_ACCESS = Access((PROJECT_KEY,), authenticate_and_limit, errors=(429,))


def limit(bucket: str, per_minute: int | None) -> None:
    """Count the request against `bucket`'s budget with the process's limiter; 429 when it is spent."""
    limit_request(context().limiter, bucket, per_minute)
