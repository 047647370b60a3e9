"""Project routes for messages: send one, read one."""

from __future__ import annotations

from typing import Any

from flask import g

from app.api import contract, idempotency, limits, simulated
from app.api.context import context
from app.api.project import large_body_with, project_blueprint
from app.observability import logs
from app.schemas.core import AcceptedSchema, MessagePageSchema, MessageQuerySchema, MessageSchema, SendSchema
from app.services import messages

# The spec's description of a send; the docstring's would be replaced by the simulated recipients' table.
SEND_DESCRIPTION = (
    "Same Idempotency-Key and body → the original answer, with `Idempotent-Replayed: true`. "
    "Bodies up to 1 MiB, or 16 MiB with attachments. cc and bcc addresses each get a message of their own, "
    "listed in `copies`. Each message counts against the project's messages a minute and the channel's daily "
    "quota (a replay counts nothing); over either → 429 with `Retry-After`."
)

blp = project_blueprint("messages", __name__, contract.MESSAGES, "Send notifications and follow them.")


@blp.route("/messages", methods=["POST"])
@blp.arguments(SendSchema)
@blp.response(202, AcceptedSchema, headers=limits.SEND_HEADERS)
@blp.alt_response(409)
@blp.alt_response(429, **limits.LIMIT_REACHED)
@blp.alt_response(
    503, description="Whether the send fits its daily quota could not be told; retry after `Retry-After`."
)
@idempotency.documented
@large_body_with("attachments")
@blp.doc(description=f"{SEND_DESCRIPTION}\n\n{simulated.DESCRIPTION}")
def send(data: dict[str, Any]):
    """Send a notification."""
    key = idempotency.key_from_request()
    accepted = messages.accept(context().db, g.caller, data, idempotency.guarded_body(key), key)
    logs.bind(message_id=accepted.body["id"])
    return idempotency.answer(accepted)


@blp.route("/messages/<message_id>", methods=["GET"])
@blp.response(200, MessageSchema)
def get_message(message_id: str):
    """Get a message.

    One message with its status, provider, attempts, error, engagement and timeline.
    """
    return messages.get_message(context().db, g.caller.project_id, message_id)


@blp.route("/messages", methods=["GET"])
@blp.arguments(MessageQuerySchema, location="query")
@blp.response(200, MessagePageSchema)
def list_messages(filters: dict[str, Any]):
    """List messages.

    The project's messages, newest first, filtered by status, channel, batch, subscriber and time; `status=dead`
    lists the dead letters.
    """
    return messages.list_messages(context().db, g.caller.project_id, filters)


@blp.route("/messages/<message_id>/cancel", methods=["POST"])
@blp.response(200, MessageSchema)
@blp.alt_response(409)
def cancel(message_id: str):
    """Cancel a message.

    Cancel a message until a worker claims it; after that, 409 with its status.
    """
    return messages.cancel_message(context().db, g.caller.project_id, message_id)
