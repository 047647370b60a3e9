"""Opens and clicks, from the tracking pixel and the click redirect.

The first open of a message, and the first click of each of its links, is an event (so
webhooks and streams hear of it once); every later one only adds to a count. A token
names its project, and the write only touches a message of that project, so a token for
another project, like a forged or expired one, changes nothing.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

from app.delivery import store
from app.enums import EventType


def record(db: sessionmaker[Session], project_id: str, message_id: str, kind: EventType, link: str = "") -> None:
    with db.begin() as session:
        first = session.execute(
            text(
                """
                INSERT INTO message_engagements AS g (message_id, kind, link)
                SELECT m.id, :kind, :link FROM messages m
                WHERE m.id = CAST(:message AS uuid) AND m.project_id = :project
                ON CONFLICT (message_id, kind, link) DO UPDATE SET count = g.count + 1, last_at = now()
                RETURNING g.count = 1 AS first
                """
            ),
            {"kind": kind.value, "link": link, "message": message_id, "project": project_id},
        ).scalar()
        if first:
            data = {"url": link} if link else {}
            store.record_events(session, [store.NewEvent(message_id, project_id, kind, data)])


def summary(session: Session, message_id: Any) -> dict[str, Any]:
    """Opens, clicks and clicks per link of one message, for its detail view."""
    rows = session.execute(
        text("SELECT kind, link, count FROM message_engagements WHERE message_id = :id ORDER BY first_at, link"),
        {"id": message_id},
    ).all()
    # Row.count is also Sequence's method: mypy sees that one; the mapping has only the column.
    links = [{"url": row.link, "clicks": row._mapping["count"]} for row in rows if row.kind == EventType.CLICKED]
    opens = sum(row._mapping["count"] for row in rows if row.kind == EventType.OPENED)
    return {"opens": opens, "clicks": sum(link["clicks"] for link in links), "links": links}
