"""The delivery log: stored events and derived `sent` entries, merged, a page at a time.

`sent` has no row (the happy path writes none), so each query is a UNION ALL of two
branches, each a top-N index scan: `events` by (project, at) or (project, type, at), and
`messages` by (project, sent_at). Subscriber and batch filters start from the messages
that match, so a subscriber's log costs what its messages cost, whatever the table size.
Order is (at, id), newest first; the cursor is the last entry's (at, id).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

from app.delivery.event_log import SENT_COLUMNS, STORED_COLUMNS, LogEntry, entry, parse_id
from app.enums import EventType
from app.errors import field_error
from app.pagination import aware_time, decode_cursor, encode_cursor

INVALID = "Invalid request."
# A resumed stream replays from this long before the last entry it delivered: an entry is
# stamped when its transaction starts and published when it commits, so one may reach
# the log after a later one was already streamed.
RESUME_OVERLAP = timedelta(seconds=10)
REPLAY_PAGE = 500
# What the log's projections read of a message (app.delivery.event_log).
CHOSEN_COLUMNS = "id, project_id, channel, subscriber_id, batch_id, sent_at, provider, provider_message_id, test"


@dataclass(frozen=True)
class LogQuery:
    """What the log is filtered on; `after` is an (at, id) position and `newest_first` the order."""

    project_id: str
    message_id: str | None = None
    subscriber_id: str | None = None
    batch_id: str | None = None
    types: tuple[str, ...] = ()
    since: datetime | None = None
    until: datetime | None = None
    after: tuple[datetime, str] | None = None
    newest_first: bool = True


def log_sql(query: LogQuery, limit: int) -> tuple[str, dict[str, Any]]:
    """The statement and its parameters; the benchmark EXPLAINs exactly this."""
    params: dict[str, Any] = {
        "project": query.project_id,
        "message": query.message_id,
        "subscriber": query.subscriber_id,
        "batch": query.batch_id,
        "since": query.since,
        "until": query.until,
        "limit": limit,
    }
    order = "DESC" if query.newest_first else "ASC"
    beyond = "<" if query.newest_first else ">"
    if query.after is not None:
        params["after_at"], params["after_key"] = query.after
    chosen = _chosen_messages(query)
    branches = []
    # One branch per type asked for: each is then a top-N scan of (project, type, at), where
    # `type = ANY(…)` would have to read every matching row to sort them.
    stored_types: list[str | None] = [t for t in query.types if t != EventType.SENT] if query.types else [None]
    for index, kind in enumerate(stored_types):
        where = ["e.project_id = :project", *_filters(query, "e.at", "e.message_id", "'evt_' || e.id", beyond)]
        if kind is not None:
            params[f"type{index}"] = kind
            where.append(f"e.type = :type{index}")
        top = f"ORDER BY e.at {order}, 'evt_' || e.id {order} LIMIT :limit"
        if chosen:
            # Per chosen message, its newest events by (message, at); never a walk of the project's log.
            newest = f"SELECT * FROM events e WHERE e.message_id = m.id AND {' AND '.join(where)} {top}"
            branches.append(f"SELECT {STORED_COLUMNS} FROM chosen m CROSS JOIN LATERAL ({newest}) e {top}")
        else:
            joined = "events e LEFT JOIN messages m ON m.id = e.message_id"
            branches.append(f"SELECT {STORED_COLUMNS} FROM {joined} WHERE {' AND '.join(where)} {top}")
    if not query.types or EventType.SENT in query.types:
        where = ["m.project_id = :project", "m.sent_at IS NOT NULL"]
        where += _filters(query, "m.sent_at", "m.id", "'sent_' || m.id", beyond)
        branches.append(
            f"SELECT {SENT_COLUMNS} FROM {'chosen' if chosen else 'messages'} m WHERE {' AND '.join(where)} "
            f"ORDER BY m.sent_at {order}, 'sent_' || m.id {order} LIMIT :limit"
        )
    union = " UNION ALL ".join(f"({branch})" for branch in branches)
    prelude = f"WITH chosen AS MATERIALIZED ({chosen}) " if chosen else ""
    return f"{prelude}SELECT * FROM ({union}) log ORDER BY at {order}, key {order} LIMIT :limit", params


def _chosen_messages(query: LogQuery) -> str | None:
    """The messages a subscriber or batch filter names, read first by their own index.

    Materialised, so the planner cannot choose instead to walk the project's whole log
    newest first and test each entry's message (the benchmark caught it doing so).
    """
    where = ["project_id = :project"]
    if query.subscriber_id is not None:
        where.append("subscriber_id = :subscriber")
    if query.batch_id is not None:
        where.append("batch_id = CAST(:batch AS uuid)")
    if len(where) == 1:
        return None
    return f"SELECT {CHOSEN_COLUMNS} FROM messages WHERE {' AND '.join(where)}"


def _filters(query: LogQuery, at: str, message: str, key: str, beyond: str) -> list[str]:
    where = []
    if query.message_id is not None:
        where.append(f"{message} = CAST(:message AS uuid)")
    if query.since is not None:
        where.append(f"{at} >= :since")
    if query.until is not None:
        where.append(f"{at} < :until")
    if query.after is not None:
        # The plain bound lets the index do the work; the row comparison breaks ties.
        where.append(f"{at} {beyond}= :after_at AND ({at}, {key}) {beyond} (:after_at, :after_key)")
    return where


def fetch(session: Session, query: LogQuery, limit: int) -> list[LogEntry]:
    sql, params = log_sql(query, limit)
    return [entry(row) for row in session.execute(text(sql), params)]


def list_events(db: sessionmaker[Session], project_id: str, filters: dict[str, Any]) -> dict[str, Any]:
    after = decode_cursor(filters.get("cursor"), aware_time, str)
    query = LogQuery(
        project_id,
        message_id=_text(filters.get("message_id")),
        subscriber_id=filters.get("subscriber_id"),
        batch_id=_text(filters.get("batch_id")),
        types=tuple(filters.get("type") or ()),
        since=filters.get("since"),
        until=filters.get("until"),
        after=after,
    )
    limit = filters["limit"]
    with db() as session:
        entries = fetch(session, query, limit + 1)
    page = entries[:limit]
    more = len(entries) > limit
    return {
        "items": [e.public() for e in page],
        "next_cursor": encode_cursor([page[-1].at.isoformat(), page[-1].id]) if more else None,
    }


def resume_point(db: sessionmaker[Session], project_id: str, last_event_id: str) -> tuple[datetime, str]:
    """Where a stream resumes: RESUME_OVERLAP before the entry the client saw last."""
    parsed = parse_id(last_event_id)
    at = None
    if parsed is not None:
        kind, key = parsed
        sql = (
            "SELECT at FROM events WHERE id = :key AND project_id = :project"
            if kind == "evt"
            else "SELECT sent_at FROM messages WHERE id = :key AND project_id = :project"
        )
        with db() as session:
            at = session.execute(text(sql), {"key": key, "project": project_id}).scalar()
    if at is None:
        field_error(422, INVALID, "headers", "Last-Event-ID", "Not an event id of this project's log.")
    return at - RESUME_OVERLAP, ""


def replay(db: sessionmaker[Session], project_id: str, start: tuple[datetime, str]) -> Iterator[LogEntry]:
    """Every entry after `start`, oldest first, a page (and a short session) at a time."""
    position = start
    while True:
        with db() as session:
            page = fetch(session, LogQuery(project_id, after=position, newest_first=False), REPLAY_PAGE)
        yield from page
        if len(page) < REPLAY_PAGE:
            return
        position = (page[-1].at, page[-1].id)


def _text(value: Any) -> str | None:
    return None if value is None else str(value)
