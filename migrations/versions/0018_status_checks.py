"""Every status column takes only its vocabulary: a CHECK constraint per column

Statuses were plain varchars: a misspelt status written in SQL ('sendng') was stored, and
every query for the real one missed that row for ever. Each constraint lists the values of
the column's enum in app/enums.py as they are at this revision (a migration is a snapshot;
tests/test_migrations.py fails when an enum and its constraint differ, so a new status comes
with the migration that admits it). NOT VALID, then VALIDATE: the check of existing rows
takes no lock that stops writes.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-07 19:40:00.000000
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

MESSAGE = (
    "scheduled", "accepted", "ready", "sending", "retrying", "sent", "delivered", "bounced",
    "complained", "failed", "dead", "suppressed", "skipped", "cancelled", "unknown",
)  # fmt: skip
VOCABULARIES: dict[tuple[str, str], tuple[str, ...]] = {
    ("messages", "status"): MESSAGE,
    ("message_counts", "status"): MESSAGE,
    ("message_count_deltas", "status"): MESSAGE,
    ("push_deliveries", "status"): ("pending", "retrying", "sent", "failed", "dead", "suppressed"),
    ("inbox_items", "status"): ("unread", "read", "archived"),
    ("webhook_deliveries", "status"): ("pending", "sending", "retrying", "succeeded", "failed"),
    ("workflow_runs", "status"): ("running", "completed", "cancelled", "failed", "throttled", "digested"),
}


def upgrade() -> None:
    for (table, column), values in VOCABULARIES.items():
        allowed = ", ".join(f"'{value}'" for value in values)
        op.execute(f"ALTER TABLE {table} ADD CONSTRAINT ck_{table}_{column} CHECK ({column} IN ({allowed})) NOT VALID")
        op.execute(f"ALTER TABLE {table} VALIDATE CONSTRAINT ck_{table}_{column}")


def downgrade() -> None:
    for table, column in VOCABULARIES:
        op.execute(f"ALTER TABLE {table} DROP CONSTRAINT ck_{table}_{column}")
