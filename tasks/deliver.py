"""Deliver: wait out pauses and the provider's pace, claim, send in the adapter's batch
size, and finalise every message of the batch in one statement."""

from __future__ import annotations

import logging
import time
import uuid
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from sqlalchemy import Row

from app.config import MAX_COUNTDOWN, Settings
from app.counters import increment
from app.db import enqueue_after_commit, session_scope
from app.enums import Channel, EventType, MessageStatus, Priority
from app.redis_client import redis_for
from providers.base import Outbound, Outcome, Provider, ProviderError, SendResult
from tasks import dispatch, instrument, store
from tasks.adapters import provider_instance
from tasks.celery_app import celery_app, settings
from tasks.pacing import ProviderPacer
from tasks.pauses import ProviderPauses
from tasks.retry import backoff
from tasks.shutdown import stopping

logger = logging.getLogger(__name__)


@celery_app.task(name="tidings.deliver")
def deliver(provider: str, ids: list[str], priority: str = Priority.TRANSACTIONAL) -> None:
    """Send the ready messages among `ids` through `provider`.

    A paused provider or an exhausted pace sends the messages back to the broker with a
    countdown; neither uses an attempt. The database session is closed during the
    provider call, so a slow provider holds no connection and no row lock.
    """
    config = settings()
    client = redis_for(config.redis_url)
    paused_for = ProviderPauses(client).seconds_left(provider)
    if paused_for is not None:
        postpone(config, provider, priority, ids, paused_for)
        increment(client, "pause_postponed", len(ids), provider=provider)
        return
    rate = config.rates.get(provider)
    if rate is not None:
        grant = ProviderPacer(client).acquire(provider, rate, len(ids), uuid.uuid4().hex)
        if grant.granted < len(ids):
            postpone(config, provider, priority, ids[grant.granted :], grant.wait_seconds)
            increment(client, "pacing_postponed", len(ids) - grant.granted, provider=provider)
        ids = ids[: grant.granted]
    if not ids:
        return
    with session_scope(config.database_url) as session:
        claimed = store.claim(session, provider, ids)
    if not claimed:
        return
    run = send_all(provider_instance(provider), claimed)
    if run.pause is not None:
        seconds, cause, reason = run.pause
        ProviderPauses(client).pause(provider, seconds, reason)
        increment(client, "provider_pauses", provider=provider, cause=cause)
    outcomes = decide_all(config, run, claimed)
    with session_scope(config.database_url) as session:
        store.finalise(session, outcomes)
        store.record_events(session, events_for(outcomes, claimed))
        for countdown, group in waiting_groups(outcomes):
            for signature in dispatch.deliver(provider, priority, [o.message_id for o in group], countdown):
                enqueue_after_commit(session, signature)
    instrument.delivered(client, provider, claimed, outcomes, run.call_seconds)


def postpone(config: Settings, provider: str, priority: str, ids: Sequence[str], wait: float) -> None:
    """Put `ids` back on the broker after `wait`, and tell the sweeper not to expect them sooner."""
    countdown = min(max(wait, 0.05), MAX_COUNTDOWN)
    with session_scope(config.database_url) as session:
        store.expect_ready_by(session, ids, countdown)
        for signature in dispatch.deliver(provider, priority, ids, countdown):
            enqueue_after_commit(session, signature)


# Outcomes that concern the provider rather than the message: stop, pause, keep the attempt.
PROVIDER_WIDE = (Outcome.RATE_LIMITED, Outcome.CONFIGURATION)
# A misconfigured account needs a person; meanwhile the provider is retried this often.
CONFIGURATION_PAUSE_SECONDS = 300


@dataclass
class SendRun:
    """What the provider said: a result per message tried, what a pause stopped, and the pause."""

    results: list[SendResult] = field(default_factory=list)
    unsent: list[Row] = field(default_factory=list)
    pause: tuple[float, str, str] | None = None  # seconds, cause, reason
    stopped: bool = False  # the worker is shutting down: unsent messages go back at once
    call_seconds: list[float] = field(default_factory=list)  # one per provider call


def send_all(adapter: Provider, claimed: Sequence[Row]) -> SendRun:
    run = SendRun()
    for start in range(0, len(claimed), adapter.max_batch):
        chunk = claimed[start : start + adapter.max_batch]
        run.stopped = run.stopped or stopping()
        if run.pause is not None or run.stopped:
            run.unsent.extend(chunk)
            continue
        started = time.monotonic()
        results = send_chunk(adapter, chunk)
        run.call_seconds.append(time.monotonic() - started)
        run.results.extend(results)
        stopper = next((r for r in results if r.outcome in PROVIDER_WIDE), None)
        if stopper is not None:
            run.pause = pause_for(stopper)
    return run


def send_chunk(adapter: Provider, chunk: Sequence[Row]) -> list[SendResult]:
    """Send one provider batch; a failure of the whole call becomes a result per message."""
    try:
        return adapter.send([outbound(row) for row in chunk])
    except ProviderError as error:
        return [SendResult.from_error(row.id, error) for row in chunk]
    except Exception as error:
        logger.exception("provider %s raised unexpectedly", adapter.name)
        return [SendResult(row.id, Outcome.TRANSIENT, error=f"{type(error).__name__}: {error}") for row in chunk]


