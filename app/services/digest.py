"""The admin digest: what the whole system is doing, in one answer.

Counts come from the rollup (`message_counts` plus the deltas not folded yet), so the
answer costs the number of (period, project, channel, status) cells in the window, not
the number of messages. Cells are hours for the last two days and days before that
(app/observability/rollup.py), so `since` is cut to the hour, or to the day when it is older; the
answer says which. The backlog is read from the partial index of active messages and
from the broker; throughput and daily quota use from Redis.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import redis
from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

from app.config import Settings
from app.delivery.backlog import pending_lanes, queue_depths
from app.delivery.queues import all_queues
from app.observability import throughput
from app.observability.quota_usage import current_usage
from app.observability.rollup import HOURLY_DAYS
from app.services import operations, projects

DEFAULT_WINDOW = timedelta(hours=24)
THROUGHPUT_WINDOWS = ("last_minute", "last_hour")


def hour_floor(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def window_start(since: datetime, now: datetime) -> datetime:
    """The cell boundary at or before `since`: an hour within the hourly cells' reach, else a day.

    Every cell (and delta) starts on such a boundary and lies wholly after it or wholly
    before, so the counts are exact for messages created from the returned time.
    """
    start = hour_floor(since)
    hourly_from = hour_floor(now).replace(hour=0) - timedelta(days=HOURLY_DAYS)
    return start if start >= hourly_from else start.replace(hour=0)


def digest(
    db: sessionmaker[Session],
    settings: Settings,
    client: redis.Redis,
    since: datetime | None = None,
    project: str | None = None,
) -> dict[str, Any]:
    """Counts by project, channel and status of messages created since `since` (default: 24 h)."""
    now = datetime.now(UTC)
    start = window_start(since or now - DEFAULT_WINDOW, now)
    if project is not None:
        projects.get_project(db, project)
    with db() as session:
        counts = status_counts(session, start, project)
        dead = status_counts(session, None, project, status="dead")
        lanes = pending_lanes(session, project)
    return {
        "generated_at": now,
        "since": start,
        "project": project,
        "counts": counts,
        "totals": _sum_by(counts, "status"),
        "throughput": dict(zip(THROUGHPUT_WINDOWS, throughput.sent_within(client, (60, 3600), project), strict=True)),
        "queues": [
            {"name": name, "depth": depth}
            for name, depth in queue_depths(settings.broker_url, all_queues(settings)).items()
        ],
        "lanes": [vars(lane) for lane in lanes],
        "providers": operations.provider_states(settings, client),
        "dead_letters": {
            "total": sum(row["count"] for row in dead),
            "by_project": [{"project": name, "count": n} for name, n in sorted(_sum_by(dead, "project").items())],
        },
        "quotas": current_usage(client, project),
    }


def status_counts(
    session: Session, start: datetime | None, project: str | None, status: str | None = None
) -> list[dict[str, Any]]:
    """Folded counts plus pending deltas, for messages created from `start` (None: ever)."""
    conditions = ["TRUE"]
    if start is not None:
        conditions.append("hour >= :start")
    if project is not None:
        conditions.append("project_id = :project")
    if status is not None:
        conditions.append("status = :status")
    where = " AND ".join(conditions)
    rows = session.execute(
        text(
            f"""
            SELECT project_id, channel, status, sum(n)::bigint AS count
            FROM (SELECT project_id, channel, status, count AS n FROM message_counts WHERE {where}
                  UNION ALL
                  SELECT project_id, channel, status, delta FROM message_count_deltas WHERE {where}) AS cells
            GROUP BY project_id, channel, status
            HAVING sum(n) <> 0
            ORDER BY project_id, channel, status
            """
        ),
        {"start": start, "project": project, "status": status},
    ).all()
    return [{"project": r.project_id, "channel": r.channel, "status": r.status, "count": r.count} for r in rows]


def _sum_by(counts: list[dict[str, Any]], key: str) -> dict[str, int]:
    sums: dict[str, int] = {}
    for row in counts:
        sums[row[key]] = sums.get(row[key], 0) + row["count"]
    return sums
