"""Project routes for batches: one send to up to 10,000 recipients, and its progress."""

from __future__ import annotations

from typing import Any

from flask import g

from app.api import contract, idempotency, limits
from app.api.context import context
from app.api.project import large_body, project_blueprint
from app.schemas.batches import BatchAcceptedSchema, BatchSchema, BatchSendSchema
from app.services import batches

blp = project_blueprint("batches", __name__, contract.MESSAGES, "Send one notification to many recipients at once.")


@blp.route("/messages/batch", methods=["POST"])
@blp.arguments(BatchSendSchema)
@blp.response(202, BatchAcceptedSchema, headers=limits.SEND_HEADERS)
@blp.alt_response(409)
@blp.alt_response(429, **limits.LIMIT_REACHED)
@blp.alt_response(
    503, description="Whether the send fits its daily quota could not be told; retry after `Retry-After`."
)
@idempotency.documented
@large_body
def send_batch(data: dict[str, Any]):
    """Send to many recipients.

    Send to 1 to 10,000 recipients; bad rows are answered by index, the good ones sent. Each recipient's `data`
    is merged over the shared `data`. No valid recipient → 422. Same Idempotency-Key and body → the original
    answer. Each valid recipient counts one message against the project's messages a minute and the channel's
    daily quota; a batch either has no room for is refused whole (429), with how many remain.
    """
    key = idempotency.key_from_request()
    accepted = batches.send_batch(context().db, g.caller, data, idempotency.guarded_body(key), key)
    return idempotency.answer(accepted)


@blp.route("/batches/<batch_id>", methods=["GET"])
@blp.response(200, BatchSchema)
def get_batch(batch_id: str):
    """Get a batch.

    A batch with its messages counted by status; `GET /v1/messages?batch_id=` lists them.
    """
    return batches.get_batch(context().db, g.caller.project_id, batch_id)
