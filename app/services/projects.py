"""Projects (tenants), their API keys and their webhook channel's signing secret.

The signing secret is made with the project so that no two projects sign alike: a receiver
that checks its project's secret cannot be sent a validly signed payload by another
project. It is shown in the answers to creation and rotation only, stored encrypted
(app.crypto), and rotated like an outbound endpoint's (app.services.webhooks).
"""

from __future__ import annotations

import secrets
from typing import Any

import redis
from sqlalchemy import delete, func, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session, sessionmaker

from app.access.auth import PREFIX_LENGTH, hash_key, new_key
from app.changed_rows import changed_rows
from app.crypto import encrypt
from app.enums import KeyKind
from app.errors import abort, uuid_or_404
from app.models import ApiKey, Project
from app.remembered import forget_all
from app.services.webhooks import ROTATION_OVERLAP, new_secret


def create_project(db: sessionmaker[Session], data: dict[str, Any]) -> dict[str, Any]:
    """Make a project with its webhook signing secret; this answer is the only one that shows it."""
    secret = new_secret()
    values = {"id": data.get("id") or f"p-{secrets.token_hex(6)}", **data, "webhook_signing_secret": encrypt(secret)}
    with db.begin() as session:
        project = session.scalars(
            insert(Project).values(values).on_conflict_do_nothing(index_elements=["id"]).returning(Project)
        ).first()
    if project is None:
        abort(409, f"Project {values['id']!r} exists already.")
    columns = {column.key: getattr(project, column.key) for column in Project.__table__.columns}
    return {**columns, "webhook_signing_secret": secret}


def rotate_signing_secret(db: sessionmaker[Session], project_id: str) -> dict[str, Any]:
    """A new webhook signing secret; the current one (the account's, for a project made before
    projects had their own) keeps signing beside it for ROTATION_OVERLAP."""
    secret = new_secret()
    with db.begin() as session:
        project = existing_project(session, project_id, lock=True)
        project.webhook_signing_previous_secret = project.webhook_signing_secret
        project.webhook_signing_previous_expires_at = func.now() + ROTATION_OVERLAP
        project.webhook_signing_secret = encrypt(secret)
        session.flush()
        session.refresh(project)
    return {
        "webhook_signing_secret": secret,
        "previous_secret_expires_at": project.webhook_signing_previous_expires_at,
    }


def list_projects(db: sessionmaker[Session]) -> list[Project]:
    with db() as session:
        return list(session.scalars(select(Project).order_by(Project.created_at, Project.id)))


def get_project(db: sessionmaker[Session], project_id: str) -> Project:
    with db() as session:
        return existing_project(session, project_id)


def update_project(db: sessionmaker[Session], client: redis.Redis, project_id: str, data: dict[str, Any]) -> Project:
    """Change a project; its keys' remembered callers are forgotten, so channels and limits apply at once."""
    with db.begin() as session:
        project = existing_project(session, project_id)
        for name, value in data.items():
            setattr(project, name, value)
    forget_all(client)
    return project


def delete_project(db: sessionmaker[Session], client: redis.Redis, project_id: str) -> None:
    """Delete a project with everything it owns (keys, subscribers, messages, events)."""
    with db.begin() as session:
        if changed_rows(session, delete(Project).where(Project.id == project_id)) == 0:
            abort(404, f"No project {project_id!r}.")
    forget_all(client)


def create_key(db: sessionmaker[Session], project_id: str, name: str, kind: KeyKind) -> dict[str, Any]:
    """Make a key; the answer is the only place the key itself ever appears."""
    key = new_key(kind)
    with db.begin() as session:
        existing_project(session, project_id)
        row = ApiKey(project_id=project_id, name=name, kind=kind, prefix=key[:PREFIX_LENGTH], key_hash=hash_key(key))
        session.add(row)
        session.flush()
        session.refresh(row)
    return {
        "id": str(row.id),
        "name": name,
        "kind": kind.value,
        "prefix": row.prefix,
        "key": key,
        "created_at": row.created_at,
    }


def revoke_key(db: sessionmaker[Session], client: redis.Redis, project_id: str, key_id: str) -> None:
    """Revoke a key; every API process refuses it from the next request on."""
    with db.begin() as session:
        revoked = changed_rows(
            session,
            update(ApiKey)
            .where(
                ApiKey.id == uuid_or_404(key_id, "key"),
                ApiKey.project_id == project_id,
                ApiKey.revoked_at.is_(None),
            )
            .values(revoked_at=func.now()),
        )
    if revoked == 0:
        abort(404, f"No active key {key_id!r} in project {project_id!r}.")
    forget_all(client)


def existing_project(session: Session, project_id: str, lock: bool = False) -> Project:
    project = session.get(Project, project_id, with_for_update=lock)
    if project is None:
        abort(404, f"No project {project_id!r}.")
    return project
