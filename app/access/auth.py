"""API keys: how they look, how they are stored, and who a request is.

Only the SHA-256 of a key is stored (plus a short prefix to recognise it in lists), so a
database leak gives nobody a working key. Keys are long random strings, so an unsalted
fast hash is the right tool here; passwords would need a slow one.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NoReturn

from flask import g, request
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from app.access.limits import SendLimits, send_limits
from app.config import current_settings
from app.enums import KeyKind
from app.errors import abort
from app.models import ApiKey, Project

PREFIX_LENGTH = 13  # "tid_live_" and four characters of the secret


@dataclass(frozen=True)
class Caller:
    """The project a request acts for, and with which kind of key."""

    project_id: str
    channels: tuple[str, ...]
    rate_limit_per_min: int | None
    key_kind: KeyKind
    limits: SendLimits = field(default_factory=SendLimits)

    @property
    def is_test(self) -> bool:
        return self.key_kind is KeyKind.TEST


def new_key(kind: KeyKind) -> str:
    return f"tid_{kind.value}_{secrets.token_urlsafe(32)}"


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def bearer_token() -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def find_caller(session: Session, token: str) -> Caller | None:
    return find_caller_by_hash(session, hash_key(token))


def find_caller_by_hash(session: Session, key_hash: str) -> Caller | None:
    """Who holds the unrevoked key with this hash: for the console, whose session cookie keeps
    the hash, never the key, and asks again on every page so a revoked key signs it out."""
    row = session.execute(
        select(Project.id, Project.channels, Project.rate_limit_per_min, Project.settings, ApiKey.kind)
        .join(ApiKey, ApiKey.project_id == Project.id)
        .where(ApiKey.key_hash == key_hash, ApiKey.revoked_at.is_(None))
    ).first()
    if row is None:
        return None
    deployment = current_settings()
    kind = KeyKind(row.kind)
    requests_per_min = row.rate_limit_per_min
    if requests_per_min is None and kind is KeyKind.TEST:
        requests_per_min = deployment.test_rate_limit_per_min
    return Caller(row.id, tuple(row.channels), requests_per_min, kind, send_limits(row.settings, deployment))


def find_project_caller(session: Session, project_id: str) -> Caller | None:
    """Who a subscriber token of `project_id` acts as: the project, as a live key would
    (the token itself opens one subscriber's inbox only); None once the project is gone."""
    row = session.execute(
        select(Project.id, Project.channels, Project.rate_limit_per_min, Project.settings).where(
            Project.id == project_id
        )
    ).first()
    if row is None:
        return None
    limits = send_limits(row.settings, current_settings())
    return Caller(row.id, tuple(row.channels), row.rate_limit_per_min, KeyKind.LIVE, limits)


def bearer_is(secret: str) -> bool:
    """Whether the request's bearer token is `secret`, compared in constant time."""
    token = bearer_token()
    return token is not None and hmac.compare_digest(token.encode(), secret.encode())


def unauthorized(message: str = "A valid API key is required.") -> NoReturn:
    abort(401, message, headers={"WWW-Authenticate": "Bearer"})


def require_project_key(look_up: Callable[[str], Caller | None]) -> Caller:
    """Authenticate a project route with `look_up` (token → caller); the caller is kept in `g.caller`."""
    token = bearer_token()
    if token is None:
        unauthorized()
    caller = look_up(token)
    if caller is None:
        unauthorized()
    g.caller = caller
    return caller


def require_admin_key(db: sessionmaker[Session], admin_key: str) -> None:
    """Authenticate an admin route: a project key here is a 403, anything else a 401."""
    if bearer_is(admin_key):
        return
    token = bearer_token()
    if token is not None:
        with db() as session:
            if find_caller(session, token) is not None:
                abort(403, "This route needs the admin key, not a project key.")
    unauthorized()
