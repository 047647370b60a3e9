"""Beat work: release what has come due, and re-dispatch what stopped moving.

PostgreSQL is the truth and a broker message may be lost (a Redis restart, a publish that
failed after commit); these two tasks are what guarantees every committed row moves on.
Both lock with SKIP LOCKED, so two beat processes never release the same row twice.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence

from sqlalchemy import Row, text
from sqlalchemy.orm import Session

from app.config import Settings, current_settings
from app.db import enqueue_after_commit, session_scope
from app.delivery import dispatch, store
from app.delivery.adapters import provider_instance
from app.delivery.broker import celery_app
from app.delivery.queues import active_providers
from app.enums import EventType
from app.observability.counters import increment
from app.redis_client import redis_for

logger = logging.getLogger(__name__)

BATCH = 5000
# Providers retry a webhook for a few days at most (SendGrid up to 72 hours); a receipt kept
# twice as long as the longest still turns any replay into a no-op.
RECEIPT_DAYS = 14
# `retrying` rows are normally picked up by their countdown task; this grace keeps
# release_due from racing it and only catches parked or lost ones.
RETRY_GRACE_SECONDS = 10


@celery_app.task(name="tidings.release_due")
def release_due() -> dict[str, int]:
    """Scheduled messages whose time has come → prepare; parked retries → deliver.

    A scheduled message is due at its quiet-hours release (`next_attempt_at`) when it was
    held, else at the time the client asked for.
    """
    with session_scope(current_settings().database_url) as session:
        scheduled = session.execute(
            text(
                """
                UPDATE messages SET status = 'accepted', next_attempt_at = NULL, updated_at = now()
                WHERE id IN (SELECT id FROM messages
                             WHERE status = 'scheduled' AND COALESCE(next_attempt_at, scheduled_at) <= now()
                             ORDER BY COALESCE(next_attempt_at, scheduled_at) LIMIT :batch
                             FOR UPDATE SKIP LOCKED)
                RETURNING id::text, project_id, priority
                """
            ),
            {"batch": BATCH},
        ).all()
        enqueue_prepare(session, scheduled)
        retries = session.execute(
            text(
                """
                UPDATE messages SET status = 'ready', next_attempt_at = NULL, updated_at = now()
                WHERE id IN (SELECT id FROM messages
                             WHERE status = 'retrying'
                               AND next_attempt_at <= now() - make_interval(secs => :grace)
                             ORDER BY next_attempt_at LIMIT :batch FOR UPDATE SKIP LOCKED)
                RETURNING id::text, project_id, provider, priority
                """
            ),
            {"batch": BATCH, "grace": RETRY_GRACE_SECONDS},
        ).all()
        enqueue_deliver(session, retries)
    return {"scheduled": len(scheduled), "retries": len(retries)}


@celery_app.task(name="tidings.sweep")
def sweep() -> dict[str, int]:
    """Re-dispatch rows whose task was lost, settle claims whose worker died, and forget
    webhook receipts too old to be replayed.

    A claim abandoned mid-call may or may not have reached the provider. Where the
    provider de-duplicates on our message id, sending again is safe and the message goes
    back to `ready`; elsewhere it becomes `unknown` rather than risk a second delivery.
    """
    config = current_settings()
    with session_scope(config.database_url) as session:
        stalled = session.execute(
            text(
                """
                UPDATE messages SET updated_at = now(), next_attempt_at = NULL
                WHERE id IN (SELECT id FROM messages
                             WHERE status IN ('accepted', 'ready')
                               AND COALESCE(next_attempt_at, updated_at)
                                   < now() - make_interval(secs => :stalled)
                             LIMIT :batch FOR UPDATE SKIP LOCKED)
                RETURNING id::text, project_id, status, provider, priority
                """
            ),
            {"batch": BATCH, "stalled": config.stalled_after},
        ).all()
        enqueue_prepare(session, [r for r in stalled if r.status == "accepted"])
        enqueue_deliver(session, [r for r in stalled if r.status == "ready"])
        abandoned = session.execute(
            text(
                """
                UPDATE messages
                SET status = CASE WHEN provider = ANY(:idempotent) THEN 'ready' ELSE 'unknown' END,
                    error = 'the worker stopped during the provider call',
                    updated_at = now()
                WHERE id IN (SELECT id FROM messages
                             WHERE status = 'sending'
                               AND claimed_at < now() - make_interval(secs => :timeout)
                             LIMIT :batch FOR UPDATE SKIP LOCKED)
                RETURNING id::text, project_id, status, provider, priority, attempts
                """
            ),
            {"batch": BATCH, "timeout": config.claim_timeout, "idempotent": idempotent_providers(config)},
        ).all()
        store.record_events(session, [abandoned_event(row) for row in abandoned])
        enqueue_deliver(session, [r for r in abandoned if r.status == "ready"])
        prune_receipts(session)
    counts = {
        "redispatched": len(stalled),
        "retried": sum(r.status == "ready" for r in abandoned),
        "unknown": sum(r.status == "unknown" for r in abandoned),
    }
    client = redis_for(config.redis_url)
    for outcome, count in counts.items():
        increment(client, "sweeper_recovered", count, outcome=outcome)
    if any(counts.values()):
        logger.warning("sweep: %s", counts)
    return counts


def prune_receipts(session: Session) -> int:
    """Forget the keys of provider events older than any retry of them could be."""
    return session.execute(
        text(
            """
            DELETE FROM inbound_receipts WHERE ctid IN (
                SELECT ctid FROM inbound_receipts
                WHERE received_at < now() - make_interval(days => :days) LIMIT :batch)
            """
        ),
        {"days": RECEIPT_DAYS, "batch": BATCH},
    ).rowcount


def idempotent_providers(config: Settings) -> list[str]:
    return [name for name in active_providers(config) if provider_instance(name).idempotent]


def abandoned_event(row: Row) -> store.NewEvent:
    kind = EventType.RETRYING if row.status == "ready" else EventType.UNKNOWN
    data = {"attempt": row.attempts, "reason": "the worker stopped during the provider call"}
    return store.NewEvent(row.id, row.project_id, kind, data)


def enqueue_prepare(session: Session, rows: Sequence[Row]) -> None:
    """Per priority and project: bulk work goes back to its project's turn (app/delivery/fairness.py)."""
    by_lane: dict[tuple[str, str], list[str]] = defaultdict(list)
    for row in rows:
        by_lane[(row.priority, row.project_id)].append(row.id)
    for (priority, project), ids in by_lane.items():
        for signature in dispatch.prepare(ids, priority, project=project):
            enqueue_after_commit(session, signature)


def enqueue_deliver(session: Session, rows: Sequence[Row]) -> None:
    for task in dispatch.deliver_by_lane((row.id, row.provider, row.priority, row.project_id) for row in rows):
        enqueue_after_commit(session, task)
