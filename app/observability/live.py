"""Live news over Redis pub/sub: what the event and inbox streams of every API process hear.

Writers queue a message on their session and it is published after the commit, so a
listener never hears of a row it cannot read yet, and a rolled-back write is never heard
of. Pub/sub keeps nothing: a listener that was away resumes from the delivery log
(`Last-Event-ID`), never from Redis.

Most channels have no listener most of the time, so a process that listens marks the
channel with a short-lived key (app.observability.streams.Hub), and the publisher, after the commit,
asks for those marks (one MGET) and encodes and publishes only what someone hears: a
batch nobody streams costs one round trip. The mark is set before the subscription and
the log replay, and checked after the commit, so an entry is either published to a
listener that is there or committed before its replay reads the log.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import redis
from sqlalchemy import event
from sqlalchemy.orm import Session

from app.config import current_settings
from app.redis_client import redis_for

logger = logging.getLogger(__name__)

PREFIX = "tidings:live:"


def project_channel(project_id: str) -> str:
    """Log entries of one project: a JSON list per message."""
    return f"{PREFIX}project:{project_id}"


def inbox_channel(project_id: str, subscriber_id: str) -> str:
    """Changes to one subscriber's inbox: {"kind": "item", "id": …} or {"kind": "changed"}."""
    return f"{PREFIX}inbox:{project_id}:{subscriber_id}"


# How long a channel stays marked as listened to; the hub renews it well before.
LISTENING_TTL_SECONDS = 90


def listening_key(channel: str) -> str:
    return f"{PREFIX}listening:{channel}"


def publish_after_commit(session: Session, channel: str, message: Any) -> None:
    """Queue `message` (JSON-able; objects with `public()` are encoded through it)."""
    session.info.setdefault("live", []).append((channel, message))


def _encode(message: Any) -> str:
    return json.dumps(message, separators=(",", ":"), default=lambda value: value.public())


@event.listens_for(Session, "after_commit")
def _publish(session: Session) -> None:
    pending = session.info.pop("live", [])
    if not pending:
        return
    client = redis_for(current_settings().redis_url)
    try:
        channels = sorted({channel for channel, _ in pending})
        marks = client.mget([listening_key(channel) for channel in channels])
        heard = {channel for channel, mark in zip(channels, marks, strict=True) if mark}
        if not heard:
            return
        with client.pipeline(transaction=False) as pipe:
            for channel, message in pending:
                if channel in heard:
                    pipe.publish(channel, _encode(message))
            pipe.execute()
    except redis.RedisError as error:
        # The rows are committed: clients that reconnect read them from the log.
        logger.warning("could not publish %d live messages: %s", len(pending), error)


@event.listens_for(Session, "after_rollback")
def _drop(session: Session) -> None:
    session.info.pop("live", None)
