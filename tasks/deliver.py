"""Deliver: claim, send through the provider adapter in its batch size, finalise."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from functools import cache

from sqlalchemy import Row
from sqlalchemy.orm import Session

from app.db import enqueue_after_commit, session_scope
from app.enums import EventType, MessageStatus
from providers import registry
from providers.base import Outbound, Outcome, Provider, ProviderError, RateLimited, SendResult
from tasks import dispatch, store
from tasks.celery_app import celery_app, settings
from tasks.retry import backoff

logger = logging.getLogger(__name__)

# Retry waits up to this long ride on a Celery countdown; longer ones are parked in
# PostgreSQL and released by `release_due`, so no countdown nears the visibility timeout.
MAX_COUNTDOWN = 15 * 60


@cache
def provider_instance(name: str) -> Provider:
    """One adapter per provider and process, so its HTTP connections are reused."""
    return registry.build(name, settings().environ)


@celery_app.task(name="tidings.deliver")
def deliver(provider: str, ids: list[str]) -> None:
    """Claim, send through the adapter in its batch size, and finalise in one statement.

    The database session is closed during the provider call: a slow provider must not
    hold connections or row locks.
    """
    config = settings()
    with session_scope(config.database_url) as session:
        claimed = store.claim(session, provider, ids)
    if not claimed:
        return
    adapter = provider_instance(provider)
    results: list[SendResult] = []
    rate_limited: list[Row] = []
    retry_after = 0.0
    for start in range(0, len(claimed), adapter.max_batch):
        chunk = claimed[start : start + adapter.max_batch]
        if rate_limited:
            rate_limited.extend(chunk)
            continue
        try:
            results.extend(send_chunk(adapter, chunk))
        except RateLimited as error:
            rate_limited.extend(chunk)
            retry_after = error.retry_after
    outcomes = [decide(result, row, config.max_attempts) for result, row in zip_rows(results, claimed)]
    outcomes += [store.Finalised(row.id, MessageStatus.READY, refund_attempt=True) for row in rate_limited]
    with session_scope(config.database_url) as session:
        store.finalise(session, outcomes)
        store.record_events(session, events_for(outcomes, claimed))
        republish(session, provider, outcomes, claimed, retry_after)


def send_chunk(adapter: Provider, chunk: Sequence[Row]) -> list[SendResult]:
    """Send one provider batch; a failure of the whole call becomes a result per message."""
    try:
        return adapter.send([outbound(row) for row in chunk])
    except RateLimited:
        raise
    except ProviderError as error:
        outcome = Outcome.TRANSIENT if error.retryable else Outcome.PERMANENT
        return [SendResult(row.id, outcome, error=str(error)) for row in chunk]
    except Exception as error:
        logger.exception("provider %s raised unexpectedly", adapter.name)
        return [
            SendResult(row.id, Outcome.TRANSIENT, error=f"{type(error).__name__}: {error}") for row in chunk
        ]


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


def zip_rows(results: Sequence[SendResult], claimed: Sequence[Row]) -> list[tuple[SendResult, Row]]:
    by_id = {row.id: row for row in claimed}
    return [(result, by_id[result.message_id]) for result in results if result.message_id in by_id]


def decide(result: SendResult, row: Row, max_attempts: int) -> store.Finalised:
    """Turn a provider's answer into the message's next status."""
    if result.outcome is Outcome.SENT:
        return store.Finalised(row.id, MessageStatus.SENT, provider_message_id=result.provider_message_id)
    if result.outcome is Outcome.PERMANENT:
        return store.Finalised(row.id, MessageStatus.FAILED, error=result.error)
    if row.attempts >= max_attempts:
        return store.Finalised(row.id, MessageStatus.DEAD, error=result.error)
    wait = timedelta(seconds=backoff(row.attempts))
    return store.Finalised(
        row.id, MessageStatus.RETRYING, error=result.error, next_attempt_at=datetime.now(UTC) + wait
    )


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
        data: dict = {"attempt": rows[outcome.message_id].attempts, "reason": outcome.error}
        if outcome.next_attempt_at is not None:
            data["next_attempt_at"] = outcome.next_attempt_at.isoformat()
        events.append(store.NewEvent(outcome.message_id, rows[outcome.message_id].project_id, kind, data))
    return events


def republish(
    session: Session,
    provider: str,
    outcomes: Sequence[store.Finalised],
    claimed: Sequence[Row],
    retry_after: float,
) -> None:
    """Queue the next deliver for messages that wait briefly: rate-limited and short retries."""
    priority = {row.id: row.priority for row in claimed}
    now = datetime.now(UTC)
    waiting: dict[str, list[store.Finalised]] = defaultdict(list)
    for outcome in outcomes:
        if outcome.status is MessageStatus.READY or (
            outcome.status is MessageStatus.RETRYING
            and (outcome.next_attempt_at - now).total_seconds() <= MAX_COUNTDOWN
        ):
            waiting[priority[outcome.message_id]].append(outcome)
    for lane, group in waiting.items():
        countdown = max(
            retry_after if o.status is MessageStatus.READY else (o.next_attempt_at - now).total_seconds()
            for o in group
        )
        for signature in dispatch.deliver(provider, lane, [o.message_id for o in group], countdown):
            enqueue_after_commit(session, signature)
