"""Project routes for workflows: save a version, trigger it, cancel runs, follow one run."""

from __future__ import annotations

from typing import Any

from flask import g
from marshmallow import ValidationError

from app.api import contract, idempotency
from app.api.context import context
from app.api.project import large_body, project_blueprint
from app.errors import field_error
from app.schemas.topics import TOPIC_KEY
from app.schemas.workflows import (
    CancelledSchema,
    CancelSchema,
    TriggerAcceptedSchema,
    TriggerSchema,
    WorkflowOutSchema,
    WorkflowRunSchema,
    WorkflowSchema,
    WorkflowVersionArgsSchema,
)
from app.workflows import service

blp = project_blueprint(
    "workflows", __name__, contract.WORKFLOWS, "Steps around sends: delays, conditions, digests, throttles."
)


@blp.route("/workflows/<workflow_key>", methods=["PUT"])
@blp.arguments(WorkflowSchema)
@blp.response(200, WorkflowOutSchema, description="Saved as a new version, or unchanged.")
@blp.alt_response(201, schema=WorkflowOutSchema, description="Created: version 1.")
def put_workflow(body: dict[str, Any], workflow_key: str):
    """Save a workflow.

    A change of name or steps makes a new version; runs already started keep theirs. The same name and steps
    again change nothing. Every send step's template must exist for its channel.
    """
    try:
        TOPIC_KEY(workflow_key)
    except ValidationError as error:
        field_error(422, "Invalid request.", "path", "workflow_key", error.messages[0])
    row, created = service.put(context().db, g.caller.project_id, workflow_key, body)
    return row, 201 if created else 200


@blp.route("/workflows/<workflow_key>", methods=["GET"])
@blp.arguments(WorkflowVersionArgsSchema, location="query")
@blp.response(200, WorkflowOutSchema)
def get_workflow(args: dict[str, Any], workflow_key: str):
    """Get a workflow.

    Its latest version, or the one asked for with `?version=`.
    """
    return service.get(context().db, g.caller.project_id, workflow_key, args.get("version"))


@blp.route("/workflows/<workflow_key>/trigger", methods=["POST"])
@blp.arguments(TriggerSchema)
@blp.response(202, TriggerAcceptedSchema)
@blp.alt_response(409)
@idempotency.documented
@large_body
def trigger_workflow(body: dict[str, Any], workflow_key: str):
    """Trigger a workflow.

    Start a run of its latest version for each of 1 to 10,000 subscribers, or for every member of a topic.
    Unknown subscribers start nothing (422, naming them). Same Idempotency-Key and body → the original answer.
    """
    key = idempotency.key_from_request()
    accepted = service.trigger(context().db, g.caller, workflow_key, body, idempotency.guarded_body(key), key)
    return idempotency.answer(accepted)


@blp.route("/workflows/<workflow_key>/cancel", methods=["POST"])
@blp.arguments(CancelSchema)
@blp.response(200, CancelledSchema)
@large_body
def cancel_workflow(body: dict[str, Any], workflow_key: str):
    """Cancel runs.

    Stop the runs started with `trigger_key` that have not ended, or only those of the given subscribers: no
    step of theirs runs after this answer. Each stopped run gets a `workflow.cancelled` event.
    """
    return service.cancel(context().db, g.caller, workflow_key, body)


@blp.route("/workflow-runs/<run_id>", methods=["GET"])
@blp.response(200, WorkflowRunSchema)
def get_workflow_run(run_id: str):
    """Get a workflow run.

    The run, where it stands, and each step it took with its outcome and the message it sent, with that
    message's status now.
    """
    return service.get_run(context().db, g.caller.project_id, run_id)
