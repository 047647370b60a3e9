"""Queue names: one lane per stage, provider and priority.

Workers list transactional lanes first and consume them in that order, so a password
reset never waits behind a campaign. Within a priority the deliver lanes come before the
prepare lane: Redis hands out the first non-empty queue of the list, so with prepare first a
steady stream of sends keeps prepare busy and nothing already prepared ever goes out.
Downstream first finishes the work in flight, and prepare runs whenever it is done.
"""

from __future__ import annotations

from collections.abc import Iterable

from app.config import Settings
from app.enums import Priority
from providers import simulator

BEAT_QUEUE = "beat"
# Outbound webhooks: after the message lanes, so receivers never slow a send.
WEBHOOKS_QUEUE = "webhooks"
PRIORITIES_IN_ORDER = (Priority.TRANSACTIONAL, Priority.BULK)


def prepare_queue(priority: str) -> str:
    return f"prepare.{priority}"


def deliver_queue(provider: str, priority: str) -> str:
    return f"deliver.{provider}.{priority}"


def worker_queues(providers: Iterable[str]) -> list[str]:
    """Every queue we route to, highest priority first."""
    names = sorted(set(providers))
    queues: list[str] = []
    for priority in PRIORITIES_IN_ORDER:
        queues.extend(deliver_queue(provider, priority) for provider in names)
        queues.append(prepare_queue(priority))
    queues.extend((WEBHOOKS_QUEUE, BEAT_QUEUE))
    return queues


def active_providers(settings: Settings) -> list[str]:
    """Providers this deployment routes to: every one of every channel's failover chain
    (traffic may move to any of them), `log` for test keys, and the simulator for simulated
    recipients with any key, so that every deployment has its lanes without a setting."""
    return sorted(settings.chained_providers | {"log", simulator.NAME})


def all_queues(settings: Settings) -> list[str]:
    return worker_queues(active_providers(settings))


def transactional_queues(settings: Settings) -> list[str]:
    """The transactional lanes alone, for a worker that bulk work can never occupy.

    A worker on every lane takes transactional tasks first, but only as its threads free up:
    busy with another project's bulk (a test key's 2,000 batches of a template that never
    compiles), its pool and its interpreter were that project's, and another project's
    password resets waited up to 4 s at p99; beside a worker of their own, 0.6 s.
    """
    return [queue for queue in all_queues(settings) if is_transactional(queue)]


def is_transactional(queue: str) -> bool:
    return queue.endswith(f".{Priority.TRANSACTIONAL.value}")
