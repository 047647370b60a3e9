"""workflow_runs: the per-subscriber index leads with the subscriber, so deleting one is a lookup

The foreign key to subscribers is (project_id, subscriber_id), but the index led with
(project_id, workflow_key): each subscriber deleted (an erasure, or each of a deleted
project's) scanned every run of its project, which made deleting a project with 100,000
runs quadratic (minutes, seen in `make workflows`). The same columns in another order serve
the throttle's count (project, subscriber, workflow) as before; no second index to write.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-06 04:20:00.000000
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.drop_index("ix_workflow_runs_subscriber", table_name="workflow_runs")
    op.create_index(
        "ix_workflow_runs_subscriber", "workflow_runs", ["project_id", "subscriber_id", "workflow_key", "created_at"]
    )


def downgrade() -> None:
    op.drop_index("ix_workflow_runs_subscriber", table_name="workflow_runs")
    op.create_index(
        "ix_workflow_runs_subscriber", "workflow_runs", ["project_id", "workflow_key", "subscriber_id", "created_at"]
    )
