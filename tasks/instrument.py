"""The pipeline's numbers and log lines: what one prepare or deliver batch did.

Called once per batch after its transaction commits, so they describe what is in
PostgreSQL; numbers are summed in memory and sent as one Redis pipeline. A batch logs
one line; each message that will not go (failed, dead) logs one of its own, with its id
and reason, since those are the ones somebody will come asking about.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime

import redis
from sqlalchemy import Row

from app.delivery import store
from app.delivery.prepare_store import Plan
from app.enums import MessageStatus
from app.observability import throughput
from app.observability.counters import Tally, send

logger = logging.getLogger(__name__)

# What the finalised status means as an outcome label; a refunded `ready` waits for a pause.
DEFERRED = "deferred"
NO_PROVIDER = "none"
# Final failures get a log line each; retries are counted in the batch's line (a provider
# outage would otherwise log every message every few minutes).
GAVE_UP = (MessageStatus.FAILED, MessageStatus.DEAD)


def delivered(
    client: redis.Redis,
    provider: str,
    claimed: Sequence[store.Claimed],
    outcomes: Sequence[store.Finalised],
    call_seconds: Sequence[float],
) -> None:
    """Outcomes, attempts, retries, dead letters, call and accept→provider latency of a batch."""
    rows = {row.id: row for row in claimed}
    tally = Tally()
    for channel, count in Counter(row.channel for row in claimed).items():
        tally.count("delivery_attempts", count, channel=channel, provider=provider)
    tally.observe("provider_call_seconds", call_seconds, provider=provider)
    outcome_counts: Counter[tuple[str, str]] = Counter()
    sent_by_project: Counter[str] = Counter()
    latencies: dict[str, list[float]] = {}
    now = datetime.now(UTC)
    for outcome in outcomes:
        row = rows[outcome.message_id]
        label = DEFERRED if outcome.status is MessageStatus.READY else outcome.status.value
        outcome_counts[(row.channel, label)] += 1
        if outcome.status is MessageStatus.SENT:
            sent_by_project[row.project_id] += 1
            latencies.setdefault(row.channel, []).append((now - row.created_at).total_seconds())
    for (channel, label), count in outcome_counts.items():
        tally.count("messages", count, channel=channel, provider=provider, outcome=label)
        if label == MessageStatus.RETRYING:
            tally.count("retries", count, channel=channel, provider=provider)
        elif label == MessageStatus.DEAD:
            tally.count("dead_letters", count, channel=channel, provider=provider)
    for channel, values in latencies.items():
        tally.observe("accept_to_provider_seconds", values, channel=channel, provider=provider)
    send(client, tally.write, lambda pipe: throughput.add(pipe, sent_by_project))
    logger.info(
        "delivered a batch of %d through %s",
        len(outcomes),
        provider,
        extra={"provider": provider, "outcomes": Counter(o.status.value for o in outcomes)},
    )
    for outcome in outcomes:
        if outcome.status in GAVE_UP:
            row = rows[outcome.message_id]
            logger.warning(
                "message %s: %s",
                outcome.status.value,
                outcome.error,
                extra={"message_id": outcome.message_id, "project": row.project_id, "provider": provider},
            )


def prepared(client: redis.Redis, rows: Sequence[Row], plan: Plan) -> None:
    """Prepare's outcomes: closed (failed, suppressed, skipped), held (scheduled) and ready."""
    channels = {row.id: row.channel for row in rows}
    outcomes: Counter[tuple[str, str, str]] = Counter()
    for closed in plan.closed:
        outcomes[(channels[closed.message_id], NO_PROVIDER, closed.status.value)] += 1
    for message_id, _ in plan.held:
        outcomes[(channels[message_id], NO_PROVIDER, MessageStatus.SCHEDULED.value)] += 1
    for message_id, provider, _, _ in plan.ready:
        outcomes[(channels[message_id], provider, MessageStatus.READY.value)] += 1
    tally = Tally()
    for (channel, provider, outcome), count in outcomes.items():
        tally.count("messages", count, channel=channel, provider=provider, outcome=outcome)
    tally.flush(client)
