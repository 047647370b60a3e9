"""Set-based reads and writes of outbound webhooks: one statement per step and batch.

A project without an enabled endpoint costs one index probe per batch of events and
nothing else: no delivery row, no task. These functions take a session and never commit.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from app.db import rows_as
from app.delivery.event_log import LogEntry
from app.enums import WebhookDeliveryStatus

# Events per POST for an endpoint that takes arrays.
PER_POST = 100


def webhook_item(entry: LogEntry) -> dict[str, Any]:
    """One event as Standard Webhooks recommends: {"type", "timestamp", "data"}."""
    public = entry.public()
    return {"type": entry.type, "timestamp": public["at"], "data": public}


def listening_projects(session: Session, project_ids: Collection[str]) -> set[str]:
    """The projects among `project_ids` with at least one enabled endpoint."""
    rows = session.execute(
        text(
            """
            SELECT DISTINCT project_id FROM webhook_endpoints
            WHERE project_id = ANY(CAST(:projects AS text[])) AND disabled_at IS NULL
            """
        ),
        {"projects": sorted(project_ids)},
    ).scalars()
    return set(rows)


def enqueue(session: Session, entries: Sequence[LogEntry], listening: Collection[str] | None = None) -> list[str]:
    """Deliveries for every enabled endpoint whose filter takes the entry, in one statement.

    An endpoint that takes arrays gets one delivery per PER_POST events; the others one per
    event. `listening`: the projects with an enabled endpoint, where the caller already
    knows them (None: looked up here). Returns the new delivery ids (none when no project
    of the batch has an endpoint).
    """
    if listening is None:
        listening = listening_projects(session, {entry.project_id for entry in entries})
    if not listening:
        return []
    items = [
        {"ord": index, "project_id": entry.project_id, "type": entry.type, "item": webhook_item(entry)}
        for index, entry in enumerate(entries)
        if entry.project_id in listening
    ]
    return list(
        session.execute(
            text(
                """
                WITH e AS (
                    SELECT * FROM jsonb_to_recordset(CAST(:items AS jsonb))
                        AS e(ord int, project_id text, type text, item jsonb)
                ), matched AS (
                    SELECT w.id AS endpoint_id, w.project_id, w.batch, e.item, e.ord,
                           row_number() OVER (PARTITION BY w.id ORDER BY e.ord) - 1 AS n
                    FROM webhook_endpoints w JOIN e ON e.project_id = w.project_id
                    WHERE w.disabled_at IS NULL
                      AND (cardinality(w.event_types) = 0 OR e.type = ANY(w.event_types))
                )
                INSERT INTO webhook_deliveries (endpoint_id, project_id, events)
                SELECT endpoint_id, project_id, jsonb_agg(item ORDER BY ord)
                FROM matched
                GROUP BY endpoint_id, project_id, CASE WHEN batch THEN n / :per_post ELSE n END
                RETURNING id::text
                """
            ),
            {"items": json.dumps(items), "per_post": PER_POST},
        ).scalars()
    )


@dataclass(frozen=True)
class Claimed:
    """A delivery taken for an attempt, with all its POST needs: its endpoint's URL, shape
    and secrets (encrypted; the previous one during a rotation's overlap), and the networks
    its project may also reach (`webhook_allowed_networks`, as stored)."""

    id: str
    project_id: str
    endpoint_id: str
    events: list[dict[str, Any]]
    attempts: int
    url: str
    batch: bool
    secret: str
    previous_secret: str | None
    allowed_networks: Any


def claim(session: Session, ids: Sequence[str]) -> list[Claimed]:
    """Take due deliveries of enabled endpoints for an attempt; a duplicate task gets nothing."""
    rows = session.execute(
        text(
            """
            UPDATE webhook_deliveries d
            SET status = 'sending', attempts = d.attempts + 1, claimed_at = now(), updated_at = now()
            FROM webhook_endpoints w, projects p
            WHERE w.id = d.endpoint_id AND w.disabled_at IS NULL AND p.id = d.project_id
              AND d.id = ANY(CAST(:ids AS uuid[]))
              AND d.status IN ('pending', 'retrying') AND d.next_attempt_at <= now()
            RETURNING d.id::text AS id, d.project_id, d.endpoint_id::text AS endpoint_id, d.events, d.attempts,
                      w.url, w.batch, w.secret,
                      CASE WHEN w.previous_secret_expires_at > now() THEN w.previous_secret END AS previous_secret,
                      COALESCE(p.settings -> 'webhook_allowed_networks', '[]') AS allowed_networks
            """
        ),
        {"ids": list(ids)},
    )
    return rows_as(Claimed, rows)


@dataclass(frozen=True)
class Attempt:
    """One POST and what came of it."""

    delivery_id: str
    endpoint_id: str
    duration_ms: int
    status_code: int | None = None
    response: str | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300

    @property
    def gone(self) -> bool:
        return self.status_code == 410


@dataclass(frozen=True)
class Settled:
    """A delivery's state after an attempt."""

    delivery_id: str
    status: WebhookDeliveryStatus
    next_attempt_at: datetime | None = None


def record_attempts(session: Session, attempts: Sequence[Attempt], settled: Sequence[Settled]) -> None:
    """Log each attempt and move each delivery on, one statement each."""
    session.execute(
        text(
            """
            INSERT INTO webhook_attempts (delivery_id, status_code, response, error, duration_ms)
            SELECT * FROM unnest(CAST(:ids AS uuid[]), CAST(:codes AS smallint[]), CAST(:responses AS text[]),
                                 CAST(:errors AS text[]), CAST(:durations AS int[]))
            """
        ),
        {
            "ids": [a.delivery_id for a in attempts],
            "codes": [a.status_code for a in attempts],
            "responses": [a.response for a in attempts],
            "errors": [a.error for a in attempts],
            "durations": [a.duration_ms for a in attempts],
        },
    )
    session.execute(
        text(
            """
            UPDATE webhook_deliveries d
            SET status = v.status, next_attempt_at = v.next_attempt_at, claimed_at = NULL, updated_at = now(),
                delivered_at = CASE WHEN v.status = 'succeeded' THEN now() ELSE d.delivered_at END
            FROM unnest(CAST(:ids AS uuid[]), CAST(:statuses AS text[]), CAST(:nexts AS timestamptz[]))
                 AS v(id, status, next_attempt_at)
            WHERE d.id = v.id AND d.status = 'sending'
            """
        ),
        {
            "ids": [s.delivery_id for s in settled],
            "statuses": [s.status.value for s in settled],
            "nexts": [s.next_attempt_at for s in settled],
        },
    )


def fail_alone(session: Session, delivery_id: str, error: str) -> bool:
    """Fail one delivery its task could not handle, with `error` (storable, app.delivery.store)
    as its attempt's reason, so the other deliveries of its task go on; False if it had ended."""
    row = session.execute(
        text(
            """
            UPDATE webhook_deliveries SET status = 'failed', claimed_at = NULL, updated_at = now()
            WHERE id = CAST(:id AS uuid) AND status IN ('pending', 'retrying', 'sending')
            RETURNING id
            """
        ),
        {"id": delivery_id},
    ).first()
    if row is None:
        return False
    session.execute(
        text("INSERT INTO webhook_attempts (delivery_id, error, duration_ms) VALUES (CAST(:id AS uuid), :error, 0)"),
        {"id": delivery_id, "error": error},
    )
    return True


GONE_REASON = "the endpoint answered 410 Gone"
FAILING_REASON = "every attempt failed for {days:g} days"


@dataclass(frozen=True)
class EndpointStreak:
    """An endpoint whose streak an attempt moved on, and whether that disabled it just now."""

    id: str
    project_id: str
    url: str
    disabled_reason: str | None
    disabled: bool


def settle_endpoints(session: Session, attempts: Sequence[Attempt], disable_after: float) -> list[EndpointStreak]:
    """Track each endpoint's failure streak; disable it on a 410 or a streak longer than
    `disable_after` seconds. Returns every endpoint still enabled before, `disabled` now or not."""
    rows = session.execute(
        text(
            """
            WITH v AS (
                SELECT id, bool_or(ok) AS ok, bool_or(gone) AS gone
                FROM unnest(CAST(:ids AS uuid[]), CAST(:oks AS bool[]), CAST(:gones AS bool[])) AS v(id, ok, gone)
                GROUP BY id
            ), judged AS (
                SELECT w.id, v.ok,
                       CASE WHEN v.gone THEN :gone_reason
                            WHEN NOT v.ok AND w.failing_since < now() - make_interval(secs => :disable_after)
                            THEN :failing_reason END AS reason
                FROM webhook_endpoints w JOIN v ON v.id = w.id
                WHERE w.disabled_at IS NULL
            )
            UPDATE webhook_endpoints w
            SET failing_since = CASE WHEN j.ok THEN NULL ELSE COALESCE(w.failing_since, now()) END,
                disabled_at = CASE WHEN j.reason IS NOT NULL THEN now() END,
                disabled_reason = j.reason,
                updated_at = now()
            FROM judged j WHERE w.id = j.id
            RETURNING w.id::text AS id, w.project_id, w.url, w.disabled_reason, w.disabled_at IS NOT NULL AS disabled
            """
        ),
        {
            "ids": [a.endpoint_id for a in attempts],
            "oks": [a.ok for a in attempts],
            "gones": [a.gone for a in attempts],
            "disable_after": disable_after,
            "gone_reason": GONE_REASON,
            "failing_reason": FAILING_REASON.format(days=disable_after / 86400),
        },
    )
    return rows_as(EndpointStreak, rows)


@dataclass(frozen=True)
class Due:
    """A delivery made due now, and its project (tasks go per project)."""

    id: str
    project_id: str


def release_due(session: Session, grace: float, claim_timeout: float, batch: int) -> list[Due]:
    """Deliveries whose wait is over (parked long retries, lost tasks) and claims whose
    worker died: made due now and returned with their project, for the caller to dispatch
    after commit."""
    rows = session.execute(
        text(
            """
                UPDATE webhook_deliveries d
                SET status = CASE WHEN d.status = 'sending' THEN 'retrying' ELSE d.status END,
                    next_attempt_at = now(), claimed_at = NULL, updated_at = now()
                WHERE d.id IN (
                    SELECT d2.id FROM webhook_deliveries d2
                    JOIN webhook_endpoints w ON w.id = d2.endpoint_id AND w.disabled_at IS NULL
                    WHERE (d2.status IN ('pending', 'retrying')
                           AND d2.next_attempt_at <= now() - make_interval(secs => :grace))
                       OR (d2.status = 'sending' AND d2.claimed_at < now() - make_interval(secs => :timeout))
                    LIMIT :batch FOR UPDATE OF d2 SKIP LOCKED)
                RETURNING d.id::text AS id, d.project_id
                """
        ),
        {"grace": grace, "timeout": claim_timeout, "batch": batch},
    )
    return rows_as(Due, rows)


def webhook_id(delivery_id: str) -> str:
    """The `webhook-id` header of a delivery: the same on every attempt, so receivers can de-duplicate."""
    return "msg_" + delivery_id.replace("-", "")
