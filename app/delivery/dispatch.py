"""Signatures for the pipeline tasks, routed to their lanes.

Callers name tasks through these functions only, so the routing rules live in one place.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

import redis
from celery.canvas import Signature

from app.db import Publishable
from app.delivery.broker import celery_app
from app.delivery.fairness import FairChunks, chunks_waiting
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
    """Prepare tasks for `ids`; those of a `project` wait its turn in their lane, bulk or
    transactional (app/delivery/fairness.py)."""
    if project is not None:
        return [*prepare_in_turn({project: ids}, priority)]
    queue = prepare_queue(priority)
    return [
        celery_app.signature("tidings.prepare", args=(chunk, priority), queue=queue) for chunk in _chunks(ids, size)
    ]


def prepare_in_turn(by_project: Mapping[str, Sequence[str]], priority: str) -> list[FairChunks]:
    """Prepare tokens for several projects' ids, each project's to wait its turn in the lane."""
    return _in_turn(prepare_queue(priority), prepare_token(priority), by_project, CHUNK)


def prepare_token(priority: str) -> Signature:
    """A token of a prepare lane: it prepares the ids whose projects' turn it is."""
    return celery_app.signature("tidings.prepare_next", args=(priority,), queue=prepare_queue(priority))


def fan_out(batch_id: str, priority: str) -> Signature:
    """The next link of a topic send's fan-out (tasks/fanout.py), beside its messages' prepare tasks."""
    return celery_app.signature("tidings.fan_out", args=(batch_id,), queue=prepare_queue(priority))


def workflow_steps(run_ids: Sequence[str], step: int, countdown: float = 0) -> list[Signature]:
    """Tasks that carry workflow runs on from `step` (tasks/workflows.py), after `countdown` seconds.

    On the bulk prepare lane, as a trigger is a batch (it may reach 10,000 subscribers): on
    the transactional lane one project's triggers queued first in, first out ahead of
    another's password resets (a test key's 1,450 triggers of 100 runs put the victim's p99
    at 20 s in the noisy-neighbour soak). A send step's messages then take the lane the step
    asks for, transactional included, as they earn it.
    """
    options = {"countdown": countdown} if countdown > 0 else {}
    queue = prepare_queue(Priority.BULK)
    return [
        celery_app.signature("tidings.workflow_step", args=(chunk, step), queue=queue, **options)
        for chunk in _chunks(run_ids, CHUNK)
    ]


def workflow_fan_out(trigger_id: str) -> Signature:
    """The next link of a workflow trigger's fan-out to a topic's members, on the bulk lane as its steps."""
    return celery_app.signature("tidings.workflow_fan_out", args=(trigger_id,), queue=prepare_queue(Priority.BULK))


def deliver(
    provider: str,
    priority: str,
    ids: Sequence[str],
    countdown: float = 0,
    size: int | None = None,
    project: str | None = None,
) -> list[Publishable]:
    """Deliver tasks for `ids`; a project's wait their project's turn, and those put off by
    `countdown` (a provider's pace or pause) go first when that turn comes."""
    if project is not None:
        return [*deliver_in_turn(provider, priority, {project: ids}, countdown)]
    options = {"countdown": countdown} if countdown > 0 else {}
    queue = deliver_queue(provider, priority)
    return [
        celery_app.signature("tidings.deliver", args=(provider, chunk, priority), queue=queue, **options)
        for chunk in _chunks(ids, size or deliver_chunk(provider))
    ]


def deliver_in_turn(
    provider: str, priority: str, by_project: Mapping[str, Sequence[str]], countdown: float = 0
) -> list[FairChunks]:
    """Deliver tokens for several projects' ids of one lane, each project's to wait its turn;
    put off by `countdown`, they go first of their project's when its turn comes."""
    token = deliver_token(provider, priority, countdown)
    size = deliver_chunk(provider)
    return _in_turn(deliver_queue(provider, priority), token, by_project, size, ahead=countdown > 0)


def deliver_chunk(provider: str) -> int:
    """Ids per deliver task of `provider`: its batch, within [MIN_DELIVER_CHUNK, CHUNK]."""
    return min(max(registry.PROVIDERS[provider].max_batch, MIN_DELIVER_CHUNK), CHUNK)


def deliver_token(provider: str, priority: str, countdown: float = 0) -> Signature:
    """A token of a deliver lane: it delivers the ids whose projects' turn it is."""
    options = {"countdown": countdown} if countdown > 0 else {}
    queue = deliver_queue(provider, priority)
    return celery_app.signature("tidings.deliver_next", args=(provider, priority), queue=queue, **options)


def deliver_by_lane(messages: Iterable[tuple[str, str, str, str]]) -> list[Publishable]:
    """Deliver tokens for (id, provider, priority, project) of many lanes: per lane, each
    project's ids to wait its turn, the tokens shared."""
    lanes: dict[tuple[str, str], dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for message_id, provider, priority, project in messages:
        lanes[(provider, priority)][project].append(message_id)
    return [
        task
        for (provider, priority), by_project in lanes.items()
        for task in deliver_in_turn(provider, priority, by_project)
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


def tokens_for_waiting(client: redis.Redis, providers: Iterable[str]) -> list[Signature]:
    """A token for every chunk waiting in each lane of `providers` and in the prepare lanes.

    A worker that dies (or a broker that is lost) takes the tokens it held with it, and a
    token takes no chunk of its own: the lane's next tokens take its oldest chunks, so the
    chunks left without one are the youngest, often deposited after the loss, whose rows
    have not stood still long enough for any sweep to queue them again. The sweeper and a
    reconnecting worker give every waiting chunk a token; one left over finds nothing and
    does nothing."""
    lanes = [(prepare_queue(p), prepare_token(p)) for p in Priority]
    lanes += [(deliver_queue(name, p), deliver_token(name, p)) for name in providers for p in Priority]
    return [token for lane, token in lanes for _ in range(chunks_waiting(client, lane))]


def _in_turn(
    lane: str,
    token: Signature,
    by_project: Mapping[str, Sequence[str]],
    size: int,
    *,
    ahead: bool = False,
) -> list[FairChunks]:
    pieces = [(project, chunk) for project, ids in by_project.items() for chunk in _chunks(ids, size)]
    return [FairChunks(lane, token, pieces, size=size, ahead=ahead)] if pieces else []


def _chunks(ids: Sequence[str], size: int) -> list[list[str]]:
    ids = [str(i) for i in ids]
    return [ids[i : i + size] for i in range(0, len(ids), size)]
