"""Queue depths read straight from Redis agree with what kombu itself counts."""

from __future__ import annotations

from app.delivery.broker import celery_app
from tasks.backlog import queue_depths


def test_redis_depths_count_every_priority_like_kombu(client, migrated):
    queue = "tidings-test-depth"  # no worker listens here
    for priority in (0, 0, 5, 9):
        celery_app.send_task("tidings.noop", queue=queue, priority=priority)
    try:
        with celery_app.connection_for_read() as connection:
            kombu_count = connection.default_channel.queue_declare(queue=queue, passive=True).message_count
        assert kombu_count == 4
        assert queue_depths(migrated.broker_url, [queue, "tidings-test-never-used"]) == {
            queue: 4,
            "tidings-test-never-used": 0,
        }
    finally:
        with celery_app.connection_for_write() as connection:
            connection.default_channel.queue_purge(queue)
