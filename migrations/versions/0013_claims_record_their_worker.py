"""claims record their worker: messages.claimed_by and messages.claim_id

A claim says which worker process holds it (`claimed_by`), so the sweeper can act on it
within seconds of that worker's heartbeat stopping instead of after the claim timeout, and
which run of that worker took it (`claim_id`), so an abandoned claim of a provider that
de-duplicates a repeated call is sent again as exactly that call. Two nullable columns, no
index: nothing existing is rewritten. See tasks/heartbeat.py and tasks/resend.py.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-04 15:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("messages", sa.Column("claimed_by", sa.Text(), nullable=True))
    op.add_column("messages", sa.Column("claim_id", sa.Uuid(), nullable=True))


def downgrade() -> None:
    op.drop_column("messages", "claim_id")
    op.drop_column("messages", "claimed_by")
