"""projects: the webhook channel's signing secret, per project, with a rotation's previous one

Projects created before this revision get no secret: their webhook-channel messages go on
being signed with the account's secret (the deployment's WEBHOOK_SIGNING_SECRET, or their
own account's) until they rotate, so no receiver stops verifying on upgrade. Nullable
columns without a default: adding them rewrites nothing.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-05 10:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("projects", sa.Column("webhook_signing_secret", sa.Text(), nullable=True))
    op.add_column("projects", sa.Column("webhook_signing_previous_secret", sa.Text(), nullable=True))
    op.add_column(
        "projects", sa.Column("webhook_signing_previous_expires_at", sa.DateTime(timezone=True), nullable=True)
    )


def downgrade() -> None:
    op.drop_column("projects", "webhook_signing_previous_expires_at")
    op.drop_column("projects", "webhook_signing_previous_secret")
    op.drop_column("projects", "webhook_signing_secret")
