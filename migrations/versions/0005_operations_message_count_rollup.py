"""operations: message count rollup, kept by a statement-level trigger

Revision ID: 0005
Revises: 0002
Create Date: 2026-12-02 16:30:20.518949

`messages` gets three statement-level triggers that append each statement's net change
per (hour created, project, channel, status) to `message_count_deltas`: one small INSERT
per statement, whatever its row count, and no row that two writers fight over. Beat
folds the deltas into `message_counts` (tasks/rollup.py); the digest reads both.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Hours are cut in UTC whatever the session's TimeZone, so every writer agrees on a bucket.
COUNT_CHANGES = """
CREATE FUNCTION tidings_count_message_changes() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        -- The rows of one INSERT share created_at (now(), the transaction's time): grouping
        -- on it first leaves date_trunc a few rows instead of every row (3 ms, not 8, per 10,000).
        INSERT INTO message_count_deltas (hour, project_id, channel, status, delta)
        SELECT date_trunc('hour', created_at, 'UTC'), project_id, channel, status, sum(n)
        FROM (SELECT created_at, project_id, channel, status, count(*) AS n
              FROM new_rows GROUP BY 1, 2, 3, 4) AS inserted
        GROUP BY 1, 2, 3, 4;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO message_count_deltas (hour, project_id, channel, status, delta)
        SELECT date_trunc('hour', created_at, 'UTC'), project_id, channel, status, -count(*)
        FROM old_rows GROUP BY 1, 2, 3, 4;
    ELSE
        INSERT INTO message_count_deltas (hour, project_id, channel, status, delta)
        SELECT hour, project_id, channel, status, sum(delta)
        FROM (SELECT date_trunc('hour', created_at, 'UTC') AS hour, project_id, channel, status, 1 AS delta
              FROM new_rows
              UNION ALL
              SELECT date_trunc('hour', created_at, 'UTC'), project_id, channel, status, -1
              FROM old_rows) AS changes
        GROUP BY 1, 2, 3, 4
        HAVING sum(delta) <> 0;
    END IF;
    RETURN NULL;
END
$$
"""

TRIGGERS = {
    "messages_count_insert": "AFTER INSERT ON messages REFERENCING NEW TABLE AS new_rows",
    "messages_count_update": "AFTER UPDATE ON messages REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows",
    "messages_count_delete": "AFTER DELETE ON messages REFERENCING OLD TABLE AS old_rows",
}


def upgrade() -> None:
    op.create_table(
        "message_count_deltas",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("hour", sa.DateTime(timezone=True), nullable=False),
        sa.Column("project_id", sa.String(length=64), nullable=False),
        sa.Column("channel", sa.String(length=16), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("delta", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "message_counts",
        sa.Column("hour", sa.DateTime(timezone=True), nullable=False),
        sa.Column("project_id", sa.String(length=64), nullable=False),
        sa.Column("channel", sa.String(length=16), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("count", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("hour", "project_id", "channel", "status"),
    )
    op.create_index("ix_message_counts_project_hour", "message_counts", ["project_id", "hour"], unique=False)
    op.create_index(
        "ix_message_counts_dead",
        "message_counts",
        ["project_id"],
        unique=False,
        postgresql_where=sa.text("status = 'dead'"),
    )
    op.execute(COUNT_CHANGES)
    # The first trigger locks out writers until this migration commits, so the backfill
    # below counts every committed row exactly once and the triggers count the rest.
    for name, when in TRIGGERS.items():
        op.execute(f"CREATE TRIGGER {name} {when} FOR EACH STATEMENT EXECUTE FUNCTION tidings_count_message_changes()")
    op.execute(
        """
        INSERT INTO message_counts (hour, project_id, channel, status, count)
        SELECT date_trunc('hour', created_at, 'UTC'), project_id, channel, status, count(*)
        FROM messages GROUP BY 1, 2, 3, 4
        """
    )


def downgrade() -> None:
    for name in TRIGGERS:
        op.execute(f"DROP TRIGGER {name} ON messages")
    op.execute("DROP FUNCTION tidings_count_message_changes()")
    op.drop_index("ix_message_counts_dead", table_name="message_counts", postgresql_where=sa.text("status = 'dead'"))
    op.drop_index("ix_message_counts_project_hour", table_name="message_counts")
    op.drop_table("message_counts")
    op.drop_table("message_count_deltas")
