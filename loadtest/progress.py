"""Where a benchmark's messages are: how many still have work ahead, and how each one ended.

A benchmark works in a project of its own, so the project's rows are its messages.
"""

from __future__ import annotations

from collections import Counter

from sqlalchemy import Connection, Engine, text

from app.enums import ACTIVE_STATUSES

ACTIVE = [status.value for status in ACTIVE_STATUSES]
PENDING = text("SELECT count(*) FROM messages WHERE project_id = :project AND status = ANY(:active)")
BY_STATUS = text("SELECT status, count(*) FROM messages WHERE project_id = :project GROUP BY status")


def pending(connection: Connection, project_id: str) -> int:
    """Messages of the project not yet terminal; the connection's transaction ends here, so a
    poller holds no snapshot back from vacuum."""
    count = connection.scalar(PENDING, {"project": project_id, "active": ACTIVE})
    connection.commit()
    return count


def statuses(engine: Engine, project_id: str) -> Counter:
    with engine.connect() as connection:
        return Counter(dict(connection.execute(BY_STATUS, {"project": project_id}).all()))


def lost(accepted: int, seen: Counter) -> int:
    """Accepted messages that are not terminal, or not there at all."""
    return accepted - sum(count for status, count in seen.items() if status not in ACTIVE)


def describe(seen: Counter) -> str:
    return ", ".join(f"{status} {count}" for status, count in seen.most_common()) or "none"
