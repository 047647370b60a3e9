"""One JSON shape for every error: {"code", "status", "message", "errors"}.

flask-smorest already answers its own aborts as JSON; this makes the rest (404 for an
unknown route, 405, 413, 415, malformed JSON, an unexpected 500) answer the same way,
always with a message, so clients need a single error path. A request that needed
PostgreSQL, Redis or the broker while it was away (app/outages.py) answers 503 with
Retry-After, logged in one line: a client can tell an outage, which a retry outlasts, from a bug.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

from flask import Flask, request
from flask_smorest import Api
from flask_smorest import abort as smorest_abort
from werkzeug.exceptions import HTTPException, InternalServerError, UnsupportedMediaType

from app.outages import Unavailable, one_line, unavailable

logger = logging.getLogger(__name__)

DEFAULT_MESSAGES = {
    400: "The request could not be read.",
    422: "Invalid request.",
}


class TidingsApi(Api):
    def handle_http_exception(self, error: HTTPException) -> tuple[dict[str, Any], int, dict[str, str]]:
        data = getattr(error, "data", None) or {}
        headers = dict(error.get_headers())
        headers.pop("Content-Type", None)
        headers.update(data.get("headers") or {})
        payload: dict[str, Any] = {
            "code": error.code,
            "status": error.name,
            "message": data.get("message") or DEFAULT_MESSAGES.get(error.code or 0) or error.description,
        }
        errors = data.get("errors") or data.get("messages")
        if errors:
            payload["errors"] = errors
        return payload, error.code or 500, headers


def abort(code: int, message: str, errors: dict[str, Any] | None = None, **kwargs: Any) -> NoReturn:
    """Stop the request with our error shape."""
    smorest_abort(code, message=message, errors=errors, **kwargs)
    raise AssertionError("unreachable")


def field_error(code: int, message: str, location: str, field: str, problem: str) -> NoReturn:
    """An error about one field, shaped like a schema validation error."""
    abort(code, message, errors={location: {field: [problem]}})


def uuid_or_404(value: str, what: str) -> uuid.UUID:
    """A path id that is not even a UUID names nothing: 404, like any unknown id."""
    try:
        return uuid.UUID(value)
    except ValueError:
        abort(404, f"No {what} {value!r}.")


View = TypeVar("View", bound=Callable[..., Any])


def any_body(view: View) -> View:
    """Mark a route that reads its body itself, whatever its type: providers post their
    webhooks as JSON, forms (Twilio) or text/plain (SNS), and sign the bytes as sent; mail
    clients post one-click unsubscribes as forms."""
    view.any_body = True  # type: ignore[attr-defined]
    return view


def install(app: Flask, api: TidingsApi) -> None:
    @app.before_request
    def require_json_body() -> None:
        """A body we cannot read as JSON is a 415, not an empty request (save for the few
        routes marked `any_body`)."""
        if getattr(app.view_functions.get(request.endpoint or ""), "any_body", False):
            return
        if request.method in ("POST", "PUT", "PATCH") and request.content_length and not request.is_json:
            raise UnsupportedMediaType("Send the request body as application/json.")

    @app.errorhandler(Exception)
    def unexpected(error: Exception):
        if isinstance(error, HTTPException):
            return api.handle_http_exception(error)
        if unavailable(error):
            logger.warning("%s %s answered 503, a service is away: %s", request.method, request.path, one_line(error))
            # Through Flask's own lookup, so a blueprint's error page (the console's) answers it too.
            return app.handle_http_exception(Unavailable())
        logger.exception("unhandled error on %s %s", request.method, request.path)
        return api.handle_http_exception(InternalServerError())
