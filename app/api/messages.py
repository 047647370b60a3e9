"""Project routes for messages: send one, read one."""

from __future__ import annotations

from typing import Any

from flask import g

from app.api import idempotency, limits
from app.api.context import context
from app.api.project import project_blueprint
from app.observability import logs
from app.schemas.core import AcceptedSchema, MessagePageSchema, MessageQuerySchema, MessageSchema, SendSchema
from app.services import messages

blp = project_blueprint("messages", __name__, description="Send notifications and follow them.")


@blp.route("/messages", methods=["POST"])
@blp.arguments(SendSchema)
@blp.response(202, AcceptedSchema, headers=limits.SEND_HEADERS)
@blp.alt_response(409)
@blp.alt_response(429, **limits.LIMIT_REACHED)
def send(data: dict[str, Any]):
    """Send one notification. Same Idempotency-Key and body → the original answer.

    It counts one message against the project's messages a minute and the channel's daily
    quota (a replay counts nothing); over either → 429 with `Retry-After`.
    """
    key = idempotency.key_from_request()
    accepted = messages.accept(context().db, g.caller, data, idempotency.guarded_body(key), key)
    logs.bind(message_id=accepted.body["id"])
    return idempotency.answer(accepted)


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
