"""sending basics: a message's own sender, templates' sender defaults, and which messages name a file

`message_contents.from_address` holds an API send's verified sender ("Name <address>"),
`templates.sender` a template's defaults for it and for Reply-To. The partial GIN index
lets retention find the files no message names any more; it covers only the messages
that have files, so the others cost it nothing. Nullable columns without a default:
adding them rewrites nothing.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-08 10:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("message_contents", sa.Column("from_address", sa.Text(), nullable=True))
    op.add_column("templates", sa.Column("sender", postgresql.JSONB(astext_type=sa.Text()), nullable=True))
    op.create_index(
        "ix_message_contents_attachment_ids",
        "message_contents",
        ["attachment_ids"],
        unique=False,
        postgresql_using="gin",
        postgresql_where=sa.text("attachment_ids IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index(
        "ix_message_contents_attachment_ids",
        table_name="message_contents",
        postgresql_using="gin",
        postgresql_where=sa.text("attachment_ids IS NOT NULL"),
    )
    op.drop_column("templates", "sender")
    op.drop_column("message_contents", "from_address")
