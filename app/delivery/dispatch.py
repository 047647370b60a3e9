"""Signatures for the pipeline tasks, routed to their lanes.

Callers name tasks through these functions only, so the routing rules live in one place.
"""

from __future__ import annotations

from collections.abc import Sequence

from celery.canvas import Signature

from app.db import Publishable
from app.delivery.broker import celery_app
from app.delivery.fairness import FairChunks
from app.delivery.queues import WEBHOOKS_QUEUE, deliver_queue, prepare_queue
from app.enums import Priority
from providers import registry

# Ids per task: large enough to make per-task overhead vanish, small enough to finish fast.
CHUNK = 500
# Webhook deliveries per task: each is a POST that may take the whole timeout.
WEBHOOK_CHUNK = 50
# A deliver task carries one provider batch where it can: a short task frees its worker
# slot soon, so a transactional message never waits long behind a bulk one.
MIN_DELIVER_CHUNK = 50


def prepare(ids: Sequence[str], priority: str, size: int = CHUNK, project: str | None = None) -> list[Publishable]:
    """Prepare tasks for `ids`; a project's bulk ones wait their project's turn (app/delivery/fairness.py)."""
    chunks = _chunks(ids, size)
    if project is not None and priority == Priority.BULK:
        return [FairChunks(project, priority, chunks)] if chunks else []
    return [
        celery_app.signature("tidings.prepare", args=(chunk, priority), queue=prepare_queue(priority))
        for chunk in chunks
    ]


def deliver(
    provider: str, priority: str, ids: Sequence[str], countdown: float = 0, size: int | None = None
) -> list[Signature]:
    options = {"countdown": countdown} if countdown > 0 else {}
    size = size or min(max(registry.PROVIDERS[provider].max_batch, MIN_DELIVER_CHUNK), CHUNK)
    return [
        celery_app.signature(
            "tidings.deliver",
            args=(provider, chunk, priority),
            queue=deliver_queue(provider, priority),
            **options,
        )
        for chunk in _chunks(ids, size)
    ]


def webhooks(delivery_ids: Sequence[str], countdown: float = 0) -> list[Signature]:
    options = {"countdown": countdown} if countdown > 0 else {}
    return [
        celery_app.signature("tidings.webhooks.deliver", args=(chunk,), queue=WEBHOOKS_QUEUE, **options)
        for chunk in _chunks(delivery_ids, WEBHOOK_CHUNK)
    ]


def _chunks(ids: Sequence[str], size: int) -> list[list[str]]:
    ids = [str(i) for i in ids]
    return [ids[i : i + size] for i in range(0, len(ids), size)]
