"""Set-based reads and writes of the pipeline: one statement per step and batch.

These functions take a session and never commit; the task that calls them owns the
transaction. Every status change is conditional on the status the step expects, which is
what makes a duplicated task message harmless.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from app.db import rows_as
from app.delivery import fanout
from app.delivery.event_log import SENT_COLUMNS, STORED_COLUMNS, LogEntry, entry
from app.enums import EventType, MessageStatus
from providers import bounded


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
    message_id: str | None  # None for a project-level event
    project_id: str
    type: str
    data: dict[str, Any]


# What a claim returns of each message: all a provider call needs. `account_version` is set
# where the message's project has its own account with the provider: when it was last
# changed (a primary-key lookup per row, inside the one statement). `webhook_project` is, for
# the webhook channel only, one more lookup by key: its project's `signing_secrets`
# (encrypted, current first, the previous one during a rotation's overlap; null stands for
# the account's own secret) and the `allowed_networks` it may also reach. So signing and
# guarding each project's webhooks costs the batch no query of its own.
CLAIMED_COLUMNS = """
    m.id::text AS id, m.project_id, m.channel, m.priority, m.to_address, m.attempts,
    m.subscriber_id, m.created_at, c.subject, c.text, c.html, c.metadata, c.payload, c.reply_to, c.cc,
    c.headers, c.from_address, c.attachment_ids::text[] AS attachment_ids,
    (SELECT a.updated_at FROM project_providers a
     WHERE a.project_id = m.project_id AND a.provider = m.provider) AS account_version,
    CASE WHEN m.channel = 'webhook' THEN
      (SELECT jsonb_build_object(
                  'signing_secrets', ARRAY[p.webhook_signing_secret]
                      || CASE WHEN p.webhook_signing_previous_expires_at > now()
                              THEN ARRAY[p.webhook_signing_previous_secret] ELSE '{}' END,
                  'allowed_networks', p.settings -> 'webhook_allowed_networks')
       FROM projects p WHERE p.id = m.project_id)
    END AS webhook_project
"""


@dataclass(frozen=True)
class Claimed:
    """A message taken for sending, as CLAIMED_COLUMNS return it: all a provider call needs."""

    id: str
    project_id: str
    channel: str
    priority: str
    to_address: str  # prepare fails a message it finds no address for: a ready one has one
    attempts: int
    subscriber_id: str | None
    created_at: datetime
    subject: str | None
    text: str | None
    html: str | None
    metadata: dict[str, Any]
    payload: dict[str, Any] | None
    reply_to: str | None
    cc: str | None
    headers: dict[str, Any] | None
    from_address: str | None
    attachment_ids: list[str] | None
    account_version: datetime | None
    webhook_project: dict[str, Any] | None


def claim(session: Session, provider: str, ids: Sequence[str], worker: str, claim_id: str) -> list[Claimed]:
    """Take messages for sending: ready ones, and retrying ones whose wait is over.

    The conditional UPDATE is the guard against double sends: of two workers holding the
    same ids, only one gets rows back. The claim names the `worker` process holding it and
    this run of it (`claim_id`), for the sweeper (tasks/maintenance.py).
    """
    rows = session.execute(
        text(
            f"""
            UPDATE messages m
            SET status = 'sending', attempts = m.attempts + 1, claimed_at = now(), updated_at = now(),
                next_attempt_at = NULL, claimed_by = :worker, claim_id = CAST(:claim_id AS uuid)
            FROM message_contents c
            WHERE c.message_id = m.id
              AND m.id = ANY(CAST(:ids AS uuid[]))
              AND m.provider = :provider
              AND (m.status = 'ready' OR (m.status = 'retrying' AND m.next_attempt_at <= now()))
            RETURNING {CLAIMED_COLUMNS}
            """
        ),
        {"ids": list(ids), "provider": provider, "worker": worker, "claim_id": claim_id},
    )
    return rows_as(Claimed, rows)


@dataclass(frozen=True)
class HandedOver:
    """A message moved to another provider, and that provider."""

    id: str
    provider: str


def hand_over(session: Session, provider: str, ids: Sequence[str], targets: Mapping[str, str]) -> list[HandedOver]:
    """Move the messages `provider` may not send now to another provider, per channel
    (`targets`: channel → provider), in one statement; returns those moved."""
    if not targets:
        return []
    rows = session.execute(
        text(
            """
            UPDATE messages m SET provider = v.target, status = 'ready', next_attempt_at = NULL, updated_at = now()
            FROM unnest(CAST(:channels AS text[]), CAST(:targets AS text[])) AS v(channel, target)
            WHERE m.id = ANY(CAST(:ids AS uuid[])) AND m.provider = :provider AND m.channel = v.channel
              AND (m.status = 'ready' OR (m.status = 'retrying' AND m.next_attempt_at <= now()))
            RETURNING m.id::text AS id, m.provider
            """
        ),
        {"ids": list(ids), "provider": provider, "channels": list(targets), "targets": list(targets.values())},
    )
    return rows_as(HandedOver, rows)


@dataclass(frozen=True)
class ProjectAccount:
    """A project's own account with a provider: its settings sealed (app/crypto), and when
    they last changed (what an adapter built from them is cached by)."""

    project_id: str
    sealed: str
    updated_at: datetime


def project_accounts(session: Session, provider: str, projects: Collection[str]) -> list[ProjectAccount]:
    """The sealed settings of projects' own accounts with `provider`."""
    rows = session.execute(
        text(
            """
            SELECT project_id, sealed, updated_at FROM project_providers
            WHERE provider = :provider AND project_id = ANY(CAST(:projects AS text[]))
            """
        ),
        {"provider": provider, "projects": list(projects)},
    )
    return rows_as(ProjectAccount, rows)


