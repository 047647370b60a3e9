"""events, tracking, webhooks and the inbox: log indexes, endpoints and deliveries, inbox items

Revision ID: 0004
Revises: 0002
Create Date: 2026-12-02 16:35:13.583197
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "webhook_endpoints",
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("project_id", sa.String(length=64), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("description", sa.String(length=200), nullable=True),
        sa.Column(
            "event_types", postgresql.ARRAY(sa.String(length=16)), server_default=sa.text("'{}'"), nullable=False
        ),
        sa.Column("batch", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("secret", sa.Text(), nullable=False),
        sa.Column("previous_secret", sa.Text(), nullable=True),
        sa.Column("previous_secret_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("failing_since", sa.DateTime(timezone=True), nullable=True),
        sa.Column("disabled_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("disabled_reason", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.ForeignKeyConstraint(["project_id"], ["projects.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(op.f("ix_webhook_endpoints_project_id"), "webhook_endpoints", ["project_id"], unique=False)
    op.create_table(
        "inbox_items",
        sa.Column("message_id", sa.UUID(), nullable=False),
        sa.Column("project_id", sa.String(length=64), nullable=False),
        sa.Column("subscriber_id", sa.String(length=255), nullable=False),
        sa.Column(
            "status",
            sa.Enum("unread", "read", "archived", name="inboxstatus", native_enum=False, length=16),
            server_default=sa.text("'unread'"),
            nullable=False,
        ),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("read_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("archived_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["message_id"], ["messages.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("message_id"),
    )
    op.create_index(
        "ix_inbox_items_subscriber",
        "inbox_items",
        ["project_id", "subscriber_id", "status", "created_at", "message_id"],
        unique=False,
    )
    op.create_table(
        "message_engagements",
        sa.Column("message_id", sa.UUID(), nullable=False),
        sa.Column(
            "kind",
            sa.Enum(
                "accepted",
                "scheduled",
                "ready",
                "sending",
                "sent",
                "delivered",
                "bounced",
                "complained",
                "opened",
                "clicked",
                "failed",
                "retrying",
                "dead",
                "suppressed",
                "skipped",
                "cancelled",
                "requeued",
                "unknown",
                "unsubscribed",
                "webhook_disabled",
                name="eventtype",
                native_enum=False,
            ),
            nullable=False,
        ),
        sa.Column("link", sa.Text(), server_default=sa.text("''"), nullable=False),
        sa.Column("count", sa.Integer(), server_default=sa.text("1"), nullable=False),
        sa.Column("first_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("last_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.ForeignKeyConstraint(["message_id"], ["messages.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("message_id", "kind", "link"),
    )
    op.create_table(
        "webhook_deliveries",
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("endpoint_id", sa.UUID(), nullable=False),
        sa.Column("project_id", sa.String(length=64), nullable=False),
        sa.Column(
            "status",
            sa.Enum(
                "pending",
                "sending",
                "retrying",
                "succeeded",
                "failed",
                name="webhookdeliverystatus",
                native_enum=False,
                length=16,
            ),
            server_default=sa.text("'pending'"),
            nullable=False,
        ),
        sa.Column("events", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("attempts", sa.SmallInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=True),
        sa.Column("claimed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("delivered_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.ForeignKeyConstraint(["endpoint_id"], ["webhook_endpoints.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        "ix_webhook_deliveries_due",
        "webhook_deliveries",
        ["next_attempt_at"],
        unique=False,
        postgresql_where=sa.text("status IN ('pending', 'retrying')"),
    )
    op.create_index(
        "ix_webhook_deliveries_endpoint_created", "webhook_deliveries", ["endpoint_id", "created_at"], unique=False
    )
    op.create_index(
        "ix_webhook_deliveries_sending",
        "webhook_deliveries",
        ["claimed_at"],
        unique=False,
        postgresql_where=sa.text("status = 'sending'"),
    )
    op.create_table(
        "webhook_attempts",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("delivery_id", sa.UUID(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("status_code", sa.SmallInteger(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("response", sa.Text(), nullable=True),
        sa.Column("duration_ms", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["delivery_id"], ["webhook_deliveries.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_webhook_attempts_delivery_at", "webhook_attempts", ["delivery_id", "at"], unique=False)
    op.alter_column("events", "message_id", existing_type=sa.UUID(), nullable=True)
    op.create_index("ix_events_project_type_at", "events", ["project_id", "type", "at"], unique=False)
    op.add_column("message_contents", sa.Column("headers", postgresql.JSONB(astext_type=sa.Text()), nullable=True))
    op.create_index(
        "ix_messages_batch", "messages", ["batch_id"], unique=False, postgresql_where=sa.text("batch_id IS NOT NULL")
    )
    op.create_index(
        "ix_messages_project_sent",
        "messages",
        ["project_id", "sent_at"],
        unique=False,
        postgresql_where=sa.text("sent_at IS NOT NULL"),
    )
    op.add_column("templates", sa.Column("tracking", postgresql.JSONB(astext_type=sa.Text()), nullable=True))


def downgrade() -> None:
    op.drop_column("templates", "tracking")
    op.drop_index("ix_messages_project_sent", table_name="messages", postgresql_where=sa.text("sent_at IS NOT NULL"))
    op.drop_index("ix_messages_batch", table_name="messages", postgresql_where=sa.text("batch_id IS NOT NULL"))
    op.drop_column("message_contents", "headers")
    op.drop_index("ix_events_project_type_at", table_name="events")
    op.execute("DELETE FROM events WHERE message_id IS NULL")  # project-level events have nowhere to go
    op.alter_column("events", "message_id", existing_type=sa.UUID(), nullable=False)
    op.drop_index("ix_webhook_attempts_delivery_at", table_name="webhook_attempts")
    op.drop_table("webhook_attempts")
    op.drop_index(
        "ix_webhook_deliveries_sending", table_name="webhook_deliveries", postgresql_where=sa.text("status = 'sending'")
    )
    op.drop_index("ix_webhook_deliveries_endpoint_created", table_name="webhook_deliveries")
    op.drop_index(
        "ix_webhook_deliveries_due",
        table_name="webhook_deliveries",
        postgresql_where=sa.text("status IN ('pending', 'retrying')"),
    )
    op.drop_table("webhook_deliveries")
    op.drop_table("message_engagements")
    op.drop_index("ix_inbox_items_subscriber", table_name="inbox_items")
    op.drop_table("inbox_items")
    op.drop_index(op.f("ix_webhook_endpoints_project_id"), table_name="webhook_endpoints")
    op.drop_table("webhook_endpoints")
