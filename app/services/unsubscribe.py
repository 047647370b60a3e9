"""One-click unsubscribe (RFC 8058): the token says who and what; a POST does it.

A subscriber's message turns its category off for email (every email the subscriber may
turn off when the message had no category); a message to a raw address suppresses the
address. Either way an `unsubscribed` event tells the project, once.
"""

from __future__ import annotations

import copy
from typing import Any

from sqlalchemy import func, text
from sqlalchemy.orm import Session, sessionmaker

from app.delivery import store
from app.enums import Channel, EventType, SuppressionReason
from app.models import Subscriber
from app.services.suppressions import add_suppressions


def unsubscribe(db: sessionmaker[Session], claims: dict[str, Any]) -> bool:
    """Apply an authentic token's unsubscribe; False when its message or subscriber is gone."""
    project_id, message_id, category = claims["p"], claims["m"], claims.get("c")
    with db.begin() as session:
        exists = session.execute(
            text("SELECT 1 FROM messages WHERE id = CAST(:id AS uuid) AND project_id = :project"),
            {"id": message_id, "project": project_id},
        ).first()
        if exists is None:
            return False
        if claims.get("s") is not None:
            changed = _switch_off(session, project_id, claims["s"], category)
            if changed is None:
                return False
        else:
            changed = bool(
                add_suppressions(session, project_id, Channel.EMAIL, [claims["a"]], SuppressionReason.UNSUBSCRIBE)
            )
        if changed:
            data = {"category": category, "subscriber_id": claims.get("s")}
            store.record_events(session, [store.NewEvent(message_id, project_id, EventType.UNSUBSCRIBED, data)])
    return True


def _switch_off(session: Session, project_id: str, subscriber_id: str, category: str | None) -> bool | None:
    """Switch email off for the category (or altogether); True when it was not off already,
    None when the subscriber is gone."""
    subscriber = session.get(Subscriber, (project_id, subscriber_id), with_for_update=True)
    if subscriber is None:
        return None
    preferences = copy.deepcopy(subscriber.preferences or {})
    if category:
        switches = preferences.setdefault("categories", {}).setdefault(category, {})
    else:
        switches = preferences.setdefault("channels", {})
    if switches.get(Channel.EMAIL.value) is False:
        return False
    switches[Channel.EMAIL.value] = False
    subscriber.preferences = preferences
    subscriber.updated_at = func.now()
    return True
