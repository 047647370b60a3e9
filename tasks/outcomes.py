"""What a provider's answers mean for each claimed message: its next status and its event.

Pure functions over the results of a deliver run, so the rules can be read (and tested)
apart from the task that calls the provider and writes the outcomes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from app.config import MAX_COUNTDOWN, Settings
from app.delivery import store
from app.delivery.retry import backoff
from app.enums import Channel, EventType, MessageStatus
from providers.base import Outcome, SendResult

# Outcomes that concern the provider rather than the message: stop, pause, keep the attempt.
PROVIDER_WIDE = (Outcome.RATE_LIMITED, Outcome.CONFIGURATION)


@dataclass
class SendRun:
    """What one account of a provider said: a result per message tried, what was not tried,
    and why not: a pause it asked for (seconds, cause, reason), or one already running."""

    results: list[SendResult] = field(default_factory=list)
    unsent: list[store.Claimed] = field(default_factory=list)
    pause: tuple[float, str, str] | None = None
    paused_for: float | None = None
    stopped: bool = False  # the worker is shutting down: untried messages go back at once
    call_seconds: list[float] = field(default_factory=list)  # one per provider call

    @property
    def wait(self) -> float | None:
        """How long the untried messages wait before they go back to the provider."""
        if self.pause is not None:
            return self.pause[0]
        return 0.0 if self.stopped and self.paused_for is None else self.paused_for

    def tally(self) -> tuple[int, int]:
        """For the circuit breaker: messages the provider answered on their merits (sent or
        refused), and transient failures. Pauses say nothing about the provider's health."""
        ok = sum(r.outcome in (Outcome.SENT, Outcome.PERMANENT) for r in self.results)
        return ok, sum(r.outcome is Outcome.TRANSIENT for r in self.results)


def decide_all(config: Settings, runs: Sequence[tuple[Sequence[store.Claimed], SendRun]]) -> list[store.Finalised]:
    """Every claimed message's next status; a provider-wide stop gives the attempt back."""
    outcomes: list[store.Finalised] = []
    for rows, run in runs:
        by_id = {row.id: row for row in rows}
        ready_at = None
        if run.wait is not None:
            ready_at = datetime.now(UTC) + timedelta(seconds=min(run.wait, MAX_COUNTDOWN))
        outcomes += [
            decide(result, by_id[result.message_id], config, ready_at)
            for result in run.results
            if result.message_id in by_id
        ]
        outcomes += [
            store.Finalised(row.id, MessageStatus.READY, next_attempt_at=ready_at, refund_attempt=True)
            for row in run.unsent
        ]
    return align_short_retries(outcomes)


def decide(result: SendResult, row: store.Claimed, config: Settings, ready_at: datetime | None) -> store.Finalised:
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


# Why a repeated call's message that neither went nor was refused stays `unknown`.
REPEAT_UNSETTLED = "sent again as the same call after its worker died, and not settled by the answer"


def settle_repeat(outcomes: Sequence[store.Finalised]) -> list[store.Finalised]:
    """The fates of an abandoned claim's calls made again (tasks/resend.py): sent and
    refused stand; anything else becomes `unknown`, because the first call may have gone
    through and only the same call, not a retry in another grouping, is de-duplicated."""
    return [
        o
        if o.status in (MessageStatus.SENT, MessageStatus.FAILED)
        else store.Finalised(o.message_id, MessageStatus.UNKNOWN, error=o.error or REPEAT_UNSETTLED)
        for o in outcomes
    ]


def align_short_retries(outcomes: list[store.Finalised]) -> list[store.Finalised]:
    """Short retries of one batch share the latest of their times, so one task serves them.

    Jitter then spreads batches rather than single messages; long waits stay individual,
    parked in PostgreSQL for `release_due`.
    """
    horizon = datetime.now(UTC) + timedelta(seconds=MAX_COUNTDOWN)
    short = {
        o.message_id: o.next_attempt_at
        for o in outcomes
        if o.status is MessageStatus.RETRYING and o.next_attempt_at is not None and o.next_attempt_at <= horizon
    }
    if not short:
        return outcomes
    latest = max(short.values())
    return [replace(o, next_attempt_at=latest) if o.message_id in short else o for o in outcomes]


def waiting_groups(outcomes: Sequence[store.Finalised]) -> list[tuple[float, list[store.Finalised]]]:
    """The messages to re-publish now with a countdown: rate-limited ones and short retries."""
    now = datetime.now(UTC)
    groups: dict[datetime, list[store.Finalised]] = defaultdict(list)
    for outcome in outcomes:
        at = outcome.next_attempt_at if outcome.status in (MessageStatus.READY, MessageStatus.RETRYING) else None
        if at is not None and (at - now).total_seconds() <= MAX_COUNTDOWN:
            groups[at].append(outcome)
    return [(max((at - now).total_seconds(), 0.0), group) for at, group in groups.items()]


EVENT_FOR_STATUS: Mapping[MessageStatus, EventType] = {
    MessageStatus.FAILED: EventType.FAILED,
    MessageStatus.RETRYING: EventType.RETRYING,
    MessageStatus.DEAD: EventType.DEAD,
    MessageStatus.UNKNOWN: EventType.UNKNOWN,
}


def events_for(
    outcomes: Sequence[store.Finalised],
    rows: Mapping[str, store.Claimed],
    extra: Mapping[str, Mapping[str, Any]],
) -> list[store.NewEvent]:
    """Events for the outcomes the message row cannot tell on its own (sent is derived), each
    with the message's `extra`: the follow-up a failure led to (suppression, token removal),
    and for a push message to several devices how many of them stand where."""
    events = []
    for outcome in outcomes:
        kind = EVENT_FOR_STATUS.get(outcome.status)
        if kind is None:
            continue
        row = rows[outcome.message_id]
        data: dict[str, Any] = {"attempt": row.attempts, "reason": outcome.error}
        if outcome.next_attempt_at is not None:
            data["next_attempt_at"] = outcome.next_attempt_at.isoformat()
        data.update(extra.get(outcome.message_id, {}))
        events.append(store.NewEvent(outcome.message_id, row.project_id, kind, data))
    return events
