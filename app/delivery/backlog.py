"""What is waiting: tasks in each broker queue, and messages in each lane with their age.

The digest asks live; beat's `measure_backlog` stores the same numbers for `/metrics`
every few seconds. A lane is the queue a waiting message is bound for: `accepted`
messages wait for prepare.<priority>, `ready` ones for deliver.<provider>.<priority>.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast
from urllib.parse import urlsplit

from kombu.connection import ConnectionPool
from kombu.transport.redis import PRIORITY_STEPS
from kombu.transport.redis import Channel as RedisChannel
from sqlalchemy import text
from sqlalchemy.orm import Session

from app.delivery.broker import celery_app
from app.delivery.queues import deliver_queue, prepare_queue
from app.redis_client import redis_for


@dataclass(frozen=True)
class Lane:
    name: str
    status: str
    count: int
    oldest_age_seconds: float


def queue_depths(broker_url: str, queues: Sequence[str]) -> dict[str, int]:
    """Tasks waiting in each queue.

    On Redis, one pipelined round trip of LLENs over the lists kombu keeps per queue and
    priority step (a kombu channel would open fresh connections on every call). On
    RabbitMQ, a passive declare per queue; a queue nobody has published to yet does not
    exist there, so it is empty (and AMQP closes the channel, which is replaced).
    """
    if urlsplit(broker_url).scheme in ("redis", "rediss", "unix"):
        with redis_for(broker_url).pipeline(transaction=False) as pipe:
            for queue in queues:
                for step in PRIORITY_STEPS:
                    pipe.llen(f"{queue}{RedisChannel.sep}{step}" if step else queue)
            lengths = pipe.execute()
        per_queue = len(PRIORITY_STEPS)
        return {queue: sum(lengths[i * per_queue : (i + 1) * per_queue]) for i, queue in enumerate(queues)}
    depths: dict[str, int] = {}
    # A pool of broker connections (Connection.Pool), which celery-types calls a ProducerPool.
    pool = cast(ConnectionPool, celery_app.pool)
    with pool.acquire(block=True, timeout=5) as connection:
        channel = connection.channel()
        try:
            for queue in queues:
                try:
                    depths[queue] = channel.queue_declare(queue=queue, passive=True).message_count
                except connection.channel_errors:
                    depths[queue] = 0
                    channel.close()
                    channel = connection.channel()
        finally:
            channel.close()
    return depths


def pending_lanes(session: Session, project: str | None = None) -> list[Lane]:
    """Messages waiting for a worker, by lane, with the age of the oldest.

    Age counts from acceptance, or from the time asked for when the message was scheduled:
    the wait the recipient sees. Messages held back on purpose (a paused provider, a
    provider's pace) are not waiting until their `next_attempt_at`. Only the partial index
    of active messages is read, so this costs the backlog's size, not the table's;
    `project` narrows it afterwards (MATERIALIZED keeps the planner from reaching for a
    project index that covers a million rows to find a few hundred).
    """
    rows = session.execute(
        text(
            """
            WITH waiting AS MATERIALIZED (
                SELECT status, provider, priority, project_id, GREATEST(created_at, scheduled_at) AS since
                FROM messages
                WHERE status IN ('accepted', 'ready')
                  AND (next_attempt_at IS NULL OR next_attempt_at <= now())
            )
            SELECT status, provider, priority, count(*) AS count, extract(epoch FROM now() - min(since)) AS oldest
            FROM waiting
            WHERE CAST(:project AS text) IS NULL OR project_id = :project
            GROUP BY status, provider, priority
            """
        ),
        {"project": project},
    ).all()
    lanes = [
        Lane(
            prepare_queue(row.priority) if row.status == "accepted" else deliver_queue(row.provider, row.priority),
            row.status,
            row._mapping["count"],  # row.count is also Sequence's method, and mypy sees that one
            max(float(row.oldest), 0.0),
        )
        for row in rows
    ]
    return sorted(lanes, key=lambda lane: lane.name)
