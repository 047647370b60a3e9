"""A task that lost its database or broker runs again within seconds, not at the next sweep;
a worker whose broker comes back dispatches the waiting rows again at once.

Prepare and deliver tasks that failed on a lost connection used to end there: their rows
stayed `accepted` or `ready` until the sweeper found them STALLED_AFTER_SECONDS later
(1,300 rows still 50 s after PostgreSQL came back). Now the trouble `batch_wide` names
(tasks/isolation.py: the connection lost, the server shutting down, a lost race) sends
the task back to the broker with a short countdown, doubling from FIRST_WAIT to LAST_WAIT,
so it runs again at most LAST_WAIT after the server answers. Bounded by MAX_RETRIES (about
five minutes of outage); what is left after that, or what the broker itself would not
take back, is the sweeper's, as before.

A broker that comes back may have lost every queued task (Redis without persistence): the
rows stayed `accepted` or `ready` until the stalled sweep (the drain restarted 46 to 52 s
after Redis returned). So each worker, once its consumer has connected again, asks for
them to be dispatched again (`RedispatchOnReconnect`, tasks/maintenance.py
`redispatch_waiting`). A broker that kept its tasks gets a second task per waiting chunk,
which finds its rows claimed or sent and does nothing.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from celery import Task, bootsteps

from app.db import publish
from app.delivery.broker import celery_app
from app.delivery.queues import BEAT_QUEUE
from tasks import isolation

logger = logging.getLogger(__name__)

FIRST_WAIT, LAST_WAIT = 0.5, 2.0
MAX_RETRIES = 150


def countdown(retries: int) -> float:
    """Seconds before the task's next run: doubling, at most LAST_WAIT, with jitter so a
    backlog of failed tasks does not come back all at once."""
    return random.uniform(0.5, 1.0) * min(FIRST_WAIT * 2**retries, LAST_WAIT)


@contextmanager
def again_on_lost_connection(task: Task, redo: Callable[[float], bool] | None = None) -> Iterator[None]:
    """Run the block; should it fail on a lost connection, run the task again after
    `countdown`: through `redo(countdown)` when its arguments no longer carry its work (ids
    it took from its projects' turn or a waiting room; `redo` says whether it had any), else
    as itself (`task.retry`)."""
    try:
        yield
    except Exception as error:
        retries = task.request.retries or 0
        if not isolation.batch_wide(error) or retries >= MAX_RETRIES:
            raise
        wait = countdown(retries)
        logger.warning("%s runs again in %.1f s (try %d): %s", task.name, wait, retries + 1, error)
        if redo is None or not redo(wait):
            raise task.retry(countdown=wait, max_retries=MAX_RETRIES, exc=error) from error


class RedispatchOnReconnect(bootsteps.StartStopStep):
    """A consumer step that, when the consumer starts again after losing its broker, asks
    for every waiting row to be dispatched again, on the beat queue (one task per reconnect)."""

    requires = ("celery.worker.consumer.tasks:Tasks",)

    def start(self, parent: object) -> None:
        if getattr(parent, "restart_count", 0) > 0:  # -1 before the first start, 0 at it
            logger.warning("connected to the broker again: waiting rows are dispatched again")
            publish(celery_app.signature("tidings.redispatch_waiting", queue=BEAT_QUEUE))


celery_app.steps["consumer"].add(RedispatchOnReconnect)
