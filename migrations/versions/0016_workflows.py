"""workflows: versioned definitions, triggers, runs and their steps, and open digests

Five new tables. `events.type`, `message_engagements.kind` (typed as an event type) and
`webhook_endpoints.event_types` grow from 16 to 32 characters for the `workflow.*` event
types: widening a varchar rewrites nothing.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-05 12:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import ARRAY, JSONB

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

WIDENED = [("events", "type"), ("message_engagements", "kind")]
WORKFLOW_VERSION = ["workflows.project_id", "workflows.key", "workflows.version"]


def _now(name: str) -> sa.Column:
    return sa.Column(name, sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False)


def upgrade() -> None:
    op.create_table(
        "workflows",
        sa.Column("project_id", sa.String(64), sa.ForeignKey("projects.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("key", sa.String(128), primary_key=True),
        sa.Column("version", sa.Integer(), primary_key=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("definition", JSONB(), nullable=False),
        sa.Column("compiled", JSONB(), nullable=False),
        _now("created_at"),
    )
    op.create_table(
        "workflow_triggers",
        sa.Column("id", sa.UUID(), primary_key=True),
        sa.Column("project_id", sa.String(64), nullable=False),
        sa.Column("workflow_key", sa.String(128), nullable=False),
        sa.Column("workflow_version", sa.Integer(), nullable=False),
        sa.Column("test", sa.Boolean(), nullable=False),
        sa.Column("trigger_key", sa.String(255)),
        sa.Column("data", JSONB(), nullable=False),
        sa.Column("idempotency_key", sa.String(255)),
        sa.Column("request_hash", sa.String(64)),
        sa.Column("response", JSONB()),
        sa.Column("topic", sa.String(128)),
        sa.Column("fanout_after", sa.String(255)),
        sa.Column("fanout_at", sa.DateTime(timezone=True)),
        sa.Column("fanout_done_at", sa.DateTime(timezone=True)),
        _now("created_at"),
        sa.UniqueConstraint("project_id", "test", "idempotency_key", name="uq_workflow_triggers_idempotency_key"),
        sa.ForeignKeyConstraint(
            ["project_id", "workflow_key", "workflow_version"], WORKFLOW_VERSION, ondelete="CASCADE"
        ),
    )
    op.create_index(
        "ix_workflow_triggers_fanout_pending",
        "workflow_triggers",
        ["fanout_at"],
        postgresql_where=sa.text("topic IS NOT NULL AND fanout_done_at IS NULL"),
    )
    op.create_table(
        "workflow_runs",
        sa.Column("id", sa.UUID(), primary_key=True),
        sa.Column("project_id", sa.String(64), nullable=False),
        sa.Column("workflow_key", sa.String(128), nullable=False),
        sa.Column("workflow_version", sa.Integer(), nullable=False),
        sa.Column("trigger_id", sa.UUID(), sa.ForeignKey("workflow_triggers.id", ondelete="CASCADE"), nullable=False),
        sa.Column("trigger_key", sa.String(255)),
        sa.Column("subscriber_id", sa.String(255), nullable=False),
        sa.Column("test", sa.Boolean(), nullable=False),
        sa.Column("data", JSONB()),
        sa.Column("status", sa.String(16), server_default=sa.text("'running'"), nullable=False),
        sa.Column("step", sa.SmallInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("due_at", sa.DateTime(timezone=True)),
        sa.Column("parked", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("digest_id", sa.UUID()),
        sa.Column("reason", sa.Text()),
        _now("created_at"),
        _now("updated_at"),
        sa.Column("ended_at", sa.DateTime(timezone=True)),
        sa.ForeignKeyConstraint(
            ["project_id", "workflow_key", "workflow_version"], WORKFLOW_VERSION, ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["project_id", "subscriber_id"],
            ["subscribers.project_id", "subscribers.external_id"],
            ondelete="CASCADE",
        ),
    )
    op.create_index("ix_workflow_runs_trigger_key", "workflow_runs", ["project_id", "workflow_key", "trigger_key"])
    op.create_index(
        "ix_workflow_runs_subscriber", "workflow_runs", ["project_id", "workflow_key", "subscriber_id", "created_at"]
    )
    op.create_index("ix_workflow_runs_trigger", "workflow_runs", ["trigger_id"])
    op.create_index(
        "ix_workflow_runs_parked",
        "workflow_runs",
        ["due_at"],
        postgresql_where=sa.text("status = 'running' AND parked"),
    )
    op.create_index(
        "ix_workflow_runs_moving",
        "workflow_runs",
        ["updated_at"],
        postgresql_where=sa.text("status = 'running' AND NOT parked"),
    )
    op.create_index(
        "ix_workflow_runs_digest", "workflow_runs", ["digest_id"], postgresql_where=sa.text("digest_id IS NOT NULL")
    )
    op.create_table(
        "workflow_run_steps",
        sa.Column("run_id", sa.UUID(), sa.ForeignKey("workflow_runs.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("step", sa.SmallInteger(), primary_key=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("outcome", sa.String(32), nullable=False),
        sa.Column("message_id", sa.UUID()),
        sa.Column("detail", JSONB()),
        _now("at"),
    )
    op.create_table(
        "workflow_digests",
        sa.Column("id", sa.UUID(), primary_key=True),
        sa.Column("project_id", sa.String(64), nullable=False),
        sa.Column("workflow_key", sa.String(128), nullable=False),
        sa.Column("step", sa.SmallInteger(), nullable=False),
        sa.Column("subscriber_id", sa.String(255), nullable=False),
        sa.Column("digest_key", sa.String(255), nullable=False),
        sa.Column("leader_id", sa.UUID(), nullable=False),
        sa.Column("closes_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("latest_close_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("flushed_at", sa.DateTime(timezone=True)),
        _now("created_at"),
    )
    op.create_index(
        "uq_workflow_digests_open",
        "workflow_digests",
        ["project_id", "workflow_key", "step", "subscriber_id", "digest_key"],
        unique=True,
        postgresql_where=sa.text("flushed_at IS NULL"),
    )
    for table, column in WIDENED:
        op.alter_column(table, column, type_=sa.String(32), existing_type=sa.String(16), existing_nullable=False)
    op.alter_column(
        "webhook_endpoints",
        "event_types",
        type_=ARRAY(sa.String(32)),
        existing_type=ARRAY(sa.String(16)),
        existing_nullable=False,
    )


def downgrade() -> None:
    op.execute("DELETE FROM events WHERE type LIKE 'workflow.%'")
    op.execute(
        "UPDATE webhook_endpoints SET event_types = array_remove(array_remove(array_remove(event_types,"
        " 'workflow.step'), 'workflow.completed'), 'workflow.cancelled')"
    )
    op.alter_column(
        "webhook_endpoints",
        "event_types",
        type_=ARRAY(sa.String(16)),
        existing_type=ARRAY(sa.String(32)),
        existing_nullable=False,
    )
    for table, column in WIDENED:
        op.alter_column(table, column, type_=sa.String(16), existing_type=sa.String(32), existing_nullable=False)
    op.drop_table("workflow_digests")
    op.drop_table("workflow_run_steps")
    op.drop_table("workflow_runs")
    op.drop_table("workflow_triggers")
    op.drop_table("workflows")
