"""Who is signed in to the console, and the guards every page and form goes through.

The identity lives in Flask's signed session cookie (HttpOnly, SameSite=Strict, an expiry):
for a project key its SHA-256 (the hash the database keeps, never the key), for the admin
key an HMAC of it. Every page looks the key up again, so revoking a key, or changing the
admin key, signs its sessions out at once.

CSRF: one random token per session, in a hidden field of every form (and a header for the
few script calls); a POST without it is a 400, with another one a 403. SameSite=Strict
already keeps other sites' forms from carrying the cookie; the token holds even where a
browser ignores it.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import wraps
from typing import Any

from flask import abort, current_app, g, redirect, request, session, url_for

from app.access.auth import find_caller, find_caller_by_hash, hash_key
from app.access.ratelimit import limit_request

CSRF_FIELD = "csrf_token"
CSRF_HEADER = "X-CSRF-Token"


def tidings() -> Any:
    """The process's settings, database and Redis (app.api.context.Context), which the API
    keeps in the app's extensions; read from there since the API package registers the console."""
    return current_app.extensions["tidings"]


@dataclass(frozen=True)
class Viewer:
    """Who looks at the console: one project's key, or the admin (every project, and operations).
    `project_id` is the project the pages show: the key's own, or the one the admin picked."""

    admin: bool
    project_id: str | None
    rate_limit_per_min: int | None = None  # a project key's: its pages count as its API calls do

    @property
    def label(self) -> str:
        return "admin" if self.admin else f"project {self.project_id}"


def admin_fingerprint(admin_key: str, secret_key: str) -> str:
    """What an admin session keeps: bound to this admin key, useless as one."""
    return hmac.new(secret_key.encode(), admin_key.encode(), hashlib.sha256).hexdigest()


def sign_in(key: str) -> Viewer | None:
    """Start a session for `key` when it is the admin key or an unrevoked project key."""
    ctx = tidings()
    settings = ctx.settings
    if hmac.compare_digest(key.encode(), settings.admin_key.encode()):
        identity = {"admin": admin_fingerprint(settings.admin_key, settings.secret_key)}
        viewer = Viewer(admin=True, project_id=None)
    else:
        with ctx.db() as db_session:
            caller = find_caller(db_session, key)
        if caller is None:
            return None
        identity = {"key_hash": hash_key(key), "project": caller.project_id}
        viewer = Viewer(admin=False, project_id=caller.project_id)
    session.clear()  # nothing of the session before sign-in survives it (fixation)
    session.permanent = True
    session.update(identity, signed_in_at=int(time.time()), csrf=secrets.token_urlsafe(32))
    return viewer


def sign_out() -> None:
    session.clear()


def current_viewer() -> Viewer | None:
    """The viewer of this request, None when nobody (still) is signed in."""
    if "viewer" in g:
        return g.viewer
    g.viewer = _load_viewer()
    return g.viewer


def signed_in_viewer() -> Viewer:
    """The viewer of a page behind `signed_in`, which lets no request without one through."""
    viewer = current_viewer()
    assert viewer is not None
    return viewer


def _load_viewer() -> Viewer | None:
    settings = tidings().settings
    signed_in_at = session.get("signed_in_at")
    if not isinstance(signed_in_at, int) or time.time() - signed_in_at > settings.console_session_hours * 3600:
        return None
    if "admin" in session:
        expected = admin_fingerprint(settings.admin_key, settings.secret_key)
        if not hmac.compare_digest(str(session["admin"]), expected):
            return None
        return Viewer(admin=True, project_id=session.get("chosen_project"))
    key_hash = session.get("key_hash")
    if not isinstance(key_hash, str):
        return None
    with tidings().db() as db_session:
        caller = find_caller_by_hash(db_session, key_hash)
    if caller is None or caller.project_id != session.get("project"):
        return None
    return Viewer(admin=False, project_id=caller.project_id, rate_limit_per_min=caller.rate_limit_per_min)


def choose_project(project_id: str) -> None:
    """The admin's pick of which project the project pages show."""
    session["chosen_project"] = project_id


def csrf_token() -> str:
    """This session's token; made on first use, so the sign-in form has one too."""
    if "csrf" not in session:
        session["csrf"] = secrets.token_urlsafe(32)
    return session["csrf"]


def check_csrf() -> None:
    """Every POST carries the session's token: missing → 400, wrong → 403."""
    if request.method != "POST":
        return
    sent = request.form.get(CSRF_FIELD) or request.headers.get(CSRF_HEADER)
    if not sent:
        abort(400, "The form has no CSRF token; reload the page and try again.")
    expected = session.get("csrf")
    if not expected or not hmac.compare_digest(sent.encode(), expected.encode()):
        abort(403, "The form's CSRF token does not match this session; reload the page and try again.")


View = Callable[..., Any]


def signed_in(view: View) -> View:
    """A page for any signed-in viewer; others go to the sign-in page."""

    @wraps(view)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        if current_viewer() is None:
            sign_out()
            return redirect(url_for("console.login", next=request.path))
        return view(*args, **kwargs)

    return guarded


def project_page(view: View) -> View:
    """A page about one project's data: the key's project, or the one the admin picked
    (an admin who picked none is sent to pick one). The view gets `project_id`.

    A project key's page counts against the project's API rate limit, in the same counter as
    its /v1 calls (a preview costs as much here as there); the admin's, like /v1/admin, does not.
    """

    @wraps(view)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        viewer = signed_in_viewer()
        if viewer.project_id is None:
            return redirect(url_for("console.projects"))
        if not viewer.admin:
            limit_request(tidings().limiter, viewer.project_id, viewer.rate_limit_per_min)
        return view(viewer.project_id, *args, **kwargs)

    return signed_in(guarded)


def admin_page(view: View) -> View:
    """Operations: the admin key's only; a project key gets a 403."""

    @wraps(view)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        if not signed_in_viewer().admin:
            abort(403, "This page needs the admin key.")
        return view(*args, **kwargs)

    return signed_in(guarded)
