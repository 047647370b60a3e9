"""The in-app inbox: a subscriber's in_app notifications, unread first, and their state.

Items are written by prepare (app.delivery.prepare_store.to_inbox); the words stay with the
message (message_contents), so an inbox item is a narrow row of state. Every change is
announced on the subscriber's inbox channel, so each open tab updates its unread count.
"""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

from app.changed_rows import changed_rows
from app.content import tokens
from app.content.tokens import SUBSCRIBER_TOKEN_PREFIX, Purpose
from app.enums import InboxStatus
from app.errors import abort, uuid_or_404
from app.models import Subscriber
from app.observability import live
from app.pagination import aware_time, decode_cursor, encode_cursor

ITEM_COLUMNS = """
    i.message_id::text AS id, i.status, i.created_at, i.read_at, i.archived_at, m.category,
    c.subject AS title, c.text AS body, c.payload AS data
"""
ITEM_FROM = """
    inbox_items i JOIN messages m ON m.id = i.message_id
    LEFT JOIN message_contents c ON c.message_id = i.message_id
"""
VISIBLE = (InboxStatus.UNREAD.value, InboxStatus.READ.value)
AFTER = ":after_status, CAST(:after_at AS timestamptz), CAST(:after_id AS uuid)"


def _scope(project_id: str, subscriber_id: str) -> dict[str, Any]:
    return {"project": project_id, "subscriber": subscriber_id}


def require_subscriber(session: Session, project_id: str, subscriber_id: str) -> None:
    if session.get(Subscriber, (project_id, subscriber_id)) is None:
        abort(404, f"No subscriber {subscriber_id!r}.")


def items_page(
    db: sessionmaker[Session],
    project_id: str,
    subscriber_id: str,
    status: InboxStatus | None,
    cursor: str | None,
    limit: int,
) -> dict[str, Any]:
    """Unread first, then read, newest first within each (archived ones only when asked)."""
    after = decode_cursor(cursor, str, aware_time, uuid.UUID)
    params = {**_scope(project_id, subscriber_id), "statuses": [status.value] if status else list(VISIBLE)}
    where = "i.project_id = :project AND i.subscriber_id = :subscriber AND i.status = ANY(CAST(:statuses AS text[]))"
    if after is not None:
        where += f" AND (i.status, i.created_at, i.message_id) < ({AFTER})"
        params.update(after_status=after[0], after_at=after[1], after_id=after[2])
    with db() as session:
        require_subscriber(session, project_id, subscriber_id)
        rows = session.execute(
            text(
                f"SELECT {ITEM_COLUMNS} FROM {ITEM_FROM} WHERE {where} "
                "ORDER BY i.status DESC, i.created_at DESC, i.message_id DESC LIMIT :limit"
            ),
            {**params, "limit": limit + 1},
        ).all()
    page = [_item(row) for row in rows[:limit]]
    last = page[-1] if len(rows) > limit else None
    return {
        "items": page,
        "next_cursor": encode_cursor([last["status"], last["created_at"].isoformat(), last["id"]]) if last else None,
    }


def find_item(db: sessionmaker[Session], project_id: str, subscriber_id: str, message_id: str) -> dict | None:
    with db() as session:
        row = session.execute(
            text(
                f"SELECT {ITEM_COLUMNS} FROM {ITEM_FROM} WHERE i.message_id = CAST(:id AS uuid) "
                "AND i.project_id = :project AND i.subscriber_id = :subscriber"
            ),
            {**_scope(project_id, subscriber_id), "id": message_id},
        ).first()
    return None if row is None else _item(row)


def counts(db: sessionmaker[Session], project_id: str, subscriber_id: str) -> dict[str, int]:
    with db() as session:
        return _counts(session, project_id, subscriber_id)


def _counts(session: Session, project_id: str, subscriber_id: str) -> dict[str, int]:
    row = session.execute(
        text(
            """
            SELECT count(*) FILTER (WHERE status = 'unread') AS unread, count(*) AS total
            FROM inbox_items
            WHERE project_id = :project AND subscriber_id = :subscriber AND status IN ('unread', 'read')
            """
        ),
        _scope(project_id, subscriber_id),
    ).one()
    return {"unread": row.unread, "total": row.total}


def counts_of(db: sessionmaker[Session], project_id: str, subscriber_id: str) -> dict[str, int]:
    """The counts for the API: a subscriber that does not exist is a 404."""
    with db() as session:
        require_subscriber(session, project_id, subscriber_id)
        return _counts(session, project_id, subscriber_id)


TRANSITIONS = {
    InboxStatus.READ: ("status = 'read', read_at = now()", "status = 'unread'"),
    InboxStatus.ARCHIVED: ("status = 'archived', archived_at = now()", "status <> 'archived'"),
}


def mark(db: sessionmaker[Session], project_id: str, subscriber_id: str, message_id: str, to: InboxStatus) -> dict:
    """Mark one item read or archived; doing it twice is harmless."""
    key = str(uuid_or_404(message_id, "inbox item"))
    change, allowed = TRANSITIONS[to]
    with db.begin() as session:
        changed = changed_rows(
            session,
            text(
                f"UPDATE inbox_items SET {change} WHERE message_id = CAST(:id AS uuid) "
                f"AND project_id = :project AND subscriber_id = :subscriber AND {allowed}"
            ),
            {**_scope(project_id, subscriber_id), "id": key},
        )
        if changed:
            _announce_change(session, project_id, subscriber_id)
    item = find_item(db, project_id, subscriber_id, key)
    if item is None:
        abort(404, f"No inbox item {message_id!r}.")
    return item


def read_all(db: sessionmaker[Session], project_id: str, subscriber_id: str) -> dict[str, int]:
    with db.begin() as session:
        require_subscriber(session, project_id, subscriber_id)
        changed = changed_rows(
            session,
            text(
                "UPDATE inbox_items SET status = 'read', read_at = now() "
                "WHERE project_id = :project AND subscriber_id = :subscriber AND status = 'unread'"
            ),
            _scope(project_id, subscriber_id),
        )
        if changed:
            _announce_change(session, project_id, subscriber_id)
        return {"changed": changed, **_counts(session, project_id, subscriber_id)}


def _announce_change(session: Session, project_id: str, subscriber_id: str) -> None:
    live.publish_after_commit(session, live.inbox_channel(project_id, subscriber_id), {"kind": "changed"})


def mint_token(db: sessionmaker[Session], project_id: str, subscriber_id: str, ttl_seconds: int) -> dict[str, Any]:
    """A token that lets a browser read this subscriber's inbox, and nothing else, for `ttl_seconds`."""
    with db() as session:
        require_subscriber(session, project_id, subscriber_id)
    token = tokens.mint(Purpose.SUBSCRIBER, {"p": project_id, "s": subscriber_id}, ttl_seconds)
    return {
        "token": SUBSCRIBER_TOKEN_PREFIX + token,
        "expires_at": datetime.fromtimestamp(int(time.time() + ttl_seconds), UTC),
    }


def _item(row: Any) -> dict[str, Any]:
    return {
        "id": row.id,
        "status": row.status,
        "category": row.category,
        "title": row.title,
        "body": row.body,
        "data": row.data,
        "created_at": row.created_at,
        "read_at": row.read_at,
        "archived_at": row.archived_at,
    }
