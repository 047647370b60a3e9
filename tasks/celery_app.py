"""The Celery application, configured for at-least-once delivery.

Tasks carry ids only and every stage re-checks row status, so a message delivered twice
by the broker does no harm; what must never happen is a message silently dropped. Hence
late acknowledgement, re-queue on a lost worker, JSON only and no result backend.
"""

from __future__ import annotations

from celery import Celery
from celery.schedules import crontab
from celery.signals import worker_process_init

from app import logs  # noqa: F401 - connects the signal handlers that carry the request id
from app.config import Settings
from app.db import engine_for
from tasks.queues import BEAT_QUEUE, worker_queues

celery_app = Celery(
    "tidings",
    include=[
        "tasks.prepare",
        "tasks.deliver",
        "tasks.maintenance",
        "tasks.webhooks",
        "tasks.backlog",
        "tasks.rollup",
        "tasks.retention",
    ],
)

# The periodic tasks; they run on the beat queue, away from the delivery lanes.
BEAT_TASKS = (
    "tidings.release_due",
    "tidings.sweep",
    "tidings.fold_counts",
    "tidings.measure_backlog",
    "tidings.purge",
    "tidings.webhooks.release",
)

_settings: Settings | None = None


def configure(settings: Settings) -> Celery:
    """Point the app at the broker and remember the settings for the tasks."""
    global _settings
    _settings = settings
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
        broker_connection_retry_on_startup=True,
        broker_connection_timeout=2,
        result_backend=None,
        task_ignore_result=True,
        task_serializer="json",
        accept_content=["json"],
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        task_time_limit=300,
        task_soft_time_limit=240,
        task_default_queue=BEAT_QUEUE,
        task_routes={name: BEAT_QUEUE for name in BEAT_TASKS},
        # One task per pool slot: a prefetched bulk task would make a transactional one
        # wait behind it, defeating the priority lanes.
        worker_prefetch_multiplier=1,
        # Ctrl-C twice (cold shutdown) still gives running batches this long to finish.
        worker_soft_shutdown_timeout=30,
        worker_cancel_long_running_tasks_on_connection_loss=True,
        worker_hijack_root_logger=False,
        # Releasing due rows must be prompt; the sweep is a safety net.
        beat_schedule={
            "release-due": {"task": "tidings.release_due", "schedule": 1.0},
            "sweep": {"task": "tidings.sweep", "schedule": settings.sweep_interval},
            "release-webhooks": {"task": "tidings.webhooks.release", "schedule": 5.0},
            "fold-counts": {"task": "tidings.fold_counts", "schedule": 5.0},
            "measure-backlog": {"task": "tidings.measure_backlog", "schedule": 15.0},
            # Nightly, at a quiet hour; each run is bounded in time (tasks/retention.py).
            "purge": {"task": "tidings.purge", "schedule": crontab(hour=3, minute=17)},
        },
        timezone="UTC",
    )
    return celery_app


def settings() -> Settings:
    """The settings of this process, read from the environment on first use."""
    if _settings is None:
        configure(Settings.from_env())
    assert _settings is not None
    return _settings


def active_providers(settings: Settings) -> list[str]:
    """Providers this deployment routes to: every one of every channel's failover chain
    (traffic may move to any of them), and `log` for test keys."""
    return sorted(settings.chained_providers | {"log"})


def all_queues(settings: Settings) -> list[str]:
    return worker_queues(active_providers(settings))


@worker_process_init.connect
def _fresh_connections_after_fork(**_: object) -> None:
    """A forked pool child must not share its parent's database sockets."""
    if _settings is not None:
        engine_for(_settings.database_url).dispose(close=False)
