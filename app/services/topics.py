"""Topics: what subscribers follow, and who follows each.

Membership changes are set-based: up to 10,000 subscriber ids are one statement, adding a
member twice or removing one that is not there changes nothing, and a call that names a
subscriber the project does not have writes nothing at all. A send to a topic is a batch
(app/services/batches.py) whose messages a worker writes from the membership.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Row, func, select, text
from sqlalchemy.orm import Session, sessionmaker

from app.changed_rows import changed_rows
from app.errors import abort
from app.models import Topic, TopicMember
from app.pagination import decode_cursor, page

# Unknown ids named in a 422, at most: enough to find the mistake, bounded whatever was sent.
UNKNOWN_SHOWN = 20
# A subscriber's topics on its profile, at most.
MAX_TOPICS_SHOWN = 1000


def put(db: sessionmaker[Session], project_id: str, key: str, fields: dict[str, Any]) -> Row:
    """Create the topic or replace its name and description; `created` tells which."""
    with db.begin() as session:
        return session.execute(
            text(
                """
                INSERT INTO topics AS t (project_id, key, name, description)
                VALUES (:project, :key, :name, :description)
                ON CONFLICT (project_id, key) DO UPDATE
                SET name = excluded.name, description = excluded.description, updated_at = now()
                RETURNING t.key, t.name, t.description, t.created_at, t.updated_at, (t.xmax = 0) AS created
                """
            ),
            {"project": project_id, "key": key, "name": fields["name"], "description": fields.get("description")},
        ).one()


def get(db: sessionmaker[Session], project_id: str, key: str) -> dict[str, Any]:
    """The topic and how many subscribers follow it now."""
    with db() as session:
        topic = _topic(session, project_id, key)
        count = member_count(session, project_id, key)
    return {**_fields(topic), "subscribers": count}


def delete(db: sessionmaker[Session], project_id: str, key: str) -> None:
    """The topic goes, and its memberships with it (the foreign key cascades)."""
    with db.begin() as session:
        deleted = changed_rows(
            session,
            text("DELETE FROM topics WHERE project_id = :project AND key = :key"),
            {"project": project_id, "key": key},
        )
        if deleted == 0:
            abort(404, f"No topic {key!r}.")


def add_members(db: sessionmaker[Session], project_id: str, key: str, subscriber_ids: Sequence[str]) -> dict[str, int]:
    """Make the subscribers members; how many were not members before.

    The subscribers are read `FOR KEY SHARE`, so one erased meanwhile cannot break the
    membership's foreign key half-way: it is either found and kept until the commit, or
    reported unknown, and then nothing is written.
    """
    with db.begin() as session:
        _topic(session, project_id, key, lock=True)
        known, added = session.execute(
            text(
                """
                WITH known AS (
                    SELECT external_id FROM subscribers
                    WHERE project_id = :project AND external_id = ANY(CAST(:ids AS text[]))
                    FOR KEY SHARE
                ), added AS (
                    INSERT INTO topic_members (project_id, topic_key, subscriber_id)
                    SELECT :project, :key, external_id FROM known
                    ON CONFLICT DO NOTHING
                    RETURNING 1
                )
                SELECT (SELECT coalesce(array_agg(external_id), '{}') FROM known), (SELECT count(*) FROM added)
                """
            ),
            {"project": project_id, "key": key, "ids": list(subscriber_ids)},
        ).one()
        unknown = sorted(set(subscriber_ids) - set(known))
        if unknown:
            shown = ", ".join(repr(i) for i in unknown[:UNKNOWN_SHOWN])
            more = ", …" if len(unknown) > UNKNOWN_SHOWN else ""
            abort(
                422,
                "Some subscribers do not exist; nothing was added.",
                errors={"json": {"subscriber_ids": [f"{len(unknown):,} unknown: {shown}{more}"]}},
            )
    return {"added": added}


def remove_members(
    db: sessionmaker[Session], project_id: str, key: str, subscriber_ids: Sequence[str]
) -> dict[str, int]:
    """End the subscribers' memberships; how many were members."""
    with db.begin() as session:
        _topic(session, project_id, key)
        removed = changed_rows(
            session,
            text(
                """
                DELETE FROM topic_members
                WHERE project_id = :project AND topic_key = :key AND subscriber_id = ANY(CAST(:ids AS text[]))
                """
            ),
            {"project": project_id, "key": key, "ids": list(subscriber_ids)},
        )
    return {"removed": removed}


def members_page(
    db: sessionmaker[Session], project_id: str, key: str, cursor: str | None, limit: int
) -> dict[str, Any]:
    """The topic's members by subscriber id, a page at a time."""
    after = decode_cursor(cursor, str)
    query = select(TopicMember.subscriber_id, TopicMember.created_at.label("added_at")).where(
        TopicMember.project_id == project_id, TopicMember.topic_key == key
    )
    if after is not None:
        query = query.where(TopicMember.subscriber_id > after[0])
    with db() as session:
        _topic(session, project_id, key)
        rows = session.execute(query.order_by(TopicMember.subscriber_id).limit(limit + 1)).all()
    return page(rows, limit, lambda member: [member.subscriber_id])


def member_count(session: Session, project_id: str, key: str) -> int:
    return session.execute(
        select(func.count()).where(TopicMember.project_id == project_id, TopicMember.topic_key == key)
    ).scalar_one()


def of_subscriber(session: Session, project_id: str, subscriber_id: str) -> list[str]:
    """The keys of the topics a subscriber follows, in order, at most MAX_TOPICS_SHOWN."""
    return list(
        session.scalars(
            select(TopicMember.topic_key)
            .where(TopicMember.project_id == project_id, TopicMember.subscriber_id == subscriber_id)
            .order_by(TopicMember.topic_key)
            .limit(MAX_TOPICS_SHOWN)
        )
    )


def exists(session: Session, project_id: str, key: str) -> bool:
    return session.get(Topic, (project_id, key)) is not None


def _topic(session: Session, project_id: str, key: str, lock: bool = False) -> Topic:
    """The topic, or a 404; `lock`: held against deletion until the transaction ends."""
    topic = session.get(Topic, (project_id, key), with_for_update={"key_share": True} if lock else None)
    if topic is None:
        abort(404, f"No topic {key!r}.")
    return topic


def _fields(topic: Topic) -> dict[str, Any]:
    return {
        "key": topic.key,
        "name": topic.name,
        "description": topic.description,
        "created_at": topic.created_at,
        "updated_at": topic.updated_at,
    }
