"""A subscriber's preferences: channel and category-by-channel switches, quiet hours.

Stored as one jsonb document on the subscriber row, in the shape the API shows, so the
prepare step reads them with the subscriber at no extra cost.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session, sessionmaker

from app.errors import abort
from app.models import Subscriber


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
        stored = session.scalar(
            update(Subscriber)
            .where(Subscriber.project_id == project_id, Subscriber.external_id == external_id)
            .values(preferences=preferences, updated_at=func.now())
            .returning(Subscriber.preferences)
        )
    if stored is None:
        abort(404, f"No subscriber {external_id!r}.")
    return stored