def remove_push_tokens(session: Session, tokens: Sequence[tuple[str, str, str]]) -> None:
    """Drop dead push tokens from their subscribers: (project, subscriber, token), one statement."""
    if not tokens:
        return
    projects, subscribers, values = zip(*tokens, strict=True)
    session.execute(
        text(
            """
            UPDATE subscribers s
            SET push_tokens = ARRAY(SELECT t.token FROM unnest(s.push_tokens) WITH ORDINALITY AS t(token, n)
                                    WHERE t.token <> ALL(dead.tokens) ORDER BY t.n),
                updated_at = now()
            FROM (SELECT project_id, subscriber_id, array_agg(token) AS tokens
                  FROM unnest(CAST(:projects AS text[]), CAST(:subscribers AS text[]), CAST(:tokens AS text[]))
                       AS v(project_id, subscriber_id, token)
                  GROUP BY project_id, subscriber_id) AS dead
            WHERE s.project_id = dead.project_id AND s.external_id = dead.subscriber_id
              AND s.push_tokens && dead.tokens
            """
        ),
        {"projects": list(projects), "subscribers": list(subscribers), "tokens": list(values)},
    )


def claimable(session: Session, ids: Sequence[str]) -> list[str]:
    """Those of `ids` a claim would take now, in their order: a chunk dispatched twice (the
    sweeper takes long-waiting rows for lost) finds its rows sent or taken the second time."""
    found = set(
        session.execute(
            text(
                """
                SELECT id::text FROM messages
                WHERE id = ANY(CAST(:ids AS uuid[]))
                  AND (status = 'ready' OR (status = 'retrying' AND next_attempt_at <= now()))
                """
            ),
            {"ids": list(ids)},
        ).scalars()
    )
    return [i for i in ids if i in found]


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


def finalise(session: Session, outcomes: Sequence[Finalised], worker: str) -> list[LogEntry]:
    """Write every message's fate after a provider call in one statement, where `worker`
    still holds its claim: a process the sweeper took for dead (cut off, not killed) finds
    its claims settled or taken by another, and writes nothing over them.

    The messages sent are announced (app.delivery.fanout) in the same transaction; the same
    statement says which of their projects have a webhook endpoint, so the fan-out costs the
    batch no look-up of its own. Returns the derived `sent` entries it announced.
    """
    if not outcomes:
        return []
    rows = session.execute(
        text(
            f"""
            WITH done AS (
                UPDATE messages m
                SET status = v.status, provider_message_id = v.provider_message_id, error = v.error,
                    next_attempt_at = v.next_attempt_at, attempts = m.attempts - v.refund,
                    sent_at = CASE WHEN v.status = 'sent' THEN now() ELSE m.sent_at END,
                    updated_at = now()
                FROM unnest(CAST(:ids AS uuid[]), CAST(:statuses AS text[]), CAST(:provider_ids AS text[]),
                            CAST(:errors AS text[]), CAST(:next_attempts AS timestamptz[]),
                            CAST(:refunds AS smallint[]))
                     AS v(id, status, provider_message_id, error, next_attempt_at, refund)
                WHERE m.id = v.id AND m.status = 'sending' AND m.claimed_by = :worker
                RETURNING m.status, {SENT_COLUMNS}
            )
            SELECT done.*, done.project_id IN (
                SELECT w.project_id FROM webhook_endpoints w
                WHERE w.disabled_at IS NULL AND w.project_id IN (SELECT project_id FROM done)
            ) AS listened
            FROM done WHERE done.status = 'sent'
            """
        ),
        {
            "ids": [o.message_id for o in outcomes],
            "statuses": [o.status.value for o in outcomes],
            # What a provider answered may hold what PostgreSQL refuses; the message must still be written.
            "provider_ids": [o.provider_message_id and storable(o.provider_message_id) for o in outcomes],
            "errors": [o.error and storable(o.error) for o in outcomes],
            "next_attempts": [o.next_attempt_at for o in outcomes],
            "refunds": [int(o.refund_attempt) for o in outcomes],
            "worker": worker,
        },
    ).all()
    entries = [entry(row) for row in rows]
    fanout.announce(session, entries, listening={row.project_id for row in rows if row.listened})
    return entries


