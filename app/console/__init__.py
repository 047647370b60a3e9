"""The console at /console: pages for people (support, product, operators) over the same
service functions the API calls, signed in with a project key or the admin key."""

from __future__ import annotations

from datetime import timedelta

from flask import Flask

from app.console import (  # noqa: F401  (their routes join the blueprint)
    access,
    audience,
    messages,
    operations,
    suppressions,
    templates_pages,
)
from app.console.blueprint import blp
from app.crypto import derived_key
from app.errors import any_body


def install(app: Flask) -> None:
    """Register the console on the API's app: its session cookie, scoped to /console, signed
    with a key derived from TIDINGS_SECRET_KEY for this use only."""
    settings = app.extensions["tidings"].settings
    app.secret_key = derived_key(settings.secret_key, b"tidings console sessions v1")
    app.config.update(
        SESSION_COOKIE_NAME="tidings_console",
        SESSION_COOKIE_PATH="/console",
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Strict",
        SESSION_COOKIE_SECURE=settings.console_secure_cookie,
        PERMANENT_SESSION_LIFETIME=timedelta(hours=settings.console_session_hours),
    )
    app.register_blueprint(blp)
    for endpoint, view in app.view_functions.items():
        if endpoint.startswith("console.") and endpoint != "console.static":
            any_body(view)  # forms are form-encoded, not the API's JSON
