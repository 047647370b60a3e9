"""Signatures for the pipeline tasks, routed to their lanes.

Callers name tasks through these functions only, so the routing rules live in one place.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence

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


def prepare(
    ids: Sequence[str], priority: str, size: int = CHUNK, project: str | None = None, spare: bool = False
) -> list[Publishable]:
    """Prepare tasks for `ids`; a project's bulk ones wait their project's turn (app/delivery/fairness.py),
    with `spare` tokens where the sweeper queues them again for a dead worker (FairChunks)."""
    chunks = _chunks(ids, size)
    queue = prepare_queue(priority)
    if project is not None and priority == Priority.BULK:
        token = celery_app.signature("tidings.prepare_next", args=(priority,), queue=queue)
        return _in_turn(project, queue, token, chunks, spare=spare)
    return [celery_app.signature("tidings.prepare", args=(chunk, priority), queue=queue) for chunk in chunks]


def fan_out(batch_id: str, priority: str) -> Signature:
    """The next link of a topic send's fan-out (tasks/fanout.py), beside its messages' prepare tasks."""
    return celery_app.signature("tidings.fan_out", args=(batch_id,), queue=prepare_queue(priority))


def workflow_steps(run_ids: Sequence[str], step: int, countdown: float = 0) -> list[Signature]:
    """Tasks that carry workflow runs on from `step` (tasks/workflows.py), after `countdown` seconds.

    On the transactional prepare lane: a workflow's steps are a few statements per set of
    runs, and its messages then take the lane their send step asks for.
    """
    options = {"countdown": countdown} if countdown > 0 else {}
    queue = prepare_queue(Priority.TRANSACTIONAL)
    return [
        celery_app.signature("tidings.workflow_step", args=(chunk, step), queue=queue, **options)
        for chunk in _chunks(run_ids, CHUNK)
    ]


def workflow_fan_out(trigger_id: str) -> Signature:
    """The next link of a workflow trigger's fan-out to a topic's members."""
    return celery_app.signature(
        "tidings.workflow_fan_out", args=(trigger_id,), queue=prepare_queue(Priority.TRANSACTIONAL)
    )


def deliver(
    provider: str,
    priority: str,
    ids: Sequence[str],
    countdown: float = 0,
    size: int | None = None,
    project: str | None = None,
    spare: bool = False,
) -> list[Publishable]:
    """Deliver tasks for `ids`; a project's bulk ones wait their project's turn, and those
    put off by `countdown` (a provider's pace or pause) go first when that turn comes;
    `spare` as for `prepare`."""
    options = {"countdown": countdown} if countdown > 0 else {}
    chunks = _chunks(ids, size or deliver_chunk(provider))
    queue = deliver_queue(provider, priority)
    if project is not None and priority == Priority.BULK:
        token = deliver_token(provider, priority, countdown)
        return _in_turn(project, queue, token, chunks, ahead=bool(options), spare=spare)
    return [
        celery_app.signature("tidings.deliver", args=(provider, chunk, priority), queue=queue, **options)
        for chunk in chunks
    ]


def deliver_chunk(provider: str) -> int:
    """Ids per deliver task of `provider`: its batch, within [MIN_DELIVER_CHUNK, CHUNK]."""
    return min(max(registry.PROVIDERS[provider].max_batch, MIN_DELIVER_CHUNK), CHUNK)


def deliver_token(provider: str, priority: str, countdown: float = 0) -> Signature:
    """A token of a bulk deliver lane: it delivers the chunk whose project's turn it is."""
    options = {"countdown": countdown} if countdown > 0 else {}
    queue = deliver_queue(provider, priority)
    return celery_app.signature("tidings.deliver_next", args=(provider, priority), queue=queue, **options)


def deliver_by_lane(messages: Iterable[tuple[str, str, str, str]], spare: bool = False) -> list[Publishable]:
    """Deliver tasks for (id, provider, priority, project) of many lanes: bulk ones per
    project, each to wait its project's turn; the others per lane, many projects a batch."""
    lanes: dict[tuple[str, str, str | None], list[str]] = defaultdict(list)
    for message_id, provider, priority, project in messages:
        lanes[(provider, priority, project if priority == Priority.BULK else None)].append(message_id)
    return [
        task
        for (provider, priority, project), ids in lanes.items()
        for task in deliver(provider, priority, ids, project=project, spare=spare)
    ]


def resend(provider: str, priority: str, claim_id: str) -> Signature:
    """Send an abandoned claim's calls again as they were (tasks/resend.py), on its deliver lane."""
    queue = deliver_queue(provider, priority)
    return celery_app.signature("tidings.resend", args=(provider, claim_id, priority), queue=queue)


def reports(provider: str, priority: str, items: Sequence[Sequence[str]]) -> list[Signature]:
    """The reports a provider gave with its answers (tasks/reports.py), on its own deliver
    lane: they are the tail of its sends, and every worker that sends for it takes them."""
    if not items:
        return []
    queue = deliver_queue(provider, priority)
    return [celery_app.signature("tidings.reports", args=(provider, [list(item) for item in items]), queue=queue)]


def webhooks(delivery_ids: Sequence[str], countdown: float = 0) -> list[Signature]:
    options = {"countdown": countdown} if countdown > 0 else {}
    return [
        celery_app.signature("tidings.webhooks.deliver", args=(chunk,), queue=WEBHOOKS_QUEUE, **options)
        for chunk in _chunks(delivery_ids, WEBHOOK_CHUNK)
    ]


def _in_turn(
    project: str, queue: str, token: Signature, chunks: list[list[str]], ahead: bool = False, spare: bool = False
) -> list[Publishable]:
    return [FairChunks(project, queue, token, chunks, ahead, spare)] if chunks else []


def _chunks(ids: Sequence[str], size: int) -> list[list[str]]:
    ids = [str(i) for i in ids]
    return [ids[i : i + size] for i in range(0, len(ids), size)]
