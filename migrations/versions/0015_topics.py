"""topics: what subscribers follow, their members, and batches that fan a send out to a topic

Two new tables and five new, nullable columns of `batches` (no rewrite), with a partial index
that holds only the topic fan-outs not yet finished.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-05 09:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "topics",
        sa.Column("project_id", sa.String(64), sa.ForeignKey("projects.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("key", sa.String(128), primary_key=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("description", sa.Text()),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    )
    op.create_table(
        "topic_members",
        sa.Column("project_id", sa.String(64), primary_key=True),
        sa.Column("topic_key", sa.String(128), primary_key=True),
        sa.Column("subscriber_id", sa.String(255), primary_key=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.ForeignKeyConstraint(["project_id", "topic_key"], ["topics.project_id", "topics.key"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(
            ["project_id", "subscriber_id"],
            ["subscribers.project_id", "subscribers.external_id"],
            ondelete="CASCADE",
        ),
    )
    op.create_index("ix_topic_members_subscriber", "topic_members", ["project_id", "subscriber_id"])
    op.add_column("batches", sa.Column("topic", sa.String(128)))
    op.add_column("batches", sa.Column("fanout", JSONB()))
    op.add_column("batches", sa.Column("fanout_after", sa.String(255)))
    op.add_column("batches", sa.Column("fanout_at", sa.DateTime(timezone=True)))
    op.add_column("batches", sa.Column("fanout_done_at", sa.DateTime(timezone=True)))
    op.create_index(
        "ix_batches_fanout_pending",
        "batches",
        ["fanout_at"],
        postgresql_where=sa.text("topic IS NOT NULL AND fanout_done_at IS NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_batches_fanout_pending", table_name="batches")
    for column in ("fanout_done_at", "fanout_at", "fanout_after", "fanout", "topic"):
        op.drop_column("batches", column)
    op.drop_table("topic_members")
    op.drop_table("topics")
