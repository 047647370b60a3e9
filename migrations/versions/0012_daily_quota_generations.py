"""quota_generations: which daily quota decision of PostgreSQL's each project channel counts from

A new, empty table, the sequence its generations come from, and quota_hold_shared(): an
accept's shared quota lock and the generation read after it, in one round trip (a plain
statement would read with a snapshot taken before it waited for the lock; a VOLATILE
function's queries each take their own). Nothing existing is rewritten. See app/access/quota.py.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-12 10:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute("CREATE SEQUENCE quota_generation")
    op.create_table(
        "quota_generations",
        sa.Column("project_id", sa.String(64), sa.ForeignKey("projects.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("channel", sa.String(16), primary_key=True),
        sa.Column("generation", sa.BigInteger(), nullable=False),
    )
    op.execute(
        """
        CREATE FUNCTION quota_hold_shared(lock_class integer, lock_name text, project text, channel_name text)
        RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
        BEGIN
            PERFORM pg_advisory_xact_lock_shared(lock_class, hashtext(lock_name));
            RETURN coalesce(
                (SELECT generation FROM quota_generations WHERE project_id = project AND channel = channel_name), 0
            );
        END
        $$
        """
    )


def downgrade() -> None:
    op.execute("DROP FUNCTION quota_hold_shared(integer, text, text, text)")
    op.drop_table("quota_generations")
    op.execute("DROP SEQUENCE quota_generation")
