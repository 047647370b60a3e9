"""Workflows through the API: save a version, trigger runs, cancel them, show one.

A trigger writes one run per recipient in one statement, or, for a topic, leaves the runs
to tasks/workflows.py a chunk of members at a time; either way the runs start moving only
after the commit (app/workflows/engine.py). Its Idempotency-Key guards every run it
starts, as a batch's guards its messages.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Row, func, select, text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session, sessionmaker

from app.access.auth import Caller
from app.db import enqueue_after_commit
from app.delivery import dispatch, store
from app.enums import EventType, RunStatus
from app.errors import abort, uuid_or_404
from app.models import Workflow, WorkflowTrigger
from app.services import intake, topics
from app.services.messages import Accepted, request_fingerprint
from app.workflows import definition, engine

INVALID = "Invalid request."
UNKNOWN_SHOWN = topics.UNKNOWN_SHOWN


def put(db: sessionmaker[Session], project_id: str, key: str, body: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """Save the workflow: a new version when its name or steps changed, else the latest as it
    is. Whether version 1 was just created comes with it."""
    try:
        compiled = definition.compile_steps(body["steps"])
    except definition.Invalid as invalid:
        abort(422, INVALID, errors={"json": {"steps": invalid.errors}})
    with db.begin() as session:
        _check_templates(session, project_id, compiled)
        # One writer per workflow at a time, so two saves never both take the next version.
        session.execute(text("SELECT pg_advisory_xact_lock(hashtextextended(:k, 1))"), {"k": f"{project_id}/{key}"})
        latest = _latest(session, project_id, key)
        if latest is not None and latest.name == body["name"] and latest.definition == {"steps": body["steps"]}:
            return present(latest), False
        row = Workflow(
            project_id=project_id,
            key=key,
            version=latest.version + 1 if latest else 1,
            name=body["name"],
            definition={"steps": body["steps"]},
            compiled={"steps": compiled},
        )
        session.add(row)
        session.flush()
        session.refresh(row)
        return present(row), latest is None


def _check_templates(session: Session, project_id: str, compiled: list[dict[str, Any]]) -> None:
    """422 unless every send step's template exists, for its channel."""
    used = definition.templates_used(compiled)
    found: dict[str, str] = dict(
        session.execute(
            text(
                """
                SELECT DISTINCT ON (key) key, channel FROM templates
                WHERE project_id = :project AND key = ANY(CAST(:keys AS text[])) ORDER BY key, version DESC
                """
            ),
            {"project": project_id, "keys": sorted({key for key, _ in used})},
        )
        .tuples()
        .all()
    )
    problems = sorted(
        {
            f"Unknown template {key!r}."
            if key not in found
            else f"Template {key!r} is for {found[key]}, not {channel}."
            for key, channel in used
            if found.get(key) != channel
        }
    )
    if problems:
        abort(422, INVALID, errors={"json": {"steps": problems}})


def get(db: sessionmaker[Session], project_id: str, key: str, version: int | None) -> dict[str, Any]:
    with db() as session:
        query = select(Workflow).where(Workflow.project_id == project_id, Workflow.key == key)
        if version is not None:
            query = query.where(Workflow.version == version)
        row = session.scalar(query.order_by(Workflow.version.desc()).limit(1))
    if row is None:
        abort(404, f"No workflow {key!r}" + (f" version {version}." if version is not None else "."))
    return present(row)


def _latest(session: Session, project_id: str, key: str) -> Workflow | None:
    return session.scalar(
        select(Workflow)
        .where(Workflow.project_id == project_id, Workflow.key == key)
        .order_by(Workflow.version.desc())
        .limit(1)
    )


def present(row: Workflow) -> dict[str, Any]:
    return {
        "key": row.key,
        "version": row.version,
        "name": row.name,
        "steps": row.definition["steps"],
        "created_at": row.created_at,
    }


