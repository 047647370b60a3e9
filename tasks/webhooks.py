"""Outbound webhooks: signed POSTs of log entries to each project's endpoints.

Each delivery is claimed, POSTed with the database session closed, and settled in one
statement per task, like a message. Its `webhook-id` is the same on every attempt.
Failures wait 5 s, 5 min, 30 min, 2 h, 5 h, 10 h and 10 h between the eight attempts;
short waits ride on a countdown, long ones are parked in PostgreSQL and released by beat.
A 410 disables the endpoint at once; so does a failure streak of five days; either
writes a `webhook_disabled` event, which the project's other endpoints and streams hear.
"""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import requests
from sqlalchemy.orm import Session

from app.config import MAX_COUNTDOWN, Settings, current_settings
from app.crypto import signing_key
from app.db import enqueue_after_commit, publish, session_scope
from app.delivery import dispatch, store, webhook_store
from app.delivery.broker import celery_app
from app.delivery.webhook_store import Attempt, Settled
from app.enums import EventType, WebhookDeliveryStatus
from providers.base import never_connected
from providers.bounded import exchange
from providers.webhook import (
    Network,
    RefusedTarget,
    guarded_session,
    project_networks,
    signed_headers,
    unreachable,
)
from tasks import isolation

# Seconds to wait after each failed attempt; the attempt after the last wait is the last.
RETRY_WAITS = (5, 300, 1800, 7200, 18000, 36000, 36000)
MAX_ATTEMPTS = len(RETRY_WAITS) + 1
DISABLE_AFTER_SECONDS = 5 * 24 * 3600
PARALLEL_POSTS = 8
RESPONSE_KEPT = 500
# Beat leaves due deliveries this long to their countdown task before it dispatches them itself.
RELEASE_GRACE_SECONDS = 10
RELEASE_BATCH = 5000


@celery_app.task(name="tidings.webhooks.deliver")
def deliver_webhooks(ids: list[str]) -> None:
    """POST the due deliveries among `ids` and settle them, through the door (tasks/isolation.py):
    a delivery that cannot be signed, posted or settled fails alone, with the reason."""
    config = current_settings()

    def one_per_task(part: Sequence[str]) -> None:
        for signature in dispatch.webhooks(part):
            publish(signature)

    def fail(delivery_id: str, why: str) -> bool:
        with session_scope(config.database_url) as session:
            return webhook_store.fail_alone(session, delivery_id, store.storable(f"webhooks {why}"))

    with isolation.batch("webhooks", ids, config=config, redispatch=one_per_task, fail_alone=fail) as run:
        if not run.ids:
            return
        with session_scope(config.database_url) as session:
            claimed = webhook_store.claim(session, run.ids)
        run.took(row.id for row in claimed)
        if not claimed:
            return
        with ThreadPoolExecutor(max_workers=min(PARALLEL_POSTS, len(claimed))) as pool:
            made = list(pool.map(lambda row: run.alone(row.id, lambda: post(row, config)), claimed))
        attempts = [attempt for attempt in made if attempt is not None]
        tries = {row.id: row.attempts for row in claimed}
        now = datetime.now(UTC)
        settled = {a.delivery_id: settle(a, tries[a.delivery_id], config, now) for a in attempts}

        def record(part: Sequence[str]) -> None:
            """Write the attempts of `part` in one transaction (halved on a poison)."""
            wanted = set(part)
            mine = [a for a in attempts if a.delivery_id in wanted]
            with session_scope(config.database_url) as session:
                webhook_store.record_attempts(session, mine, [settled[a.delivery_id] for a in mine])
                disabled = webhook_store.settle_endpoints(session, mine, DISABLE_AFTER_SECONDS)
                store.record_events(session, [disabled_event(row) for row in disabled if row.disabled])
                for countdown, group in short_waits([settled[a.delivery_id] for a in mine]):
                    for signature in dispatch.webhooks(group, countdown):
                        enqueue_after_commit(session, signature)

        run.in_halves(record, among=[a.delivery_id for a in attempts])


@celery_app.task(name="tidings.webhooks.release")
def release_webhooks() -> int:
    """Dispatch deliveries whose wait is over and reclaim those a dead worker held."""
    with session_scope(current_settings().database_url) as session:
        return release(session)


