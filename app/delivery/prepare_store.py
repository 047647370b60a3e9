"""Set-based reads and writes of the prepare step: a fixed number of statements per batch.

One query loads the messages with their subscribers, preferences and project settings;
one loads the template versions they name; one the suppressions that match their
addresses. Each kind of outcome is then one UPDATE over `unnest` arrays, whatever the
batch size. These functions take a session and never commit; the load locks the rows
(FOR UPDATE … SKIP LOCKED), so the writes that follow in the same transaction find them
as they were read.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Row, text
from sqlalchemy.orm import Session

from app.delivery import store
from app.delivery.event_log import SENT_COLUMNS, LogEntry, entry
from app.enums import EventType, MessageStatus


@dataclass(frozen=True)
class Rendered:
    message_id: str
    subject: str | None = None
    text: str | None = None
    html: str | None = None
    payload: dict[str, Any] | None = None
    headers: dict[str, str] | None = None


@dataclass(frozen=True)
class Closed:
    """A message that ends in prepare: skipped, suppressed or failed."""

    message_id: str
    status: MessageStatus
    error: str | None = None


@dataclass
class Plan:
    """What prepare decided for a batch, gathered so each outcome is written in one statement."""

    closed: list[Closed] = field(default_factory=list)
    held: list[tuple[str, datetime]] = field(default_factory=list)
    rendered: list[Rendered] = field(default_factory=list)
    ready: list[tuple[str, str, str, str]] = field(default_factory=list)  # id, provider, priority, address
    inbox: list[tuple[str, str]] = field(default_factory=list)  # id, subscriber id
    events: list[store.NewEvent] = field(default_factory=list)

    def close(self, row: Row, status: MessageStatus, event: EventType, data: dict[str, Any]) -> None:
        error = data["reason"] if status is MessageStatus.FAILED else None
        self.closed.append(Closed(row.id, status, error))
        self.events.append(store.NewEvent(row.id, row.project_id, event, data))


def load(session: Session, ids: Sequence[str]) -> Sequence[Row]:
    """Accepted messages with all prepare needs to decide them; rows another worker holds are skipped."""
    return session.execute(
        text(
            """
            SELECT m.id::text AS id, m.project_id, m.channel, m.priority, m.category, m.test,
                   m.to_address, m.subscriber_id, m.template, m.template_version, m.bypass_quiet_hours,
                   c.data AS message_data, c.locale AS message_locale,
                   s.external_id IS NOT NULL AS has_subscriber, s.email, s.phone, s.push_tokens,
                   s.locale AS subscriber_locale, s.timezone, s.data AS subscriber_data, s.preferences,
                   s.created_at AS subscriber_created_at,
                   p.settings AS project_settings, now() AS now
            FROM messages m
            JOIN projects p ON p.id = m.project_id
            LEFT JOIN message_contents c ON c.message_id = m.id
            LEFT JOIN subscribers s ON s.project_id = m.project_id AND s.external_id = m.subscriber_id
            WHERE m.id = ANY(CAST(:ids AS uuid[])) AND m.status = 'accepted'
            FOR UPDATE OF m SKIP LOCKED
            """
        ),
        {"ids": list(ids)},
    ).all()


def template_versions(session: Session, wanted: Collection[tuple[str, str, int]]) -> Sequence[Row]:
    """The template versions the batch's messages were pinned to: (project, key, version)."""
    if not wanted:
        return []
    projects, keys, versions = zip(*wanted, strict=True)
    return session.execute(
        text(
            """
            SELECT t.project_id, t.key, t.version, t.channel, t.default_locale, t.variants, t.tracking, t.created_at
            FROM templates t
            JOIN unnest(CAST(:projects AS text[]), CAST(:keys AS text[]), CAST(:versions AS int[]))
                 AS w(project_id, key, version)
              ON t.project_id = w.project_id AND t.key = w.key AND t.version = w.version
            """
        ),
        {"projects": list(projects), "keys": list(keys), "versions": list(versions)},
    ).all()


def active_suppressions(session: Session, candidates: Collection[tuple[str, str, str]]) -> dict[tuple, str]:
    """(project, channel, normalised address) → reason, for those suppressed right now."""
    if not candidates:
        return {}
    projects, channels, addresses = zip(*candidates, strict=True)
    rows = session.execute(
        text(
            """
            SELECT s.project_id, s.channel, s.address, s.reason
            FROM suppressions s
            JOIN unnest(CAST(:projects AS text[]), CAST(:channels AS text[]), CAST(:addresses AS text[]))
                 AS w(project_id, channel, address)
              ON s.project_id = w.project_id AND s.channel = w.channel AND s.address = w.address
            WHERE s.expires_at IS NULL OR s.expires_at > now()
            """
        ),
        {"projects": list(projects), "channels": list(channels), "addresses": list(addresses)},
    ).all()
    return {(r.project_id, r.channel, r.address): r.reason for r in rows}


