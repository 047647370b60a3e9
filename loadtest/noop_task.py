"""One Celery task that does nothing: the ceiling the drain benchmark holds its figures against.

A worker started as `tidings worker --include noop_task` (loadtest/ on PYTHONPATH) is the
pipeline's worker, settings, logging and all, with this task besides; how fast it drains
the task is what a worker of that layout spends per task and nothing else. The benchmark
starts such workers on IDLE_QUEUE, where nothing is published, so every worker of a
layout is up before any takes a task, then tells them all at once to consume QUEUE.
"""

from __future__ import annotations

from app.delivery.broker import celery_app

QUEUE = "noop"
IDLE_QUEUE = "noop.idle"


@celery_app.task(name="loadtest.noop")
def noop() -> None:
    """Nothing at all."""
