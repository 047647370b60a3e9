"""failover, projects' own provider accounts, inbound status webhooks

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-02 16:34:09.516866
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "inbound_receipts",
        sa.Column("source", sa.String(length=100), nullable=False),
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.PrimaryKeyConstraint("source", "key"),
    )
    op.create_index(op.f("ix_inbound_receipts_received_at"), "inbound_receipts", ["received_at"], unique=False)
    op.create_table(
        "project_providers",
        sa.Column("project_id", sa.String(length=64), nullable=False),
        sa.Column("provider", sa.String(length=32), nullable=False),
        sa.Column("sealed", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.ForeignKeyConstraint(["project_id"], ["projects.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("project_id", "provider"),
    )
    # messages is the big table: build the index without blocking sends.
    with op.get_context().autocommit_block():
        op.create_index(
            "ix_messages_provider_message_id",
            "messages",
            ["provider", "provider_message_id"],
            unique=False,
            postgresql_where=sa.text("provider_message_id IS NOT NULL"),
            postgresql_concurrently=True,
        )


def downgrade() -> None:
    op.drop_index(
        "ix_messages_provider_message_id",
        table_name="messages",
        postgresql_where=sa.text("provider_message_id IS NOT NULL"),
    )
    op.drop_table("project_providers")
    op.drop_index(op.f("ix_inbound_receipts_received_at"), table_name="inbound_receipts")
    op.drop_table("inbound_receipts")
