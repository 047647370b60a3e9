"""Retention: a finished message is deleted with its content and events after its project's
`retention_days` (default 30), counted from its creation.

Deletion runs in batches of a few thousand rows, each its own short transaction that
takes row locks only (SKIP LOCKED: a row somebody holds waits for the next run), so no
table is ever locked and the pipeline never waits behind it. Active messages (scheduled,
accepted, ready, sending, retrying) are never deleted, however old. The rollup trigger
sees the deletes, so the digest's counts shrink with the table.

Files (`attachments`) are shared by the messages of one send, so they go once no message
names them any more: after a project's messages, its files past the same days that no
content row lists, found through the GIN index on `attachment_ids`. A file is as old as
its messages (written in their transaction), so one that a waiting message still names is
kept with it, and one left behind by any earlier run is found by the next.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

from app.changed_rows import changed_rows
from app.enums import ACTIVE_STATUSES

DEFAULT_RETENTION_DAYS = 30
BATCH = 5000

_OLD_AND_FINISHED = f"""
    m.project_id = :project
    AND m.created_at < now() - make_interval(days => :days)
    AND m.status NOT IN ({", ".join(f"'{s.value}'" for s in ACTIVE_STATUSES)})
"""

# Oldest first along (project_id, created_at); content and events go by ON DELETE CASCADE.
_DELETE_MESSAGES = f"""
    DELETE FROM messages WHERE id IN (
        SELECT m.id FROM messages m WHERE {_OLD_AND_FINISHED}
        ORDER BY m.created_at LIMIT :batch FOR UPDATE SKIP LOCKED)
"""

_DELETE_UNNAMED_FILES = """
    DELETE FROM attachments WHERE id IN (
        SELECT a.id FROM attachments a
        WHERE a.project_id = :project AND a.created_at < now() - make_interval(days => :days)
          AND NOT EXISTS (SELECT FROM message_contents c WHERE c.attachment_ids @> ARRAY[a.id])
        LIMIT :batch FOR UPDATE SKIP LOCKED)
"""


@dataclass
class PurgeReport:
    """Messages deleted (or, on a dry run, that would be) and files deleted, per project, and
    whether time ran out."""

    deleted: dict[str, int] = field(default_factory=dict)
    files: dict[str, int] = field(default_factory=dict)
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
        if dry_run:
            with db() as session:
                report.deleted[project_id] = _count(session, project_id, days)
            continue
        params = {"project": project_id, "days": days, "batch": batch}
        report.deleted[project_id], report.finished = _in_batches(db, _DELETE_MESSAGES, params, deadline)
        if report.finished:
            report.files[project_id], report.finished = _in_batches(db, _DELETE_UNNAMED_FILES, params, deadline)
        if not report.finished:
            break
    return report


def _in_batches(db: sessionmaker[Session], statement: str, params: dict[str, Any], deadline: float) -> tuple[int, bool]:
    """Run a DELETE of up to `batch` rows, each run its own transaction, until one deletes
    fewer or the deadline passes; the rows deleted, and whether it got to the end."""
    deleted = 0
    while time.monotonic() <= deadline:
        with db.begin() as session:
            moved = changed_rows(session, text(statement), params)
        deleted += moved
        if moved < params["batch"]:
            return deleted, True
    return deleted, False


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


def _count(session: Session, project: str, days: int) -> int:
    return session.execute(
        text(f"SELECT count(*) FROM messages m WHERE {_OLD_AND_FINISHED}"), {"project": project, "days": days}
    ).scalar_one()