def trigger(
    db: sessionmaker[Session],
    caller: Caller,
    key: str,
    body: dict[str, Any],
    raw_body: Any,
    idempotency_key: str | None,
) -> Accepted:
    """Start a run of the workflow's latest version per recipient; 202 with how many."""
    audience = body["recipients"]
    trigger_id = uuid.uuid4()
    with db.begin() as session:
        workflow = _latest(session, caller.project_id, key)
        if workflow is None:
            abort(404, f"No workflow {key!r}.")
        if isinstance(audience, dict):
            if not topics.exists(session, caller.project_id, audience["topic"]):
                problem = f"No topic {audience['topic']!r}."
                abort(422, INVALID, errors={"json": {"recipients": {"topic": [problem]}}})
            subscribers: list[str] = []
            count = topics.member_count(session, caller.project_id, audience["topic"])
        else:
            subscribers = list(dict.fromkeys(audience))  # one run per subscriber, in the order given
            _check_subscribers(session, caller.project_id, subscribers)
            count = len(subscribers)
        answer = {"runs": count, "trigger_id": str(trigger_id)}
        inserted = session.execute(
            insert(WorkflowTrigger)
            .values(
                id=trigger_id,
                project_id=caller.project_id,
                workflow_key=key,
                workflow_version=workflow.version,
                test=caller.is_test,
                trigger_key=body.get("trigger_key"),
                data=body.get("data") or {},
                idempotency_key=idempotency_key,
                request_hash=request_fingerprint(raw_body) if idempotency_key else None,
                response=answer if idempotency_key else None,
                topic=audience["topic"] if isinstance(audience, dict) else None,
                fanout_at=func.now() if isinstance(audience, dict) else None,
            )
            .on_conflict_do_nothing(constraint="uq_workflow_triggers_idempotency_key")
            .returning(WorkflowTrigger.id)
        ).first()
        if inserted is None:
            return _replay(session, caller, idempotency_key, raw_body)
        if isinstance(audience, dict):
            enqueue_after_commit(session, dispatch.workflow_fan_out(str(trigger_id)))
        else:
            run_ids = write_runs(session, str(trigger_id), subscribers)
            for signature in dispatch.workflow_steps(run_ids, 0):
                enqueue_after_commit(session, signature)
    return Accepted(answer, replayed=False)


RUNS = text(
    """
    INSERT INTO workflow_runs (id, project_id, workflow_key, workflow_version, trigger_id, trigger_key,
                               subscriber_id, test)
    SELECT r.id, t.project_id, t.workflow_key, t.workflow_version, t.id, t.trigger_key, r.subscriber_id, t.test
    FROM workflow_triggers t,
         unnest(CAST(:ids AS uuid[]), CAST(:subscribers AS text[])) AS r(id, subscriber_id)
    WHERE t.id = :trigger
    """
)


def write_runs(session: Session, trigger_id: str, subscribers: Sequence[str]) -> list[str]:
    """A run per subscriber of the trigger, one statement; their ids, time-ordered."""
    ids = intake.new_message_ids(len(subscribers))
    session.execute(RUNS, {"ids": ids, "subscribers": list(subscribers), "trigger": trigger_id})
    return ids


FAN_OUT = text(
    """
    WITH chosen AS (
        SELECT subscriber_id, row_number() OVER (ORDER BY subscriber_id) AS n FROM (
            SELECT subscriber_id FROM topic_members
            WHERE project_id = :project AND topic_key = :topic AND created_at <= :as_of AND subscriber_id > :after
            ORDER BY subscriber_id LIMIT :size
        ) AS next_members
    ), new AS (
        INSERT INTO workflow_runs (id, project_id, workflow_key, workflow_version, trigger_id, trigger_key,
                                   subscriber_id, test)
        SELECT ids.id, t.project_id, t.workflow_key, t.workflow_version, t.id, t.trigger_key, chosen.subscriber_id,
               t.test
        FROM workflow_triggers t, chosen JOIN unnest(CAST(:ids AS uuid[])) WITH ORDINALITY AS ids(id, n) USING (n)
        WHERE t.id = :trigger
        RETURNING id
    )
    SELECT (SELECT coalesce(array_agg(id::text), '{}') FROM new) AS ids,
           (SELECT max(subscriber_id) FROM chosen) AS last
    """
)


def write_topic_runs(session: Session, trigger: WorkflowTrigger, size: int) -> list[str]:
    """The runs of the trigger's next `size` topic members, and its cursor past them; the caller
    holds the trigger row locked and commits both together, as intake.write_topic_chunk does."""
    ids, last = session.execute(
        FAN_OUT,
        {
            "project": trigger.project_id,
            "topic": trigger.topic,
            "as_of": trigger.created_at,
            "after": trigger.fanout_after or "",
            "size": size,
            "ids": intake.new_message_ids(size),
            "trigger": trigger.id,
        },
    ).one()
    trigger.fanout_at = func.now()
    if last is not None:
        trigger.fanout_after = last
    if len(ids) < size:
        trigger.fanout_done_at = func.now()
    return list(ids)