def release(session: Session) -> int:
    """Release what is due, in tasks per project: one project's poison never shares a task
    with another's deliveries, so it can neither roll them back nor hold them up."""
    due = webhook_store.release_due(session, RELEASE_GRACE_SECONDS, current_settings().claim_timeout, RELEASE_BATCH)
    by_project: dict[str, list[str]] = defaultdict(list)
    for row in due:
        by_project[row.project_id].append(row.id)
    for ids in by_project.values():
        for signature in dispatch.webhooks(ids):
            enqueue_after_commit(session, signature)
    return len(due)


_local = threading.local()


def http_session(allowed: tuple[Network, ...]) -> requests.Session:
    """One guarded session per thread (requests sessions are not meant to be shared) and
    per set of allowed networks."""
    sessions = _local.__dict__.setdefault("sessions", {})
    if allowed not in sessions:
        sessions[allowed] = guarded_session(allowed)
    return sessions[allowed]


def post(row: webhook_store.Claimed, config: Settings) -> Attempt:
    """POST one delivery, signed with the current secret and, during a rotation, the previous one.

    Bounded like every provider call (providers/bounded.py): WEBHOOK_TIMEOUT for the whole
    exchange and an excerpt of at most the answer's cap, so a hostile receiver costs one
    thread that long and no more.
    """
    body = json.dumps(row.events if row.batch else row.events[0], separators=(",", ":"), ensure_ascii=False)
    keys = [signing_key(secret) for secret in (row.secret, row.previous_secret) if secret]
    headers = signed_headers(webhook_store.webhook_id(row.id), body, keys)
    started = time.monotonic()

    def done(**result: object) -> Attempt:
        elapsed = int((time.monotonic() - started) * 1000)
        return Attempt(row.id, row.endpoint_id, elapsed, **result)  # type: ignore[arg-type]

    allowed = config.webhook_allowed_networks + project_networks(row.allowed_networks, f"delivery {row.id}")
    try:
        answer = exchange(
            http_session(allowed),
            "POST",
            row.url,
            config.webhook_timeout,
            data=body.encode(),
            headers=headers,
        )
    except RefusedTarget as error:
        return done(error=unreachable(row.url, error))
    except requests.RequestException as error:
        if never_connected(error):  # said as for a refused target, so the two cannot be told apart
            return done(error=unreachable(row.url, error))
        return done(error=f"{type(error).__name__}: {error}")
    failure = None if 200 <= answer.status_code < 300 else f"HTTP {answer.status_code}"
    return done(status_code=answer.status_code, response=answer.excerpt(RESPONSE_KEPT), error=failure)


def settle(attempt: Attempt, attempts_made: int, config: Settings, now: datetime) -> Settled:
    """A delivery's next state; retries of one run share `now`, so one task serves each wait."""
    if attempt.ok:
        return Settled(attempt.delivery_id, WebhookDeliveryStatus.SUCCEEDED)
    if attempt.gone or attempts_made >= MAX_ATTEMPTS:
        return Settled(attempt.delivery_id, WebhookDeliveryStatus.FAILED)
    wait = RETRY_WAITS[attempts_made - 1] * config.retry_delay_scale
    return Settled(attempt.delivery_id, WebhookDeliveryStatus.RETRYING, now + timedelta(seconds=wait))


def short_waits(settled: Sequence[Settled]) -> list[tuple[float, list[str]]]:
    """Retries due within a countdown's reach, grouped by their time; longer ones wait for beat."""
    now = datetime.now(UTC)
    groups: dict[datetime, list[str]] = defaultdict(list)
    for item in settled:
        if item.next_attempt_at is not None and (item.next_attempt_at - now).total_seconds() <= MAX_COUNTDOWN:
            groups[item.next_attempt_at].append(item.delivery_id)
    return [(max((at - now).total_seconds(), 0.0), ids) for at, ids in groups.items()]


def disabled_event(row: webhook_store.EndpointStreak) -> store.NewEvent:
    data = {"endpoint_id": row.id, "url": row.url, "reason": row.disabled_reason}
    return store.NewEvent(None, row.project_id, EventType.WEBHOOK_DISABLED, data)
