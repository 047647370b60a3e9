"""Before a deliver task sends: may its provider be used, or do its messages move on?

A provider whose circuit is open is not retried while it cools down: the task hands its
still-ready messages to the next closed provider of their channel (one UPDATE of
`provider` for the batch) and dispatches them to that provider's lane. Where the channel
has nowhere else to go, the messages are sent as they would be without a breaker.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

import redis

from app.config import Settings
from app.db import enqueue_after_commit, session_scope
from app.delivery import dispatch, store
from app.delivery.breaker import CircuitBreakers
from app.enums import Channel, CircuitState
from app.observability.counters import increment
from tasks import routing


@dataclass(frozen=True)
class Admitted:
    """What the task still sends itself, and whether that batch is the half-open probe."""

    ids: list[str]
    probe: bool = False


def admit(config: Settings, client: redis.Redis, provider: str, priority: str, ids: list[str]) -> Admitted:
    breakers = CircuitBreakers(client, config.breaker)
    admission = breakers.admit(provider)
    if admission.admitted:
        if admission.probe:
            increment(client, "breaker_transitions", provider=provider, state=CircuitState.HALF_OPEN.value)
        return Admitted(ids, admission.probe)
    targets = routing.handover_targets(config.chains, provider, breakers.states(config.chained_providers))
    if not targets:
        return Admitted(ids)
    moved = hand_over(config, client, provider, priority, ids, targets)
    return Admitted([i for i in ids if i not in moved])


def hand_over(
    config: Settings,
    client: redis.Redis,
    provider: str,
    priority: str,
    ids: list[str],
    targets: Mapping[Channel, str],
) -> set[str]:
    """Move what is still ready to each channel's target and dispatch it there, after commit."""
    lanes: dict[str, list[str]] = defaultdict(list)
    with session_scope(config.database_url) as session:
        for row in store.hand_over(session, provider, ids, {c.value: t for c, t in targets.items()}):
            lanes[row.provider].append(row.id)
        for target, moved in lanes.items():
            for signature in dispatch.deliver(target, priority, moved):
                enqueue_after_commit(session, signature)
    for target, moved in lanes.items():
        increment(client, "failover_handovers", len(moved), provider=provider, to=target)
    return {message_id for moved in lanes.values() for message_id in moved}
