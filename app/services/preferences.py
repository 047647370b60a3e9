"""A subscriber's preferences: channel and category-by-channel switches, quiet hours.

Stored as one jsonb document on the subscriber row, in the shape the API shows, so the
prepare step reads them with the subscriber at no extra cost. Every replacement, by the
API or by the subscriber on their preference page, leaves a `preferences` event in the
project's log, so a project can tell who turned what off and when.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session, sessionmaker

from app.delivery import store
from app.enums import EventType
from app.errors import abort
from app.models import Subscriber

BY_API = "api"
BY_PAGE = "preference_page"


def get(db: sessionmaker[Session], project_id: str, external_id: str) -> dict[str, Any]:
    with db() as session:
        preferences = session.scalar(
            select(Subscriber.preferences).where(
                Subscriber.project_id == project_id, Subscriber.external_id == external_id
            )
        )
    if preferences is None:
        abort(404, f"No subscriber {external_id!r}.")
    return preferences


def put(db: sessionmaker[Session], project_id: str, external_id: str, preferences: dict[str, Any]) -> dict:
    """Replace the preferences whole: a switch left out is back to the project's default."""
    with db.begin() as session:
        stored = replace(session, project_id, external_id, preferences, BY_API)
    if stored is None:
        abort(404, f"No subscriber {external_id!r}.")
    return stored


def replace(
    session: Session,
    project_id: str,
    external_id: str,
    preferences: dict[str, Any],
    source: str,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any] | None:
    """Store the preferences and their event in the caller's transaction; None when the
    subscriber is gone. `extra` is what else the same change set (the page's time zone)."""
    stored = session.scalar(
        update(Subscriber)
        .where(Subscriber.project_id == project_id, Subscriber.external_id == external_id)
        .values(preferences=preferences, updated_at=func.now(), **(extra or {}))
        .returning(Subscriber.preferences)
    )
    if stored is not None:
        data = {"subscriber_id": external_id, "source": source, "preferences": stored, **(extra or {})}
        store.record_events(session, [store.NewEvent(None, project_id, EventType.PREFERENCES, data)])
    return stored
