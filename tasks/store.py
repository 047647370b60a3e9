"""Set-based reads and writes of the pipeline: one statement per step and batch.

These functions take a session and never commit; the task that calls them owns the
transaction. Every status change is conditional on the status the step expects, which is
what makes a duplicated task message harmless.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Row, text
from sqlalchemy.orm import Session

from app.enums import MessageStatus


@dataclass(frozen=True)
class Finalised:
    """One message's fate after a provider call, as the finalise statement writes it."""

    message_id: str
    status: MessageStatus
    provider_message_id: str | None = None
    error: str | None = None
    next_attempt_at: datetime | None = None
    refund_attempt: bool = False


@dataclass(frozen=True)
class NewEvent:
    message_id: str
    project_id: str
    type: str
    data: dict[str, Any]


def claim(session: Session, provider: str, ids: Sequence[str]) -> Sequence[Row]:
    """Take messages for sending: ready ones, and retrying ones whose wait is over.

    The conditional UPDATE is the guard against double sends: of two workers holding the
    same ids, only one gets rows back.
    """
    return session.execute(
        text(
            """
            UPDATE messages m
            SET status = 'sending', attempts = m.attempts + 1, claimed_at = now(), updated_at = now(),
                next_attempt_at = NULL
            FROM message_contents c
            WHERE c.message_id = m.id
              AND m.id = ANY(CAST(:ids AS uuid[]))
              AND m.provider = :provider
              AND (m.status = 'ready' OR (m.status = 'retrying' AND m.next_attempt_at <= now()))
            RETURNING m.id::text AS id, m.project_id, m.channel, m.priority, m.to_address, m.attempts,
                      m.created_at, c.subject, c.text, c.html, c.metadata
            """
        ),
        {"ids": list(ids), "provider": provider},
    ).all()


def expect_ready_by(session: Session, ids: Sequence[str], seconds: float) -> None:
    """Ready messages sent back to the broker: the sweeper must not expect them sooner."""
    session.execute(
        text(
            """
            UPDATE messages SET next_attempt_at = now() + make_interval(secs => :seconds)
            WHERE id = ANY(CAST(:ids AS uuid[])) AND status = 'ready'
            """
        ),
        {"ids": list(ids), "seconds": seconds},
    )


def finalise(session: Session, outcomes: Sequence[Finalised]) -> None:
    """Write every message's fate after a provider call in one statement."""
    if not outcomes:
        return
    session.execute(
        text(
            """
            UPDATE messages m
            SET status = v.status, provider_message_id = v.provider_message_id, error = v.error,
                next_attempt_at = v.next_attempt_at, attempts = m.attempts - v.refund,
                sent_at = CASE WHEN v.status = 'sent' THEN now() ELSE m.sent_at END,
                updated_at = now()
            FROM unnest(CAST(:ids AS uuid[]), CAST(:statuses AS text[]), CAST(:provider_ids AS text[]),
                        CAST(:errors AS text[]), CAST(:next_attempts AS timestamptz[]),
                        CAST(:refunds AS smallint[]))
                 AS v(id, status, provider_message_id, error, next_attempt_at, refund)
            WHERE m.id = v.id AND m.status = 'sending'
            """
        ),
        {
            "ids": [o.message_id for o in outcomes],
            "statuses": [o.status.value for o in outcomes],
            "provider_ids": [o.provider_message_id for o in outcomes],
            "errors": [o.error for o in outcomes],
            "next_attempts": [o.next_attempt_at for o in outcomes],
            "refunds": [int(o.refund_attempt) for o in outcomes],
        },
    )


def record_events(session: Session, events: Sequence[NewEvent]) -> None:
    """Insert the events that cannot be derived from the message row, in one statement."""
    if not events:
        return
    session.execute(
        text(
            """
            INSERT INTO events (message_id, project_id, type, data)
            SELECT * FROM unnest(CAST(:ids AS uuid[]), CAST(:projects AS text[]),
                                 CAST(:types AS text[]), CAST(:data AS jsonb[]))
            """
        ),
        {
            "ids": [e.message_id for e in events],
            "projects": [e.project_id for e in events],
            "types": [e.type for e in events],
            "data": [json.dumps(e.data) for e in events],
        },
    )
