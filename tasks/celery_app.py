"""The workers' side of the Celery application: its tasks, how a worker runs them, beat's schedule.

Tasks carry ids only and every stage re-checks row status, so a message delivered twice
by the broker does no harm; what must never happen is a message silently dropped. Hence
late acknowledgement and re-queue on a lost worker. The application object itself, with
the broker and the wire format every publisher shares, is app/delivery/broker.py's.
"""

from __future__ import annotations

import gc

from celery import Celery
from celery.schedules import crontab
from celery.signals import worker_process_init, worker_ready

from app.config import Settings, current_settings
from app.db import engine_for
from app.delivery import broker
from app.delivery.broker import celery_app
from app.delivery.queues import BEAT_QUEUE
from app.observability import logs  # noqa: F401 - connects the signal handlers that carry the request id
from tasks import (  # noqa: F401 - registers them
    backlog,
    deliver,
    fanout,
    maintenance,
    prepare,
    reports,
    resend,
    retention,
    rollup,
    webhooks,
    workflows,
)

__all__ = ["BEAT_TASKS", "celery_app", "configure"]

# The periodic tasks; they run on the beat queue, away from the delivery lanes.
BEAT_TASKS = (
    "tidings.release_due",
    "tidings.sweep",
    "tidings.fold_counts",
    "tidings.measure_backlog",
    "tidings.purge",
    "tidings.webhooks.release",
)


def configure(settings: Settings) -> Celery:
    """Configure the broker side (app/delivery/broker.py), then how workers and beat run."""
    broker.configure(settings)
    celery_app.conf.update(
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        task_time_limit=300,
        task_soft_time_limit=240,
        task_routes={name: BEAT_QUEUE for name in BEAT_TASKS},
        # One task per pool slot: a prefetched bulk task would make a transactional one
        # wait behind it, defeating the priority lanes.
        worker_prefetch_multiplier=1,
        # Celery cuts the prefetch after a broker loss with tasks running and restores it as
        # their acks go; across a failover those acks fail on the closed channel, and after
        # the second failover the worker took no task for two minutes, until its shutdown
        # (tests/faults/test_rabbitmq.py). With one task per slot there is nothing to cut.
        worker_enable_prefetch_count_reduction=False,
        # Ctrl-C twice (cold shutdown) still gives running batches this long to finish.
        worker_soft_shutdown_timeout=settings.worker_soft_shutdown,
        # A task running when the broker goes finishes its provider call and writes its
        # outcomes; cancelled, a prefork child died mid-call and left its batch `unknown`
        # although the provider took it (tests/faults/test_broker_loss.py).
        worker_cancel_long_running_tasks_on_connection_loss=False,
        # Reconnect for as long as the broker is gone: Celery's default gives up after 100
        # attempts (about 47 minutes, at most 30 s apart) and the worker exits.
        broker_connection_max_retries=None,
        worker_hijack_root_logger=False,
        # With --autoscale, beat's every-second tasks must not keep a grown pool grown.
        worker_autoscaler="tasks.autoscale:Autoscaler",
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
    )
    return celery_app


@worker_process_init.connect
def _fresh_connections_after_fork(**_: object) -> None:
    """A forked pool child must not share its parent's database sockets."""
    engine_for(current_settings().database_url).dispose(close=False)


def _freeze_startup_objects(**_: object) -> None:
    """Leave what the worker built to start (modules, the app, the pools: ~180,000 objects)
    out of the garbage collector's full passes: none of it is ever garbage, and each pass
    over it cost a deliver batch of 100 about 1.4 ms of CPU in 14 on average."""
    gc.freeze()


worker_ready.connect(_freeze_startup_objects)  # the main process: the threads pool's tasks run there
worker_process_init.connect(_freeze_startup_objects)  # each prefork child
