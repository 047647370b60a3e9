"""What the event and inbox streams send: a replay from the log when resuming, then live news."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import redis
from flask import Response
from sqlalchemy.orm import Session, sessionmaker

from app.errors import abort
from app.observability import live
from app.observability.streams import Busy, Hub, Listener, pump, response, sse
from app.services import events, inbox


@dataclass(frozen=True)
class Streaming:
    """What a stream needs of the API process."""

    db: sessionmaker[Session]
    hub: Hub
    heartbeat: float


def _listen(ctx: Streaming, channel: str) -> Listener:
    try:
        return ctx.hub.listen(channel)
    except Busy:
        abort(503, "This server holds as many streams as it may; try again shortly.", headers={"Retry-After": "5"})
    except redis.RedisError:
        abort(503, "Live updates are unavailable right now; try again shortly.", headers={"Retry-After": "5"})


def project_stream(ctx: Streaming, project_id: str, last_event_id: str | None) -> Response:
    """Every new log entry of the project; after `last_event_id`, first what was missed.

    The listener subscribes before the log is read, so an entry committed in between is
    in one or the other; the ones in both are sent once.
    """
    start = events.resume_point(ctx.db, project_id, last_event_id) if last_event_id else None
    listener = _listen(ctx, live.project_channel(project_id))
    replayed: set[str] = set()

    def missed() -> Iterator[str]:
        if start is None:
            return
        # Only entries this recent can come again live; older ids need not be remembered.
        recent = datetime.now(UTC) - 2 * events.RESUME_OVERLAP
        for entry in events.replay(ctx.db, project_id, start):
            if entry.at >= recent:
                replayed.add(entry.id)
            yield sse(entry.public(), entry.id)

    def render(items: list[dict[str, Any]]) -> Iterator[str]:
        for item in items:
            if item["id"] not in replayed:
                yield sse(item, item["id"])

    return response(pump(listener, ctx.heartbeat, missed(), render))


def inbox_stream(ctx: Streaming, project_id: str, subscriber_id: str, expires_at: float | None) -> Response:
    """A subscriber's new inbox items (`event: item`) and unread count (`event: unread`)."""
    listener = _listen(ctx, live.inbox_channel(project_id, subscriber_id))

    def counts() -> Iterator[str]:
        yield sse(inbox.counts(ctx.db, project_id, subscriber_id), event="unread")

    def render(message: dict[str, Any]) -> Iterator[str]:
        if message.get("kind") == "item":
            item = inbox.find_item(ctx.db, project_id, subscriber_id, message["id"])
            if item is not None:
                yield sse(item, item["id"], event="item")
        yield from counts()

    return response(pump(listener, ctx.heartbeat, counts(), render, expires_at))
