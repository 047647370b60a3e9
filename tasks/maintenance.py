"""Beat work: release what has come due, and re-dispatch what stopped moving.

PostgreSQL is the truth and a broker message may be lost (a Redis restart, a publish that
failed after commit); these two tasks are what guarantees every committed row moves on.
Both lock with SKIP LOCKED, so two beat processes never release the same row twice.
"""

from __future__ import annotations

import logging
from collections import defaultdict

from sqlalchemy import text
from sqlalchemy.orm import Session

from app.db import enqueue_after_commit, session_scope
from app.enums import EventType
from tasks import dispatch, store
from tasks.celery_app import celery_app, settings

logger = logging.getLogger(__name__)

BATCH = 5000
# A row untouched this long in `accepted` or `ready` lost its task message.
STALLED_AFTER_SECONDS = 60
# A claim older than this belongs to a worker that died mid-call.
CLAIM_TIMEOUT_SECONDS = 600
# `retrying` rows are normally picked up by their countdown task; this grace keeps
# release_due from racing it and only catches parked or lost ones.
RETRY_GRACE_SECONDS = 10


@celery_app.task(name="tidings.release_due")
def release_due() -> None:
    """Scheduled messages whose time has come → prepare; parked retries → deliver."""
    with session_scope(settings().database_url) as session:
        scheduled = session.execute(
            text(
                """
                UPDATE messages SET status = 'accepted', updated_at = now()
                WHERE id IN (SELECT id FROM messages
                             WHERE status = 'scheduled' AND scheduled_at <= now()
                             ORDER BY scheduled_at LIMIT :batch FOR UPDATE SKIP LOCKED)
                RETURNING id::text, priority
                """
            ),
            {"batch": BATCH},
        ).all()
        _enqueue_prepare(session, scheduled)
        retries = session.execute(
            text(
                """
                UPDATE messages SET status = 'ready', next_attempt_at = NULL, updated_at = now()
                WHERE id IN (SELECT id FROM messages
                             WHERE status = 'retrying'
                               AND next_attempt_at <= now() - make_interval(secs => :grace)
                             ORDER BY next_attempt_at LIMIT :batch FOR UPDATE SKIP LOCKED)
                RETURNING id::text, provider, priority
                """
            ),
            {"batch": BATCH, "grace": RETRY_GRACE_SECONDS},
        ).all()
        _enqueue_deliver(session, retries)


@celery_app.task(name="tidings.sweep")
def sweep() -> dict[str, int]:
    """Re-dispatch stalled rows; mark abandoned claims `unknown` (the send may have happened)."""
    with session_scope(settings().database_url) as session:
        stalled = session.execute(
            text(
                """
                UPDATE messages SET updated_at = now()
                WHERE id IN (SELECT id FROM messages
                             WHERE status IN ('accepted', 'ready')
                               AND updated_at < now() - make_interval(secs => :stalled)
                             LIMIT :batch FOR UPDATE SKIP LOCKED)
                RETURNING id::text, status, provider, priority
                """
            ),
            {"batch": BATCH, "stalled": STALLED_AFTER_SECONDS},
        ).all()
        _enqueue_prepare(session, [r for r in stalled if r.status == "accepted"])
        _enqueue_deliver(session, [r for r in stalled if r.status == "ready"])
        abandoned = session.execute(
            text(
                """
                UPDATE messages SET status = 'unknown', updated_at = now(),
                       error = 'worker stopped during the provider call; the send may have happened'
                WHERE id IN (SELECT id FROM messages
                             WHERE status = 'sending'
                               AND claimed_at < now() - make_interval(secs => :timeout)
                             LIMIT :batch FOR UPDATE SKIP LOCKED)
                RETURNING id::text, project_id, attempts
                """
            ),
            {"batch": BATCH, "timeout": CLAIM_TIMEOUT_SECONDS},
        ).all()
        store.record_events(
            session,
            [
                store.NewEvent(r.id, r.project_id, EventType.UNKNOWN, {"attempt": r.attempts})
                for r in abandoned
            ],
        )
    counts = {"redispatched": len(stalled), "unknown": len(abandoned)}
    if stalled or abandoned:
        logger.warning("sweep: %s", counts)
    return counts


def _enqueue_prepare(session: Session, rows) -> None:
    by_priority: dict[str, list[str]] = defaultdict(list)
    for row in rows:
        by_priority[row.priority].append(row.id)
    for priority, ids in by_priority.items():
        for signature in dispatch.prepare(ids, priority):
            enqueue_after_commit(session, signature)


def _enqueue_deliver(session: Session, rows) -> None:
    by_lane: dict[tuple[str, str], list[str]] = defaultdict(list)
    for row in rows:
        by_lane[(row.provider, row.priority)].append(row.id)
    for (provider, priority), ids in by_lane.items():
        for signature in dispatch.deliver(provider, priority, ids):
            enqueue_after_commit(session, signature)
