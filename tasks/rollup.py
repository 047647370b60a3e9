"""Fold the trigger's deltas into `message_counts`, the digest's per-hour status counts.

The trigger on `messages` only appends (migration 0005), so writers never wait on one
another; this task is the one place that updates counter rows. SKIP LOCKED lets two
beats fold at once without counting a delta twice, and the upsert takes its rows in key
order, so two folds never deadlock.
"""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.orm import Session

from app.db import session_scope
from tasks.celery_app import celery_app, settings

BATCH = 10_000
MAX_BATCHES = 20


def fold(session: Session, batch: int = BATCH) -> int:
    """Fold up to `batch` deltas; the number folded. Counters that reach zero are removed."""
    folded = session.execute(
        text(
            """
            WITH moved AS (
                DELETE FROM message_count_deltas
                WHERE id IN (SELECT id FROM message_count_deltas ORDER BY id LIMIT :batch FOR UPDATE SKIP LOCKED)
                RETURNING hour, project_id, channel, status, delta
            ), summed AS (
                SELECT hour, project_id, channel, status, sum(delta) AS delta, count(*) AS moved
                FROM moved GROUP BY hour, project_id, channel, status
            ), upserted AS (
                INSERT INTO message_counts AS c (hour, project_id, channel, status, count)
                SELECT hour, project_id, channel, status, delta FROM summed
                ORDER BY hour, project_id, channel, status
                ON CONFLICT (hour, project_id, channel, status) DO UPDATE SET count = c.count + excluded.count
                RETURNING hour, project_id, channel, status, count
            )
            SELECT (SELECT coalesce(sum(moved), 0) FROM summed) AS moved,
                   array_agg(hour) FILTER (WHERE count = 0) AS hours,
                   array_agg(project_id) FILTER (WHERE count = 0) AS projects,
                   array_agg(channel) FILTER (WHERE count = 0) AS channels,
                   array_agg(status) FILTER (WHERE count = 0) AS statuses
            FROM upserted
            """
        ),
        {"batch": batch},
    ).one()
    if folded.hours:
        session.execute(
            text(
                """
                DELETE FROM message_counts c
                USING unnest(CAST(:hours AS timestamptz[]), CAST(:projects AS text[]),
                             CAST(:channels AS text[]), CAST(:statuses AS text[]))
                      AS z(hour, project_id, channel, status)
                WHERE (c.hour, c.project_id, c.channel, c.status) = (z.hour, z.project_id, z.channel, z.status)
                  AND c.count = 0
                """
            ),
            {
                "hours": folded.hours,
                "projects": folded.projects,
                "channels": folded.channels,
                "statuses": folded.statuses,
            },
        )
    return int(folded.moved)


@celery_app.task(name="tidings.fold_counts")
def fold_counts() -> int:
    """Fold what the trigger appended since the last run, a transaction per batch."""
    total = 0
    for _ in range(MAX_BATCHES):
        with session_scope(settings().database_url) as session:
            moved = fold(session)
        total += moved
        if moved < BATCH:
            break
    return total
