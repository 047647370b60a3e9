"""idempotency index only where a key is: messages' unique (project_id, test, idempotency_key) becomes partial

Most sends carry no Idempotency-Key, yet the full unique constraint gave each of their rows an
index entry, and a new one for every row version the pipeline writes (accepted, ready, sending,
sent: a status change is never a HOT update, as status is indexed). A unique index `WHERE
idempotency_key IS NOT NULL` guards exactly the same keys (NULLs never conflicted) and costs
nothing for the rest. It is built concurrently, so sends go on meanwhile, before the old
constraint goes: no key is ever unguarded. Intake names the index by its columns and predicate
(`ON CONFLICT (…) WHERE idempotency_key IS NOT NULL`): a constraint cannot be partial.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-04 19:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

CONSTRAINT = "uq_messages_project_test_idempotency_key"
INDEX = "uq_messages_idempotency_key"
COLUMNS = ["project_id", "test", "idempotency_key"]


def upgrade() -> None:
    with op.get_context().autocommit_block():
        op.create_index(
            INDEX,
            "messages",
            COLUMNS,
            unique=True,
            postgresql_where=sa.text("idempotency_key IS NOT NULL"),
            postgresql_concurrently=True,
        )
    op.drop_constraint(CONSTRAINT, "messages", type_="unique")


def downgrade() -> None:
    with op.get_context().autocommit_block():
        op.create_index(CONSTRAINT, "messages", COLUMNS, unique=True, postgresql_concurrently=True)
    op.execute(f"ALTER TABLE messages ADD CONSTRAINT {CONSTRAINT} UNIQUE USING INDEX {CONSTRAINT}")
    op.drop_index(INDEX, "messages")
