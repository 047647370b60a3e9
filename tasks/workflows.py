"""Workflow tasks: carry runs through their steps, and write a topic trigger's runs.

Each step task locks the runs it names and moves them as far as they go now
(app/workflows/engine.py); what comes next (the messages' prepare tasks, a countdown to the
end of a short delay) is published after the commit. Beat releases runs parked for longer
waits and re-dispatches those that stopped moving (tasks/maintenance.py calls the two
functions below), so a lost or repeated task message changes nothing.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from sqlalchemy import Row, select, text
from sqlalchemy.orm import Session

from app.config import current_settings
from app.db import enqueue_after_commit, publish, session_scope
from app.delivery import dispatch
from app.delivery.broker import celery_app
from app.models import WorkflowTrigger
from app.workflows import engine, service
from tasks import isolation
from tasks.fanout import stop_fan_out

# Members' runs written per fan-out task: a few thousand rows, well under a second.
MEMBERS_PER_TASK = 5000
# Runs released or re-dispatched per beat pass, at most.
BATCH = 5000


@celery_app.task(name="tidings.workflow_step")
def workflow_step(run_ids: list[str], step: int) -> int:
    """Move the named runs on from `step`, through the door (tasks/isolation.py): a run the
    step cannot handle ends failed alone, with the reason; how many were there to move."""
    config = current_settings()
    moved = 0

    def advance(part: Sequence[str]) -> list[str]:
        """The runs of `part` it locked: one another task holds is that task's to count."""
        nonlocal moved
        with session_scope(config.database_url) as session:
            done = engine.advance(session, part, step)
            for signature in done.publish:
                enqueue_after_commit(session, signature)
        moved += done.runs
        return done.locked

    def one_per_task(part: Sequence[str]) -> None:
        for run_id in part:
            for signature in dispatch.workflow_steps([run_id], step):
                publish(signature)

    def fail(run_id: str, why: str) -> bool:
        with session_scope(config.database_url) as session:
            return engine.fail_run(session, run_id, f"step {step} {why}")

    with isolation.batch("workflow_step", run_ids, config=config, redispatch=one_per_task, fail_alone=fail) as run:
        run.in_halves(advance)
    return moved


@celery_app.task(name="tidings.workflow_fan_out")
def workflow_fan_out(trigger_id: str) -> int:
    """Write the runs of the next chunk of a topic trigger's members; how many it wrote.
    Through the door, as a topic send's (tasks/fanout.py)."""
    config = current_settings()
    written = 0

    def write(_: Sequence[str]) -> None:
        nonlocal written
        with session_scope(config.database_url) as session:
            trigger = session.scalar(
                select(WorkflowTrigger)
                .where(WorkflowTrigger.id == trigger_id, WorkflowTrigger.fanout_done_at.is_(None))
                .with_for_update()
            )
            if trigger is None:  # done already: this was a repeated message
                return
            ids = service.write_topic_runs(session, trigger, MEMBERS_PER_TASK)
            for signature in dispatch.workflow_steps(ids, 0):
                enqueue_after_commit(session, signature)
            if len(ids) == MEMBERS_PER_TASK:
                enqueue_after_commit(session, dispatch.workflow_fan_out(trigger_id))
        written = len(ids)

    stop = stop_fan_out(config, "workflow_triggers")
    with isolation.batch("workflow_fan_out", [trigger_id], config=config, fail_alone=stop) as run:
        run.in_halves(write)
    return written


def release_parked(session: Session) -> int:
    """Runs parked for a long wait whose time has come → their step's task."""
    rows = session.execute(
        text(
            """
            UPDATE workflow_runs SET parked = false, updated_at = now()
            WHERE id IN (SELECT id FROM workflow_runs WHERE status = 'running' AND parked AND due_at <= now()
                         ORDER BY due_at LIMIT :batch FOR UPDATE SKIP LOCKED)
            RETURNING id::text, project_id, step
            """
        ),
        {"batch": BATCH},
    ).all()
    _enqueue_steps(session, rows)
    return len(rows)


def redispatch_stalled(session: Session, seconds: float) -> int:
    """Runs that neither moved nor waited for `seconds` (their task was lost) → their step's task."""
    rows = session.execute(
        text(
            """
            UPDATE workflow_runs SET updated_at = now()
            WHERE id IN (SELECT id FROM workflow_runs
                         WHERE status = 'running' AND NOT parked
                           AND updated_at < now() - make_interval(secs => :stalled)
                           AND COALESCE(due_at, updated_at) < now() - make_interval(secs => :stalled)
                         LIMIT :batch FOR UPDATE SKIP LOCKED)
            RETURNING id::text, project_id, step
            """
        ),
        {"batch": BATCH, "stalled": seconds},
    ).all()
    _enqueue_steps(session, rows)
    return len(rows)


def _enqueue_steps(session: Session, rows: Sequence[Row]) -> None:
    """Step tasks per project and step: one project's poison never shares a task with
    another's runs, so it can neither roll them back nor hold them up."""
    groups: dict[tuple[str, int], list[str]] = defaultdict(list)
    for row in rows:
        groups[(row.project_id, row.step)].append(row.id)
    for (_, step), ids in groups.items():
        for signature in dispatch.workflow_steps(ids, step):
            enqueue_after_commit(session, signature)
