"""The prefork pool's autoscaler (`--autoscale MAX,MIN`), deaf to beat's housekeeping.

Celery's autoscaler grows the pool while the tasks a worker holds outnumber its processes,
and gives processes back once neither a task nor a growth has come for its keepalive
(`AUTOSCALE_KEEPALIVE`, 30 s by default). Beat sends `release_due` every second, and more
tasks every few seconds, to the beat queue that every worker on the default queues
consumes: with them counted, a grown pool never saw a quiet keepalive and stayed at MAX,
and at MIN two of them arriving together grew it again, so it swung up and down, each
shrink a chance to stop a process just handed a task. Beat's tasks are short and few, and
MIN processes run them; only the other tasks are load.
"""

from __future__ import annotations

from celery.worker import state
from celery.worker.autoscale import Autoscaler as CeleryAutoscaler
from celery.worker.request import Request

from app.delivery.queues import BEAT_QUEUE


def is_load(req: Request) -> bool:
    """Whether a task should size the pool: any but beat's."""
    return req.delivery_info.get("routing_key") != BEAT_QUEUE


class Autoscaler(CeleryAutoscaler):
    def on_task_received(self, req: Request) -> None:
        if is_load(req):
            super().on_task_received(req)  # type: ignore[misc]  # celery-types leaves this hook out

    @property
    def qty(self) -> int:
        """Tasks held that are load: what the pool grows to, up to MAX."""
        return sum(1 for req in list(state.reserved_requests) if is_load(req))
