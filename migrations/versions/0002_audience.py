"""audience: templates, suppressions, and what messages need to use them

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02 15:58:52.843986
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "suppressions",
        sa.Column("project_id", sa.String(length=64), nullable=False),
        sa.Column(
            "channel",
            sa.Enum("email", "sms", "push", "webhook", "in_app", name="channel", native_enum=False, length=16),
            nullable=False,
        ),
        sa.Column("address", sa.Text(), nullable=False),
        sa.Column(
            "reason",
            sa.Enum(
                "bounce",
                "complaint",
                "unsubscribe",
                "manual",
                name="suppressionreason",
                native_enum=False,
                length=16,
            ),
            nullable=False,
        ),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.ForeignKeyConstraint(["project_id"], ["projects.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("project_id", "channel", "address"),
    )
    op.create_table(
        "templates",
        sa.Column("project_id", sa.String(length=64), nullable=False),
        sa.Column("key", sa.String(length=128), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column(
            "channel",
            sa.Enum("email", "sms", "push", "webhook", "in_app", name="channel", native_enum=False, length=16),
            nullable=False,
        ),
        sa.Column("default_locale", sa.String(length=35), nullable=False),
        sa.Column("variants", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.ForeignKeyConstraint(["project_id"], ["projects.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("project_id", "key", "version"),
    )
    op.add_column("message_contents", sa.Column("locale", sa.String(length=35), nullable=True))
    op.add_column("message_contents", sa.Column("payload", postgresql.JSONB(astext_type=sa.Text()), nullable=True))
    op.add_column(
        "messages",
        sa.Column("bypass_quiet_hours", sa.Boolean(), server_default=sa.text("false"), nullable=False),
    )
    op.create_index(
        "ix_messages_project_subscriber",
        "messages",
        ["project_id", "subscriber_id"],
        unique=False,
        postgresql_where=sa.text("subscriber_id IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index(
        "ix_messages_project_subscriber",
        table_name="messages",
        postgresql_where=sa.text("subscriber_id IS NOT NULL"),
    )
    op.drop_column("messages", "bypass_quiet_hours")
    op.drop_column("message_contents", "payload")
    op.drop_column("message_contents", "locale")
    op.drop_table("templates")
    op.drop_table("suppressions")
