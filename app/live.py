"""Live news over Redis pub/sub: what the event and inbox streams of every API process hear.

Writers queue a message on their session and it is published after the commit, in one
pipeline (one round trip) per transaction, so a listener never hears of a row it cannot
read yet, and a rolled-back write is never heard of. Pub/sub keeps nothing: a listener
that was away resumes from the delivery log (`Last-Event-ID`), never from Redis.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import redis
from sqlalchemy import event
from sqlalchemy.orm import Session

from app.redis_client import redis_for
from tasks.celery_app import settings

logger = logging.getLogger(__name__)

PREFIX = "tidings:live:"


def project_channel(project_id: str) -> str:
    """Log entries of one project: a JSON list per message."""
    return f"{PREFIX}project:{project_id}"


def inbox_channel(project_id: str, subscriber_id: str) -> str:
    """Changes to one subscriber's inbox: {"kind": "item", "id": …} or {"kind": "changed"}."""
    return f"{PREFIX}inbox:{project_id}:{subscriber_id}"


def publish_after_commit(session: Session, channel: str, message: Any) -> None:
    session.info.setdefault("live", []).append((channel, json.dumps(message, separators=(",", ":"))))


@event.listens_for(Session, "after_commit")
def _publish(session: Session) -> None:
    pending = session.info.pop("live", [])
    if not pending:
        return
    try:
        with redis_for(settings().redis_url).pipeline(transaction=False) as pipe:
            for channel, message in pending:
                pipe.publish(channel, message)
            pipe.execute()
    except redis.RedisError as error:
        # The rows are committed: clients that reconnect read them from the log.
        logger.warning("could not publish %d live messages: %s", len(pending), error)


@event.listens_for(Session, "after_rollback")
def _drop(session: Session) -> None:
    session.info.pop("live", None)