def held_by(session: Session, ids: Sequence[str], worker: str) -> set[str]:
    """Those of `ids` still `sending` under `worker`'s claim, locked for the transaction: a
    late write of its answers (tasks/kept_answers.py) settles those and no others, so a
    write made twice records their events once."""
    return set(
        session.execute(
            text(
                """
                SELECT id::text FROM messages
                WHERE id = ANY(CAST(:ids AS uuid[])) AND status = 'sending' AND claimed_by = :worker
                FOR UPDATE
                """
            ),
            {"ids": list(ids), "worker": worker},
        ).scalars()
    )


# An error kept on a message row: enough to act on, never a provider's whole answer.
MAX_ERROR_CHARS = 1000


def storable(text_value: str, limit: int = MAX_ERROR_CHARS) -> str:
    """`text_value` as PostgreSQL's text takes it (a NUL fails the whole statement), and bounded."""
    return bounded.storable(text_value)[:limit]


def fail_alone(session: Session, message_id: str, expected: MessageStatus, error: str) -> bool:
    """Fail one message still at `expected` with `error`, and log it; False if it had moved on."""
    error = storable(error)
    row = session.execute(
        text(
            """
            UPDATE messages SET status = 'failed', error = :error, updated_at = now()
            WHERE id = CAST(:id AS uuid) AND status = :expected
            RETURNING project_id
            """
        ),
        {"id": message_id, "expected": expected.value, "error": error},
    ).first()
    if row is None:
        return False
    record_events(session, [NewEvent(message_id, row.project_id, EventType.FAILED, {"reason": error})])
    return True


def record_events(session: Session, events: Sequence[NewEvent]) -> list[LogEntry]:
    """Insert the events that cannot be derived from the message row, in one statement,
    and announce them to live streams and webhook endpoints (app.delivery.fanout)."""
    if not events:
        return []
    rows = session.execute(
        text(
            f"""
            WITH e AS (
                INSERT INTO events (message_id, project_id, type, data)
                SELECT * FROM unnest(CAST(:ids AS uuid[]), CAST(:projects AS text[]),
                                     CAST(:types AS text[]), CAST(:data AS jsonb[]))
                RETURNING *
            )
            SELECT {STORED_COLUMNS} FROM e LEFT JOIN messages m ON m.id = e.message_id ORDER BY e.id
            """
        ),
        {
            "ids": [e.message_id for e in events],
            "projects": [e.project_id for e in events],
            "types": [e.type for e in events],
            "data": [json.dumps(e.data) for e in events],
        },
    ).all()
    entries = [entry(row) for row in rows]
    fanout.announce(session, entries)
    return entries


def break_claim(session: Session, ids: Sequence[str]) -> None:
    """Forget which run claimed `ids`: their fates are written apart (a poison halved the
    finalise), so what is left of the claim could not be sent again as the same calls, and
    the sweeper settles it as `unknown` should its worker die now."""
    session.execute(
        text("UPDATE messages SET claim_id = NULL WHERE id = ANY(CAST(:ids AS uuid[])) AND status = 'sending'"),
        {"ids": list(ids)},
    )


# `claimed_by` of a claim the sweeper took from a dead worker, until a resend takes it over.
HANDED_BACK = "sweeper"


def take_over(session: Session, claim_id: str, worker: str) -> list[Claimed]:
    """The rows of a claim the sweeper handed back, now claimed by `worker` to be sent again.

    Nothing while any row of the claim is still held by its dead worker (a sweep takes a
    bounded number of rows): the resend must make the very calls the claim made, no fewer.
    The attempt is not counted again; it is the same attempt, repeated.
    """
    rows = session.execute(
        text(
            f"""
            UPDATE messages m SET claimed_by = :worker, claimed_at = now(), updated_at = now()
            FROM message_contents c
            WHERE c.message_id = m.id AND m.claim_id = CAST(:claim_id AS uuid)
              AND m.status = 'sending' AND m.claimed_by = :handed_back
              AND NOT EXISTS (SELECT 1 FROM messages o
                              WHERE o.status = 'sending' AND o.claim_id = CAST(:claim_id AS uuid)
                                AND o.claimed_by <> :handed_back)
            RETURNING {CLAIMED_COLUMNS}
            """
        ),
        {"claim_id": claim_id, "worker": worker, "handed_back": HANDED_BACK},
    )
    return rows_as(Claimed, rows)