def _check_subscribers(session: Session, project_id: str, subscribers: Sequence[str]) -> None:
    """422 naming the unknown ones, unless every subscriber is the project's."""
    known = set(
        session.execute(
            text(
                """
                SELECT external_id FROM subscribers
                WHERE project_id = :project AND external_id = ANY(CAST(:ids AS text[]))
                """
            ),
            {"project": project_id, "ids": list(subscribers)},
        ).scalars()
    )
    unknown = [s for s in subscribers if s not in known]
    if unknown:
        shown = ", ".join(map(repr, unknown[:UNKNOWN_SHOWN])) + (" …" if len(unknown) > UNKNOWN_SHOWN else "")
        abort(422, INVALID, errors={"json": {"recipients": [f"{len(unknown)} unknown subscribers: {shown}."]}})


def _replay(session: Session, caller: Caller, idempotency_key: str | None, raw_body: Any) -> Accepted:
    original = session.execute(
        select(WorkflowTrigger.request_hash, WorkflowTrigger.response).where(
            WorkflowTrigger.project_id == caller.project_id,
            WorkflowTrigger.test == caller.is_test,
            WorkflowTrigger.idempotency_key == idempotency_key,
        )
    ).one()
    if original.request_hash != request_fingerprint(raw_body):
        abort(409, "This Idempotency-Key was used with a different request body.")
    return Accepted(original.response, replayed=True)


def cancel(db: sessionmaker[Session], caller: Caller, key: str, body: dict[str, Any]) -> dict[str, int]:
    """Stop the runs of `trigger_key` that have not ended (only those of the given subscribers,
    if any): one update, after which no step of theirs runs."""
    subscribers = body.get("recipients")
    with db.begin() as session:
        if _latest(session, caller.project_id, key) is None:
            abort(404, f"No workflow {key!r}.")
        rows = session.execute(
            text(
                """
                UPDATE workflow_runs SET status = 'cancelled', reason = 'cancelled through the API', due_at = NULL,
                                         parked = false, updated_at = now(), ended_at = now()
                WHERE project_id = :project AND workflow_key = :workflow AND trigger_key = :trigger_key
                  AND test = :test AND status = 'running'
                  AND (CAST(:subscribers AS text[]) IS NULL OR subscriber_id = ANY(CAST(:subscribers AS text[])))
                RETURNING id::text, workflow_version, subscriber_id
                """
            ),
            {
                "project": caller.project_id,
                "workflow": key,
                "trigger_key": body["trigger_key"],
                "test": caller.is_test,
                "subscribers": subscribers,
            },
        ).all()
        store.record_events(session, [_cancelled(caller.project_id, key, row) for row in rows])
    return {"cancelled": len(rows)}


def _cancelled(project_id: str, key: str, row: Row) -> store.NewEvent:
    data = engine.run_event(row.id, key, row.workflow_version, row.subscriber_id, RunStatus.CANCELLED, "cancelled")
    return store.NewEvent(None, project_id, EventType.WORKFLOW_CANCELLED, data)


def get_run(db: sessionmaker[Session], project_id: str, run_id: str) -> dict[str, Any]:
    """A run, each step it took with its outcome, and the current status of each message it sent."""
    key = uuid_or_404(run_id, "workflow run")
    with db() as session:
        run = session.execute(
            text(
                """
                SELECT r.id::text, r.workflow_key, r.workflow_version, r.trigger_id::text, r.trigger_key,
                       r.subscriber_id, r.test, COALESCE(r.data, t.data) AS data, r.status, r.step, r.due_at,
                       r.reason, r.created_at, r.updated_at, r.ended_at
                FROM workflow_runs r JOIN workflow_triggers t ON t.id = r.trigger_id
                WHERE r.id = :id AND r.project_id = :project
                """
            ),
            {"id": key, "project": project_id},
        ).first()
        if run is None:
            abort(404, f"No workflow run {run_id!r}.")
        steps = session.execute(
            text(
                """
                SELECT s.step, s.kind, s.outcome, s.message_id::text, m.status AS message_status, s.detail, s.at
                FROM workflow_run_steps s LEFT JOIN messages m ON m.id = s.message_id
                WHERE s.run_id = :id ORDER BY s.step, s.at
                """
            ),
            {"id": key},
        ).all()
    return {
        **{name: value for name, value in run._mapping.items() if name not in ("workflow_key", "workflow_version")},
        "workflow": run.workflow_key,
        "version": run.workflow_version,
        "steps": [dict(step._mapping) for step in steps],
    }
