"""Fold the trigger's deltas into `message_counts`, the digest's status counts per period.

The trigger on `messages` only appends (migration 0005), so writers never wait on one
another; beat's `fold_counts` (tasks/rollup.py) is the one place that updates counter
rows. SKIP LOCKED lets two beats fold at once without counting a delta twice, and the
upserts take their rows in key order, so two folds never deadlock.

Cells are hours for the last two days and whole days before that: compaction merges an
old day's hours into one cell keyed by its midnight, so a 30-day window reads about
30 + 48 cells per project, channel and status instead of 720, whatever the traffic.
"""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.orm import Session

BATCH = 10_000
MAX_BATCHES = 20


# Hours before midnight this many days ago are merged into day cells.
HOURLY_DAYS = 2

_MERGE = """
    WITH moved AS ({source}), summed AS (
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


def _merge(session: Session, source: str, params: dict[str, object]) -> int:
    """Add the (hour, project, channel, status, delta) rows `source` removes to their cells;
    cells that reach zero are removed. The number of rows merged."""
    merged = session.execute(text(_MERGE.format(source=source)), params).one()
    if merged.hours:
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
                "hours": merged.hours,
                "projects": merged.projects,
                "channels": merged.channels,
                "statuses": merged.statuses,
            },
        )
    return int(merged.moved)


def fold(session: Session, batch: int = BATCH) -> int:
    """Fold up to `batch` deltas into their cells; the number folded."""
    source = """
        DELETE FROM message_count_deltas
        WHERE id IN (SELECT id FROM message_count_deltas ORDER BY id LIMIT :batch FOR UPDATE SKIP LOCKED)
        RETURNING hour, project_id, channel, status, delta
    """
    return _merge(session, source, {"batch": batch})


def compact(session: Session) -> int:
    """Merge the hour cells of days before the hourly horizon into their day's midnight cell."""
    source = """
        DELETE FROM message_counts
        WHERE hour < date_trunc('day', now() - make_interval(days => :days), 'UTC')
          AND hour <> date_trunc('day', hour, 'UTC')
        RETURNING date_trunc('day', hour, 'UTC') AS hour, project_id, channel, status, count AS delta
    """
    return _merge(session, source, {"days": HOURLY_DAYS})
