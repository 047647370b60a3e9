"""Project routes for messages: send one, read one."""

from __future__ import annotations

from typing import Any

from flask import g, request

from app import logs
from app.api import context
from app.api.project import project_blueprint
from app.errors import field_error
from app.schemas import AcceptedSchema, MessagePageSchema, MessageQuerySchema, MessageSchema, SendSchema
from app.services import messages

blp = project_blueprint("messages", __name__, description="Send notifications and follow them.")

MAX_IDEMPOTENCY_KEY = 255


@blp.route("/messages", methods=["POST"])
@blp.arguments(SendSchema)
@blp.response(202, AcceptedSchema)
@blp.alt_response(409)
def send(data: dict[str, Any]):
    """Send one notification. Same Idempotency-Key and body → the original answer."""
    key = request.headers.get("Idempotency-Key")
    if key is not None and not 1 <= len(key) <= MAX_IDEMPOTENCY_KEY:
        field_error(422, "Invalid request.", "headers", "Idempotency-Key", "Use 1 to 255 characters.")
    accepted = messages.accept(context().db, g.caller, data, request.get_json(), key)
    logs.bind(message_id=accepted.body["id"])
    headers = {"Idempotent-Replayed": "true"} if accepted.replayed else {}
    return accepted.body, 202, headers


@blp.route("/messages/<message_id>", methods=["GET"])
@blp.response(200, MessageSchema)
def get_message(message_id: str):
    """One message with its timeline."""
    return messages.get_message(context().db, g.caller.project_id, message_id)


@blp.route("/messages", methods=["GET"])
@blp.arguments(MessageQuerySchema, location="query")
@blp.response(200, MessagePageSchema)
def list_messages(filters: dict[str, Any]):
    """The project's messages, newest first; `status=dead` lists the dead letters."""
    return messages.list_messages(context().db, g.caller.project_id, filters)


@blp.route("/messages/<message_id>/cancel", methods=["POST"])
@blp.response(200, MessageSchema)
@blp.alt_response(409)
def cancel(message_id: str):
    """Cancel a message until a worker claims it; after that, 409 with its status."""
    return messages.cancel_message(context().db, g.caller.project_id, message_id)
