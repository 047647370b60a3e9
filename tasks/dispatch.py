"""Signatures for the pipeline tasks, routed to their lanes.

Callers name tasks through these functions only, so the routing rules live in one place.
"""

from __future__ import annotations

from collections.abc import Sequence

from celery.canvas import Signature

from tasks.celery_app import celery_app
from tasks.queues import deliver_queue, prepare_queue

# Ids per task: large enough to make per-task overhead vanish, small enough to finish fast.
CHUNK = 500


def prepare(ids: Sequence[str], priority: str) -> list[Signature]:
    return [
        celery_app.signature("tidings.prepare", args=(chunk,), queue=prepare_queue(priority))
        for chunk in _chunks(ids)
    ]


def deliver(provider: str, priority: str, ids: Sequence[str], countdown: float = 0) -> list[Signature]:
    options = {"countdown": countdown} if countdown > 0 else {}
    return [
        celery_app.signature(
            "tidings.deliver",
            args=(provider, chunk),
            queue=deliver_queue(provider, priority),
            **options,
        )
        for chunk in _chunks(ids)
    ]


def _chunks(ids: Sequence[str]) -> list[list[str]]:
    ids = [str(i) for i in ids]
    return [ids[i : i + CHUNK] for i in range(0, len(ids), CHUNK)]
