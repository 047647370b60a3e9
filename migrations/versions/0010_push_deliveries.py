"""push_deliveries: one row per device of a push message to a subscriber

Prepare writes a row per push token the subscriber has (at most 20); deliver sends to the
rows still pending or retrying and settles each with the provider's answer. A new table
only: nothing existing is rewritten, and push messages prepared before it (without rows)
go on being sent to their one address.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-12 10:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "push_deliveries",
        sa.Column("message_id", sa.UUID(), nullable=False),
        sa.Column("n", sa.SmallInteger(), nullable=False),
        sa.Column("token", sa.Text(), nullable=False),
        sa.Column("status", sa.String(length=16), server_default=sa.text("'pending'"), nullable=False),
        sa.Column("attempts", sa.SmallInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("provider_message_id", sa.Text(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("follow_up", sa.String(length=32), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.ForeignKeyConstraint(["message_id"], ["messages.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("message_id", "n"),
    )


def downgrade() -> None:
    op.drop_table("push_deliveries")
