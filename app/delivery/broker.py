"""The Celery application as every process sees it: the broker, the wire format, the default lane.

The API, SMTP and CLI processes only publish, by task name (app/delivery/dispatch.py); the
workers register their tasks on this same object and add how they run them and beat's
schedule (tasks/celery_app.py). One object for both means a worker publishes its follow-on
tasks over the connections it consumes on, and a publisher never needs the task code.
"""

from __future__ import annotations

from celery import Celery

from app.config import Settings, use_settings
from app.delivery.queues import BEAT_QUEUE
from app.delivery.redis_transport import TRANSPORT

celery_app = Celery("tidings")


def configure(settings: Settings) -> Celery:
    """Point the app at the broker and make `settings` this process's own (app.config)."""
    use_settings(settings)
    transport_options = {
        # Longer than any countdown we use, or Redis re-delivers the waiting message.
        "visibility_timeout": settings.visibility_timeout,
        "queue_order_strategy": "priority",
        "socket_connect_timeout": 2,
        "socket_timeout": 5,
    }
    celery_app.conf.update(
        broker_url=settings.broker_url,
        broker_transport_options=transport_options,
        # kombu's Redis transport with the fix for a worker losing Redis (app/delivery/redis_transport.py);
        # any other URL (amqp://, rediss://) picks its transport by scheme as before.
        broker_transport=TRANSPORT if settings.broker_url.startswith("redis://") else None,
        broker_connection_retry_on_startup=True,
        broker_connection_timeout=2,
        # Tasks carry ids only and report through PostgreSQL: no results to keep.
        result_backend=None,
        task_ignore_result=True,
        task_serializer="json",
        accept_content=["json"],
        task_default_queue=BEAT_QUEUE,
        timezone="UTC",
    )
    return celery_app
