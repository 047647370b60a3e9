"""Projects' own provider accounts ("bring your own account"): set, read, remove.

A project's settings use the provider's own environment variable names and are checked by
building the adapter (and the status webhook receiver) from them, with the same code the
worker runs, so a setting that would fail at send time fails here with a 422. They are
stored sealed (app/vault.py) and never answered: an answer says which settings are set.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import redis
from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

from app.changed_rows import changed_rows
from app.config import Settings
from app.delivery.adapters import own_scope
from app.delivery.pauses import ProviderPauses
from app.errors import abort, field_error
from app.services.operations import known_provider
from app.services.projects import existing_project
from app.vault import SealBroken, seal, unseal
from providers import registry
from providers.inbound import registry as inbound

INVALID = "Invalid request."


def put(
    db: sessionmaker[Session],
    settings: Settings,
    client: redis.Redis,
    project_id: str,
    provider: str,
    values: dict[str, str],
) -> tuple[dict[str, Any], bool]:
    """Set (replace whole) a project's account with `provider`; True when it is new.

    New credentials deserve a try at once: a pause of the project's old account is lifted.
    """
    known_provider(settings, provider)
    check(settings, provider, values)
    with db.begin() as session:
        existing_project(session, project_id)
        row = session.execute(
            text(
                """
                INSERT INTO project_providers AS a (project_id, provider, sealed)
                VALUES (:project, :provider, :sealed)
                ON CONFLICT (project_id, provider) DO UPDATE SET sealed = excluded.sealed, updated_at = now()
                RETURNING a.created_at, a.updated_at, (a.xmax = 0) AS created
                """
            ),
            {"project": project_id, "provider": provider, "sealed": seal(settings.secret_key, values)},
        ).one()
    ProviderPauses(client).resume(own_scope(provider, project_id))
    return view(client, project_id, provider, sorted(values), row.created_at, row.updated_at), row.created


def check(settings: Settings, provider: str, values: dict[str, str]) -> None:
    """Only the provider's account settings, and only what its adapter and receiver accept."""
    allowed = registry.account_settings(provider)
    if not allowed:
        field_error(422, INVALID, "json", "settings", f"{provider} has no account a project could bring.")
    unknown = sorted(set(values) - set(allowed))
    if unknown:
        problem = [f"Not an account setting of {provider}; it takes {', '.join(allowed)}."]
        abort(422, INVALID, errors={"json": {"settings": dict.fromkeys(unknown, problem)}})
    env = registry.with_account(settings.environ, provider, values)
    try:
        registry.build(provider, env)
        inbound.build(provider, env)
    except ValueError as error:
        field_error(422, INVALID, "json", "settings", str(error))


def get(db: sessionmaker[Session], settings: Settings, client: redis.Redis, project_id: str, provider: str) -> dict:
    accounts = [a for a in list_all(db, settings, client, project_id) if a["provider"] == provider]
    if not accounts:
        abort(404, f"Project {project_id!r} has no account of its own with {provider!r}.")
    return accounts[0]


def list_all(db: sessionmaker[Session], settings: Settings, client: redis.Redis, project_id: str) -> list[dict]:
    with db() as session:
        existing_project(session, project_id)
        rows = session.execute(
            text(
                """
                SELECT provider, sealed, created_at, updated_at FROM project_providers
                WHERE project_id = :project ORDER BY provider
                """
            ),
            {"project": project_id},
        ).all()
    return [
        view(client, project_id, row.provider, keys(settings, row.sealed), row.created_at, row.updated_at)
        for row in rows
    ]


def delete(db: sessionmaker[Session], client: redis.Redis, project_id: str, provider: str) -> None:
    """Back to the deployment's account; the project's own pause goes with it."""
    with db.begin() as session:
        removed = changed_rows(
            session,
            text("DELETE FROM project_providers WHERE project_id = :project AND provider = :provider"),
            {"project": project_id, "provider": provider},
        )
    if removed == 0:
        abort(404, f"Project {project_id!r} has no account of its own with {provider!r}.")
    ProviderPauses(client).resume(own_scope(provider, project_id))


def keys(settings: Settings, sealed: str) -> list[str] | None:
    """The names of the stored settings; None when this secret key cannot read them."""
    try:
        return sorted(unseal(settings.secret_key, sealed))
    except SealBroken:
        return None


def view(
    client: redis.Redis,
    project_id: str,
    provider: str,
    names: list[str] | None,
    created_at: datetime,
    updated_at: datetime,
) -> dict[str, Any]:
    pause = ProviderPauses(client).get(own_scope(provider, project_id))
    return {
        "provider": provider,
        "keys": names or [],
        "readable": names is not None,
        "created_at": created_at,
        "updated_at": updated_at,
        "paused": pause is not None,
        "paused_reason": pause.reason if pause else None,
        "paused_seconds_left": pause.seconds_left if pause else None,
    }
