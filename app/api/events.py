"""Project routes for the delivery log: a page at a time, or live."""

from __future__ import annotations

from typing import Any

from flask import Response, g, request

from app.api import contract
from app.api.context import context
from app.api.project import key_still_valid, project_blueprint
from app.schemas.events import EventQuerySchema, LogPageSchema
from app.services import events, live_streams

blp = project_blueprint("events", __name__, contract.EVENTS, "The delivery log: what happened to each notification.")


@blp.route("/events", methods=["GET"])
@blp.arguments(EventQuerySchema, location="query")
@blp.response(200, LogPageSchema)
def list_events(filters: dict[str, Any]):
    """List the delivery log.

    The project's log, newest first; `sent` entries come from the messages themselves.
    """
    return events.list_events(context().db, g.caller.project_id, filters)


@blp.route("/events/stream", methods=["GET"])
@blp.response(200, content_type="text/event-stream")
@blp.doc(
    responses={
        200: contract.event_stream(
            "id: sent_5b1f0e6c-8a43-4c2e-9f7d-2d6a8e1c4b90\n"
            'data: {"id":"sent_5b1f0e6c-8a43-4c2e-9f7d-2d6a8e1c4b90","type":"sent",'
            '"message_id":"5b1f0e6c-8a43-4c2e-9f7d-2d6a8e1c4b90","channel":"email",'
            '"at":"2030-01-02T09:30:05+00:00","data":{"provider":"postmark"}}\n\n'
        )
    }
)
@blp.alt_response(429)
@blp.alt_response(503)
def stream_events() -> Response:
    """Stream the delivery log.

    Server-Sent Events: every new log entry as it happens. With `Last-Event-ID`, first the entries since (from a
    few seconds before, so deduplicate on `id`).
    """
    ctx = context()
    streaming = live_streams.Streaming.of(ctx.db, ctx.hub, ctx.settings)
    last_event_id = request.headers.get("Last-Event-ID")
    return live_streams.project_stream(streaming, g.caller.project_id, last_event_id, key_still_valid())
