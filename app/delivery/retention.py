"""Retention: a finished message is deleted with its content and events after its project's
`retention_days` (default 30), counted from its creation.

Deletion runs in batches of a few thousand rows, each its own short transaction that
takes row locks only (SKIP LOCKED: a row somebody holds waits for the next run), so no
table is ever locked and the pipeline never waits behind it. Active messages (scheduled,
accepted, ready, sending, retrying) are never deleted, however old. The rollup trigger
sees the deletes, so the digest's counts shrink with the table.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

from app.enums import ACTIVE_STATUSES

DEFAULT_RETENTION_DAYS = 30
BATCH = 5000

_OLD_AND_FINISHED = f"""
    m.project_id = :project
    AND m.created_at < now() - make_interval(days => :days)
    AND m.status NOT IN ({", ".join(f"'{s.value}'" for s in ACTIVE_STATUSES)})
"""


@dataclass
class PurgeReport:
    """Messages deleted (or, on a dry run, that would be) per project, and whether time ran out."""

    deleted: dict[str, int] = field(default_factory=dict)
    finished: bool = True

    @property
    def total(self) -> int:
        return sum(self.deleted.values())


def purge(
    db: sessionmaker[Session],
    project: str | None = None,
    batch: int = BATCH,
    max_seconds: float = 600.0,
    dry_run: bool = False,
) -> PurgeReport:
    """Delete every project's (or one project's) messages past retention, until done or out of time."""
    deadline = time.monotonic() + max_seconds
    report = PurgeReport()
    for project_id, days in _retention_days(db, project):
        deleted = 0
        while True:
            if time.monotonic() > deadline:
                report.finished = False
                break
            with db.begin() as session:
                if dry_run:
                    deleted = _count(session, project_id, days)
                    break
                moved = _delete_batch(session, project_id, days, batch)
            deleted += moved
            if moved < batch:
                break
        report.deleted[project_id] = deleted
        if not report.finished:
            break
    return report


def _retention_days(db: sessionmaker[Session], project: str | None) -> list[tuple[str, int]]:
    with db() as session:
        rows = session.execute(
            text(
                """
                SELECT id, COALESCE((settings->>'retention_days')::int, :default) AS days FROM projects
                WHERE CAST(:project AS text) IS NULL OR id = :project ORDER BY id
                """
            ),
            {"project": project, "default": DEFAULT_RETENTION_DAYS},
        ).all()
    return [(row.id, row.days) for row in rows]


def _delete_batch(session: Session, project: str, days: int, batch: int) -> int:
    """Oldest first along (project_id, created_at); content and events go by ON DELETE CASCADE."""
    return session.execute(
        text(
            f"""
            DELETE FROM messages WHERE id IN (
                SELECT m.id FROM messages m WHERE {_OLD_AND_FINISHED}
                ORDER BY m.created_at LIMIT :batch FOR UPDATE SKIP LOCKED)
            """
        ),
        {"project": project, "days": days, "batch": batch},
    ).rowcount


def _count(session: Session, project: str, days: int) -> int:
    return session.execute(
        text(f"SELECT count(*) FROM messages m WHERE {_OLD_AND_FINISHED}"), {"project": project, "days": days}
    ).scalar_one()
