"""A worker told to stop (SIGTERM: Celery's warm shutdown) stops sending new provider batches.

Warm shutdown waits for running tasks, and a deliver task may hold 500 messages for a
provider that takes one per call. So between provider calls deliver asks `STOPPING`:
once set, the batch's unsent messages go back to `ready` with their attempt refunded
and are re-published at once for another worker, and the task ends within one provider
call instead of the whole batch. Celery sends `worker_shutting_down` in the process that
runs the tasks with the threads pool (our default); a prefork child finishes its batch.
"""

from __future__ import annotations

import threading
from typing import Any

from celery.signals import worker_shutting_down

STOPPING = threading.Event()


@worker_shutting_down.connect
def _stop_sending(**_: Any) -> None:
    STOPPING.set()
