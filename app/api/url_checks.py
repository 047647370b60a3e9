"""What a URL carries is checked before any route reads it.

werkzeug decodes the path and the query leniently: bytes that are not UTF-8 become U+FFFD
and `%00` a NUL, which PostgreSQL refuses mid-request, a 500 for the caller's mistake. So
both are read here as sent and refused with a 400 naming the parameter; and a pagination
cursor this API did not give out (`app.pagination.InvalidCursor`) is a 400 too.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote_to_bytes

from flask import Flask, current_app, request
from flask.typing import ResponseReturnValue
from werkzeug.exceptions import BadRequest

from app.errors import DEFAULT_MESSAGES, abort
from app.pagination import InvalidCursor


def install(app: Flask) -> None:
    app.before_request(refuse_unreadable_url)
    app.register_error_handler(InvalidCursor, bad_cursor)


def refuse_unreadable_url() -> None:
    """A path segment or query parameter with a NUL or bytes that are not UTF-8 is a 400."""
    errors: dict[str, dict[str, list[str]]] = {}
    for segment in path_segments(request.environ):
        if problem := unreadable(segment):
            errors.setdefault("path", {})[path_parameter(segment)] = [problem]
    for pair in request.environ.get("QUERY_STRING", "").encode("latin-1", "replace").split(b"&"):
        name, _, value = (unquote_to_bytes(part.replace(b"+", b" ")) for part in pair.partition(b"="))
        if problem := unreadable(name) or unreadable(value):
            errors.setdefault("query", {})[name.decode("utf-8", "replace")] = [problem]
    if errors:
        abort(400, DEFAULT_MESSAGES[400], errors=errors)


def path_segments(environ: dict[str, Any]) -> list[bytes]:
    """The path's segments as bytes, percent escapes decoded.

    From the URI as sent where the server gives it (gunicorn, werkzeug): werkzeug's own
    PATH_INFO has already replaced bytes that are not UTF-8. Split before decoding, so an
    escaped slash stays inside its segment.
    """
    raw = environ.get("RAW_URI") or environ.get("REQUEST_URI")
    if raw:
        path = raw.encode("latin-1", "replace").partition(b"?")[0]
        return [unquote_to_bytes(segment) for segment in path.split(b"/")]
    return environ.get("PATH_INFO", "").encode("latin-1", "replace").split(b"/")


def unreadable(value: bytes) -> str | None:
    if b"\x00" in value:
        return "Contains a NUL character."
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return "Not valid UTF-8."
    return None


def path_parameter(segment: bytes) -> str:
    """The route's name for a path segment (`external_id`), found by the value werkzeug made of it."""
    decoded = segment.decode("utf-8", "replace")
    arguments = request.view_args or {}
    return next((name for name, value in arguments.items() if isinstance(value, str) and decoded in value), "path")


def bad_cursor(error: InvalidCursor) -> ResponseReturnValue:
    """The cursor is a query parameter of every list: a 400 naming it, in the one error shape."""
    answer = BadRequest()
    # flask-smorest's handler answers with `data`, which werkzeug's exceptions do not declare.
    answer.data = {  # type: ignore[attr-defined]
        "message": DEFAULT_MESSAGES[400],
        "errors": {"query": {"cursor": [str(error)]}},
    }
    return current_app.handle_http_exception(answer)