def inline_html(session: Session, ids: Sequence[str]) -> dict[str, str]:
    """The html of messages sent with inline content, for the ones tracking rewrites."""
    if not ids:
        return {}
    rows = session.execute(
        text(
            "SELECT message_id::text AS id, html FROM message_contents "
            "WHERE message_id = ANY(CAST(:ids AS uuid[])) AND html IS NOT NULL"
        ),
        {"ids": list(ids)},
    ).all()
    return {row.id: row.html for row in rows}


def write_content(session: Session, rendered: Sequence[Rendered]) -> None:
    """Store what templates rendered and tracking added, where deliver's claim reads content
    from. A field left None keeps what is stored (inline content that only gains headers);
    headers are added to those the message came with (List-Unsubscribe replacing its own)."""
    if not rendered:
        return
    session.execute(
        text(
            """
            UPDATE message_contents c
            SET subject = COALESCE(v.subject, c.subject), text = COALESCE(v.text, c.text),
                html = COALESCE(v.html, c.html), payload = COALESCE(v.payload, c.payload),
                headers = CASE WHEN v.headers IS NULL THEN c.headers ELSE COALESCE(c.headers, '{}') || v.headers END
            FROM unnest(CAST(:ids AS uuid[]), CAST(:subjects AS text[]), CAST(:texts AS text[]),
                        CAST(:htmls AS text[]), CAST(:payloads AS jsonb[]), CAST(:headers AS jsonb[]))
                 AS v(id, subject, text, html, payload, headers)
            WHERE c.message_id = v.id
            """
        ),
        {
            "ids": [r.message_id for r in rendered],
            "subjects": [r.subject for r in rendered],
            "texts": [r.text for r in rendered],
            "htmls": [r.html for r in rendered],
            "payloads": [None if r.payload is None else json.dumps(r.payload) for r in rendered],
            "headers": [None if r.headers is None else json.dumps(r.headers) for r in rendered],
        },
    )


def close(session: Session, closed: Sequence[Closed]) -> None:
    """Messages that go no further: skipped, suppressed, failed, each with its reason."""
    if not closed:
        return
    session.execute(
        text(
            """
            UPDATE messages m SET status = v.status, error = v.error, updated_at = now()
            FROM unnest(CAST(:ids AS uuid[]), CAST(:statuses AS text[]), CAST(:errors AS text[]))
                 AS v(id, status, error)
            WHERE m.id = v.id AND m.status = 'accepted'
            """
        ),
        {
            "ids": [c.message_id for c in closed],
            "statuses": [c.status.value for c in closed],
            "errors": [c.error for c in closed],
        },
    )


def hold(session: Session, held: Sequence[tuple[str, datetime]]) -> None:
    """Back to `scheduled` until the given time; release_due hands them to prepare again.

    The hold's end goes in `next_attempt_at`, not `scheduled_at`: that stays what the
    client asked for, which the idempotent replay and the timeline read.
    """
    if not held:
        return
    session.execute(
        text(
            """
            UPDATE messages m SET status = 'scheduled', next_attempt_at = v.until, updated_at = now()
            FROM unnest(CAST(:ids AS uuid[]), CAST(:untils AS timestamptz[])) AS v(id, until)
            WHERE m.id = v.id AND m.status = 'accepted'
            """
        ),
        {"ids": [i for i, _ in held], "untils": [until for _, until in held]},
    )


def mark_ready(session: Session, ids: Sequence[str], providers: Sequence[str], addresses: Sequence[str]) -> None:
    if not ids:
        return
    session.execute(
        text(
            """
            UPDATE messages m
            SET status = 'ready', provider = v.provider, to_address = v.address,
                ready_at = now(), updated_at = now()
            FROM unnest(CAST(:ids AS uuid[]), CAST(:providers AS text[]), CAST(:addresses AS text[]))
                 AS v(id, provider, address)
            WHERE m.id = v.id AND m.status = 'accepted'
            """
        ),
        {"ids": list(ids), "providers": list(providers), "addresses": list(addresses)},
    )


def to_inbox(session: Session, items: Sequence[tuple[str, str]]) -> list[LogEntry]:
    """In-app messages need no provider: each (message id, subscriber id) becomes an item of
    the subscriber's inbox and is `sent` in the same statement. Returns their `sent` entries."""
    if not items:
        return []
    rows = session.execute(
        text(
            f"""
            WITH m AS (
                UPDATE messages m
                SET status = 'sent', provider = 'inbox', to_address = v.subscriber,
                    ready_at = now(), sent_at = now(), updated_at = now()
                FROM unnest(CAST(:ids AS uuid[]), CAST(:subscribers AS text[])) AS v(id, subscriber)
                WHERE m.id = v.id AND m.status = 'accepted'
                RETURNING m.*
            ), stored AS (
                INSERT INTO inbox_items (message_id, project_id, subscriber_id)
                SELECT id, project_id, subscriber_id FROM m
            )
            SELECT {SENT_COLUMNS} FROM m
            """
        ),
        {"ids": [i for i, _ in items], "subscribers": [s for _, s in items]},
    ).all()
    return [entry(row) for row in rows]
