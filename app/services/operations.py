"""Operator actions: requeue dead letters (or unknown messages), pause and resume providers, read their state."""

from __future__ import annotations

from typing import Any

import redis
from sqlalchemy import select, text
from sqlalchemy.orm import Session, sessionmaker

from app.config import Settings
from app.db import enqueue_after_commit
from app.delivery import dispatch, store, waiting_room
from app.delivery.breaker import CircuitBreakers
from app.delivery.pauses import ProviderPauses
from app.delivery.queues import active_providers
from app.enums import EventType, MessageStatus, Priority
from app.errors import abort, uuid_or_404
from app.models import Message

REQUEUE_LIMIT = 10_000


# What a requeue of `unknown` messages says, in each one's event and to whoever asked.
MAY_ARRIVE_TWICE = (
    "requeued while unknown: the provider may have delivered it already, so the recipient may get it twice"
)


def requeue(db: sessionmaker[Session], criteria: dict[str, Any]) -> int:
    """Send dead letters, or `unknown` messages when an operator asks for them explicitly,
    through the pipeline again, with fresh attempts and an event.

    They go back to `accepted`, so prepare checks them again (a suppression added since
    their death still holds) and picks today's provider for their channel. An `unknown`
    message may have reached its recipient: its event carries that warning.
    """
    status = criteria.get("status", MessageStatus.DEAD.value)
    conditions, params = ["m.status = :status"], {"limit": REQUEUE_LIMIT, "status": status}
    for name, condition in (
        ("ids", "m.id = ANY(CAST(:ids AS uuid[]))"),
        ("project", "m.project_id = :project"),
        ("channel", "m.channel = :channel"),
        ("provider", "m.provider = :provider"),
        ("since", "m.created_at >= :since"),
        ("until", "m.created_at < :until"),
    ):
        if name in criteria:
            conditions.append(condition)
            value = criteria[name]
            params[name] = [str(v) for v in value] if name == "ids" else str(value) if name == "channel" else value
    warning = {"warning": MAY_ARRIVE_TWICE} if status == MessageStatus.UNKNOWN else {}
    with db.begin() as session:
        rows = session.execute(
            text(
                f"""
                WITH requeued AS (
                    SELECT m.id, m.attempts FROM messages m WHERE {" AND ".join(conditions)}
                    ORDER BY m.created_at LIMIT :limit FOR UPDATE SKIP LOCKED
                )
                UPDATE messages m
                SET status = 'accepted', attempts = 0, error = NULL, next_attempt_at = NULL, updated_at = now()
                FROM requeued WHERE m.id = requeued.id
                RETURNING m.id::text AS id, m.project_id, m.priority, requeued.attempts
                """
            ),
            params,
        ).all()
        store.record_events(
            session,
            [
                store.NewEvent(
                    row.id,
                    row.project_id,
                    EventType.REQUEUED,
                    {"by": criteria["requested_by"], "previous_attempts": row.attempts, **warning},
                )
                for row in rows
            ],
        )
        for priority, project in {(row.priority, row.project_id) for row in rows}:
            ids = [row.id for row in rows if (row.priority, row.project_id) == (priority, project)]
            for signature in dispatch.prepare(ids, priority, project=project):
                enqueue_after_commit(session, signature)
    return len(rows)


def requeue_answer(db: sessionmaker[Session], criteria: dict[str, Any]) -> dict[str, Any]:
    """What the API and the CLI answer a requeue with: how many, and the warning it deserves."""
    answer: dict[str, Any] = {"requeued": requeue(db, criteria)}
    if criteria.get("status") == MessageStatus.UNKNOWN and answer["requeued"]:
        answer["warning"] = MAY_ARRIVE_TWICE
    return answer


# A circuit breaker's states, in the order an alert reads them: closed is healthy.
BREAKER_STATES = ("closed", "half_open", "open")


def provider_states(settings: Settings, client: redis.Redis) -> list[dict[str, Any]]:
    """Every provider this deployment routes to: where it sits in each channel's failover
    order, its pace, pause and circuit breaker."""
    pauses = {pause.provider: pause for pause in ProviderPauses(client).all()}
    names = active_providers(settings)
    circuits = CircuitBreakers(client, settings.breaker).states(names)
    return [
        {
            "name": name,
            "channels": sorted(c.value for c, chain in settings.chains.items() if name in chain),
            "primary_for": sorted(c.value for c, chain in settings.chains.items() if chain[0] == name),
            "rate_per_sec": settings.rates.get(name),
            "paused": name in pauses,
            "paused_reason": pauses[name].reason if name in pauses else None,
            "paused_seconds_left": pauses[name].seconds_left if name in pauses else None,
            "breaker": circuits[name].state.value,
            "breaker_failures": circuits[name].failures,
            "breaker_seconds_left": circuits[name].seconds_left,
            "recent_answered": circuits[name].recent_answered,
            "recent_failed": circuits[name].recent_failed,
        }
        for name in names
    ]


def known_provider(settings: Settings, provider: str) -> None:
    """404 for a provider this deployment does not route to."""
    if provider not in active_providers(settings):
        abort(404, f"No provider {provider!r} in this deployment.")


def set_pause(settings: Settings, client: redis.Redis, provider: str, pause: dict[str, Any] | None) -> dict:
    """Pause (`pause` given) or resume (`None`) a provider by hand; unknown names are 404.

    Resuming also closes its circuit breaker: whoever resumes it says it works again.
    Either way what waited for the old pause is woken: it leaves now, or waits again for
    the new pause's end, which may come sooner than the old one's.
    """
    known_provider(settings, provider)
    pauses = ProviderPauses(client)
    pauses.resume(provider)  # a hand-set pause replaces whatever was there
    if pause is None:
        CircuitBreakers(client, settings.breaker).reset(provider)
    else:
        pauses.pause(provider, pause["seconds"], pause["reason"])
    waiting_room.release_now(client, provider, list(Priority))
    return next(state for state in provider_states(settings, client) if state["name"] == provider)


def project_of_message(db: sessionmaker[Session], message_id: str) -> str:
    """The project a message belongs to, for operators who hold an id and nothing else."""
    with db() as session:
        project = session.scalar(select(Message.project_id).where(Message.id == uuid_or_404(message_id, "message")))
    if project is None:
        abort(404, f"No message {message_id!r}.")
    return project
