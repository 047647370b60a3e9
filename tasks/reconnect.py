"""A task that lost its database or broker runs again within seconds, not at the next sweep.

Prepare and deliver tasks that failed on a lost connection used to end there: their rows
stayed `accepted` or `ready` until the sweeper found them STALLED_AFTER_SECONDS later
(1,300 rows still 50 s after PostgreSQL came back). Now the trouble `batch_wide` names
(tasks/isolation.py: the connection lost, the server shutting down, a lost race) sends
the task back to the broker with a short countdown, doubling from FIRST_WAIT to LAST_WAIT,
so it runs again at most LAST_WAIT after the server answers. Bounded by MAX_RETRIES (about
five minutes of outage); what is left after that, or what the broker itself would not
take back, is the sweeper's, as before.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from celery import Task

from tasks import isolation

logger = logging.getLogger(__name__)

FIRST_WAIT, LAST_WAIT = 0.5, 2.0
MAX_RETRIES = 150


def countdown(retries: int) -> float:
    """Seconds before the task's next run: doubling, at most LAST_WAIT, with jitter so a
    backlog of failed tasks does not come back all at once."""
    return random.uniform(0.5, 1.0) * min(FIRST_WAIT * 2**retries, LAST_WAIT)


@contextmanager
def again_on_lost_connection(task: Task, redo: Callable[[float], object] | None = None) -> Iterator[None]:
    """Run the block; should it fail on a lost connection, run the task again after
    `countdown`: as itself (`task.retry`), or through `redo(countdown)` when its arguments
    no longer carry its work (a chunk it took from its project's turn or a waiting room)."""
    try:
        yield
    except Exception as error:
        retries = task.request.retries or 0
        if not isolation.batch_wide(error) or retries >= MAX_RETRIES:
            raise
        wait = countdown(retries)
        logger.warning("%s runs again in %.1f s (try %d): %s", task.name, wait, retries + 1, error)
        if redo is None:
            raise task.retry(countdown=wait, max_retries=MAX_RETRIES, exc=error) from error
        redo(wait)