def pause_for(result: SendResult) -> tuple[float, str, str]:
    if result.outcome is Outcome.RATE_LIMITED:
        return result.retry_after or 1.0, "rate_limited", f"provider asked to wait: {result.error}"
    return CONFIGURATION_PAUSE_SECONDS, "configuration", f"configuration error: {result.error}"


def outbound(row: Row) -> Outbound:
    return Outbound(
        message_id=row.id,
        channel=row.channel,
        to=row.to_address,
        subject=row.subject,
        text=row.text,
        html=row.html,
        metadata=row.metadata or {},
    )


def decide_all(config: Settings, run: SendRun, claimed: Sequence[Row]) -> list[store.Finalised]:
    """Every claimed message's next status; a provider-wide stop gives the attempt back."""
    by_id = {row.id: row for row in claimed}
    ready_at = datetime.now(UTC) if run.stopped else None
    if run.pause is not None:
        ready_at = datetime.now(UTC) + timedelta(seconds=min(run.pause[0], MAX_COUNTDOWN))
    outcomes = [
        decide(result, by_id[result.message_id], config, ready_at)
        for result in run.results
        if result.message_id in by_id
    ]
    outcomes += [
        store.Finalised(row.id, MessageStatus.READY, next_attempt_at=ready_at, refund_attempt=True)
        for row in run.unsent
    ]
    return align_short_retries(outcomes)


def decide(result: SendResult, row: Row, config: Settings, ready_at: datetime | None) -> store.Finalised:
    """Turn a provider's answer into the message's next status."""
    if result.outcome is Outcome.SENT:
        return store.Finalised(row.id, MessageStatus.SENT, provider_message_id=result.provider_message_id)
    if result.outcome is Outcome.PERMANENT:
        return store.Finalised(row.id, MessageStatus.FAILED, error=result.error)
    if result.outcome in PROVIDER_WIDE:
        return store.Finalised(row.id, MessageStatus.READY, next_attempt_at=ready_at, refund_attempt=True)
    if row.attempts >= config.max_attempts[Channel(row.channel)]:
        return store.Finalised(row.id, MessageStatus.DEAD, error=result.error)
    wait = timedelta(seconds=backoff(row.attempts, config.retry_delay_scale))
    return store.Finalised(row.id, MessageStatus.RETRYING, error=result.error, next_attempt_at=datetime.now(UTC) + wait)


def align_short_retries(outcomes: list[store.Finalised]) -> list[store.Finalised]:
    """Short retries of one batch share the latest of their times, so one task serves them.

    Jitter then spreads batches rather than single messages; long waits stay individual,
    parked in PostgreSQL for `release_due`.
    """
    horizon = datetime.now(UTC) + timedelta(seconds=MAX_COUNTDOWN)
    short = [o for o in outcomes if o.status is MessageStatus.RETRYING and o.next_attempt_at <= horizon]
    if not short:
        return outcomes
    latest = max(o.next_attempt_at for o in short)
    short_ids = {o.message_id for o in short}
    return [replace(o, next_attempt_at=latest) if o.message_id in short_ids else o for o in outcomes]


def waiting_groups(outcomes: Sequence[store.Finalised]) -> list[tuple[float, list[store.Finalised]]]:
    """The messages to re-publish now with a countdown: rate-limited ones and short retries."""
    now = datetime.now(UTC)
    groups: dict[datetime, list[store.Finalised]] = defaultdict(list)
    for outcome in outcomes:
        waits = outcome.status in (MessageStatus.READY, MessageStatus.RETRYING) and outcome.next_attempt_at
        if waits and (outcome.next_attempt_at - now).total_seconds() <= MAX_COUNTDOWN:
            groups[outcome.next_attempt_at].append(outcome)
    return [(max((at - now).total_seconds(), 0.0), group) for at, group in groups.items()]


EVENT_FOR_STATUS: Mapping[MessageStatus, EventType] = {
    MessageStatus.FAILED: EventType.FAILED,
    MessageStatus.RETRYING: EventType.RETRYING,
    MessageStatus.DEAD: EventType.DEAD,
}


def events_for(outcomes: Sequence[store.Finalised], claimed: Sequence[Row]) -> list[store.NewEvent]:
    """Events for the outcomes the message row cannot tell on its own (sent is derived)."""
    rows = {row.id: row for row in claimed}
    events = []
    for outcome in outcomes:
        kind = EVENT_FOR_STATUS.get(outcome.status)
        if kind is None:
            continue
        row = rows[outcome.message_id]
        data: dict = {"attempt": row.attempts, "reason": outcome.error}
        if outcome.next_attempt_at is not None:
            data["next_attempt_at"] = outcome.next_attempt_at.isoformat()
        events.append(store.NewEvent(outcome.message_id, row.project_id, kind, data))
    return events
