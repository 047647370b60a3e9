"""idempotency keys per key kind: a project's test key and its live key have a namespace each

The unique constraints on (project_id, idempotency_key) of messages and batches become
(project_id, test, idempotency_key), so one Idempotency-Key sent with the test key and with
the live key makes two requests: a test can neither replay a live send nor block one.

messages is the big table: its new index is built concurrently (sends go on meanwhile) and
then becomes the constraint, before the old one is dropped, so no key is ever unguarded.
Downgrading clears the key of a test message or batch whose key a live one also used: the
old constraint allows one of them per project.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-04 10:00:00.000000
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

MESSAGES = "uq_messages_project_test_idempotency_key"
BATCHES = "uq_batches_project_test_idempotency_key"


def upgrade() -> None:
    with op.get_context().autocommit_block():
        op.create_index(
            MESSAGES, "messages", ["project_id", "test", "idempotency_key"], unique=True, postgresql_concurrently=True
        )
    op.execute(f"ALTER TABLE messages ADD CONSTRAINT {MESSAGES} UNIQUE USING INDEX {MESSAGES}")
    op.drop_constraint("uq_messages_project_idempotency_key", "messages", type_="unique")
    op.create_unique_constraint(BATCHES, "batches", ["project_id", "test", "idempotency_key"])
    op.drop_constraint("uq_batches_project_idempotency_key", "batches", type_="unique")


def downgrade() -> None:
    for table, constraint in (("batches", BATCHES), ("messages", MESSAGES)):
        op.execute(
            f"""
            UPDATE {table} t SET idempotency_key = NULL
            WHERE t.test AND EXISTS (
                SELECT FROM {table} l
                WHERE l.project_id = t.project_id AND l.idempotency_key = t.idempotency_key AND NOT l.test
            )
            """
        )
        op.create_unique_constraint(f"uq_{table}_project_idempotency_key", table, ["project_id", "idempotency_key"])
        op.drop_constraint(constraint, table, type_="unique")
