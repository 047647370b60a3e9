"""The in-app inbox: read by the project's backend (project key) or by the subscriber's own
browser with a subscriber token, which opens this subscriber's inbox and nothing else.

EventSource cannot send headers, so the stream also takes the token as `?token=`.
Answers allow any origin: the token travels in a header or the URL, never in a cookie.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from flask import Response, g, request

from app.access.auth import bearer_token, unauthorized
from app.api.blueprint import Blueprint
from app.api.context import context
from app.api.contract import EVENTS, PROJECT_KEY, SUBSCRIBER_TOKEN, Access, event_stream
from app.api.project import add_rate_limit_headers, authenticate_and_limit, limit
from app.content.tokens import SUBSCRIBER_TOKEN_PREFIX, Purpose, verify
from app.enums import InboxStatus
from app.errors import abort
from app.schemas.events import ChangedSchema, InboxCountSchema, InboxItemSchema, InboxPageSchema, InboxQuerySchema
from app.services import inbox, live_streams

STREAM_ENDPOINT = "inbox.stream_inbox"


def authenticate() -> None:
    """A subscriber token, or else a project key as on every project route."""
    if request.method == "OPTIONS":
        return
    token = bearer_token() or (request.args.get("token") if request.endpoint == STREAM_ENDPOINT else None)
    if token is None or not token.startswith(SUBSCRIBER_TOKEN_PREFIX):
        authenticate_and_limit()
        g.subscriber_scope = None
        return
    verified = verify(Purpose.SUBSCRIBER, token.removeprefix(SUBSCRIBER_TOKEN_PREFIX))
    if verified is None or verified.expired:
        unauthorized()
    caller = context().callers.project_caller(verified.claims["p"])
    if caller is None:
        unauthorized()
    g.caller = caller
    g.subscriber_scope = verified.claims["s"]
    g.subscriber_token = token
    g.token_expires_at = verified.expires_at
    # Browsers get a budget of their own, so they can never use up the backend's.
    limit(f"{caller.project_id}:inbox", caller.rate_limit_per_min)


blp = Blueprint(
    "inbox",
    __name__,
    access=Access((PROJECT_KEY, SUBSCRIBER_TOKEN), authenticate, errors=(403, 429)),
    tag=EVENTS,
    url_prefix="/v1",
    description="In-app notifications, for backends and browsers.",
)


blp.after_request(add_rate_limit_headers)


@blp.after_request
def allow_browsers(response: Response) -> Response:
    response.headers["Access-Control-Allow-Origin"] = "*"
    response.headers["Access-Control-Allow-Headers"] = "Authorization, Content-Type, Last-Event-ID"
    response.headers["Access-Control-Allow-Methods"] = "GET, POST, OPTIONS"
    response.headers["Access-Control-Max-Age"] = "600"
    return response


def mine(subscriber_id: str) -> str:
    """The subscriber a route may touch: any with a project key, only its own with a token."""
    scope = g.subscriber_scope
    if scope is not None and scope != subscriber_id:
        abort(403, "This token opens another subscriber's inbox.")
    return subscriber_id


@blp.route("/subscribers/<subscriber_id>/inbox", methods=["GET"])
@blp.arguments(InboxQuerySchema, location="query")
@blp.response(200, InboxPageSchema)
def list_inbox(args: dict[str, Any], subscriber_id: str):
    """List a subscriber's inbox.

    Unread first, newest first; `status=archived` lists the archive.
    """
    return inbox.items_page(
        context().db, g.caller.project_id, mine(subscriber_id), args.get("status"), args.get("cursor"), args["limit"]
    )


@blp.route("/subscribers/<subscriber_id>/inbox/count", methods=["GET"])
@blp.response(200, InboxCountSchema)
def count_inbox(subscriber_id: str):
    """Count a subscriber's inbox.

    Unread and total notifications, for a badge.
    """
    return inbox.counts_of(context().db, g.caller.project_id, mine(subscriber_id))


@blp.route("/subscribers/<subscriber_id>/inbox/read-all", methods=["POST"])
@blp.response(200, ChangedSchema)
def read_all(subscriber_id: str):
    """Mark a subscriber's inbox read.

    Every unread notification becomes read; answers how many changed and the counts after.
    """
    return inbox.read_all(context().db, g.caller.project_id, mine(subscriber_id))


@blp.route("/subscribers/<subscriber_id>/inbox/<message_id>/read", methods=["POST"])
@blp.response(200, InboxItemSchema)
def read(subscriber_id: str, message_id: str):
    """Mark a notification read.

    The notification, now read.
    """
    return inbox.mark(context().db, g.caller.project_id, mine(subscriber_id), message_id, InboxStatus.READ)


@blp.route("/subscribers/<subscriber_id>/inbox/<message_id>/archive", methods=["POST"])
@blp.response(200, InboxItemSchema)
def archive(subscriber_id: str, message_id: str):
    """Archive a notification.

    The notification, now archived: it leaves the inbox for the archive.
    """
    return inbox.mark(context().db, g.caller.project_id, mine(subscriber_id), message_id, InboxStatus.ARCHIVED)


@blp.route("/inbox/stream", methods=["GET"])
@blp.response(200, content_type="text/event-stream")
@blp.doc(
    responses={
        200: event_stream(
            'event: item\ndata: {"id":"3d8b6f2a-0c4e-4a71-9b5e-8f1d2c7a6e03","status":"unread",'
            '"title":"Your order shipped","body":"It is on its way.","category":"orders"}\n\n'
            'event: unread\ndata: {"unread":1,"total":1}\n\n'
        )
    }
)
@blp.alt_response(429)
@blp.alt_response(503)
def stream_inbox() -> Response:
    """Stream a subscriber's inbox.

    Server-Sent Events for the token's subscriber: `item` for each new notification, `unread` with the counts
    after every change. Ends when the token expires. Browsers' EventSource cannot send headers, so the token may
    come as `?token=`.
    """
    if g.subscriber_scope is None:
        abort(403, "The inbox stream takes a subscriber token (POST /v1/subscribers/{id}/token).")
    ctx = context()
    streaming = live_streams.Streaming.of(ctx.db, ctx.hub, ctx.settings)
    return live_streams.inbox_stream(
        streaming, g.caller.project_id, g.subscriber_scope, g.subscriber_token, token_still_valid()
    )


def token_still_valid() -> Callable[[], bool]:
    """For the stream, which outlives this request: whether its token has not expired and its
    project is still there, unchanged (one Redis GET while nothing changed)."""
    callers, caller, expires_at = context().callers, g.caller, g.token_expires_at
    return lambda: (
        (expires_at is None or time.time() < expires_at)
        and callers.project_caller(caller.project_id, fresh=True) == caller
    )
