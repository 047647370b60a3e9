"""What the event and inbox streams send: a replay from the log when resuming, then live news.

Each stream takes one of its API process's stream slots, counted against its project and,
for an inbox stream, its token. Beyond the process's own limit the answer is 503 (this
server is full: another may not be, and the client cannot help it); beyond a project's or
a token's it is 429, since the caller holds those streams itself and can close one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import redis
from flask import Response
from sqlalchemy.orm import Session, sessionmaker

from app.access.auth import hash_key
from app.config import Settings
from app.errors import abort
from app.observability import live
from app.observability.streams import Busy, Hub, Listener, OverQuota, Quota, pump, response, sse
from app.services import events, inbox

RETRY_AFTER = {"Retry-After": "5"}


@dataclass(frozen=True)
class Streaming:
    """What a stream needs of the API process."""

    db: sessionmaker[Session]
    hub: Hub
    heartbeat: float
    per_project: int
    per_inbox_token: int

    @classmethod
    def of(cls, db: sessionmaker[Session], hub: Hub, settings: Settings) -> Streaming:
        return cls(db, hub, settings.stream_heartbeat, settings.streams_per_project, settings.streams_per_inbox_token)


def _listen(ctx: Streaming, channel: str, quotas: Mapping[Quota, int]) -> Listener:
    try:
        return ctx.hub.listen(channel, quotas)
    except Busy:
        abort(503, "This server holds as many streams as it may; try again shortly.", headers=RETRY_AFTER)
    except OverQuota as over:
        holder, _ = over.quota
        abort(429, f"This {holder} holds as many streams here as it may; close one first.", headers=RETRY_AFTER)
    except redis.RedisError:
        abort(503, "Live updates are unavailable right now; try again shortly.", headers=RETRY_AFTER)


def project_stream(ctx: Streaming, project_id: str, last_event_id: str | None, allowed: Callable[[], bool]) -> Response:
    """Every new log entry of the project; after `last_event_id`, first what was missed.
    Ends once `allowed` (asked every heartbeat) says the caller may no longer listen.

    The listener subscribes before the log is read, so an entry committed in between is
    in one or the other; the ones in both are sent once.
    """
    start = events.resume_point(ctx.db, project_id, last_event_id) if last_event_id else None
    listener = _listen(ctx, live.project_channel(project_id), {("project", project_id): ctx.per_project})
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

    return response(pump(listener, ctx.heartbeat, missed(), render, allowed))


def inbox_stream(
    ctx: Streaming, project_id: str, subscriber_id: str, token: str, allowed: Callable[[], bool]
) -> Response:
    """A subscriber's new inbox items (`event: item`) and unread count (`event: unread`),
    until `allowed` says no more. The token's slots are named by its digest, not by itself."""
    quotas = {("project", project_id): ctx.per_project, ("inbox token", hash_key(token)): ctx.per_inbox_token}
    listener = _listen(ctx, live.inbox_channel(project_id, subscriber_id), quotas)

    def counts() -> Iterator[str]:
        yield sse(inbox.counts(ctx.db, project_id, subscriber_id), event="unread")

    def render(message: dict[str, Any]) -> Iterator[str]:
        if message.get("kind") == "item":
            item = inbox.find_item(ctx.db, project_id, subscriber_id, message["id"])
            if item is not None:
                yield sse(item, item["id"], event="item")
        yield from counts()

    return response(pump(listener, ctx.heartbeat, counts(), render, allowed))
