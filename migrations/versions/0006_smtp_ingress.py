"""smtp ingress: email extras (Reply-To, Cc; kept headers use 0004's column) and attachments stored once

Nullable columns only, so adding them rewrites nothing; `attachments` holds each file once
for all the messages (one per recipient) that name it.

Revision ID: 0006
Revises: 0002
Create Date: 2026-12-02 16:34:14.169540
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0006"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "attachments",
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("project_id", sa.String(length=64), nullable=False),
        sa.Column("filename", sa.Text(), nullable=False),
        sa.Column("content_type", sa.String(length=255), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.ForeignKeyConstraint(["project_id"], ["projects.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(op.f("ix_attachments_project_id"), "attachments", ["project_id"], unique=False)
    op.add_column("message_contents", sa.Column("reply_to", sa.Text(), nullable=True))
    op.add_column("message_contents", sa.Column("cc", sa.Text(), nullable=True))
    op.add_column("message_contents", sa.Column("attachment_ids", postgresql.ARRAY(sa.UUID()), nullable=True))


def downgrade() -> None:
    op.drop_column("message_contents", "attachment_ids")
    op.drop_column("message_contents", "cc")
    op.drop_column("message_contents", "reply_to")
    op.drop_index(op.f("ix_attachments_project_id"), table_name="attachments")
    op.drop_table("attachments")
