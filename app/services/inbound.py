"""Provider status webhooks: verify, then apply each new event to its message.

For a request of any size, a fixed number of statements: one INSERT of the events' keys
into `inbound_receipts` (a key already there is a replay, and is skipped), one query for
the messages, one UPDATE of their statuses, one suppression statement, one event insert
(through `app.delivery.store.record_events`, the pipeline's one writer of events). It is all one
transaction: a request that fails half-way leaves no receipt, so the provider's retry is
applied in full.

A verified event that names no message of ours (sent before Tidings, or erased) is
acknowledged and counted, not an error: the provider would retry it forever.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import redis
from sqlalchemy import Row, text
from sqlalchemy.orm import Session, sessionmaker

from app.config import Settings
from app.delivery import store
from app.delivery.adapters import own_env, own_scope
from app.enums import Channel, EventType, MessageStatus, SuppressionReason
from app.errors import abort
from app.observability.counters import increment
from app.services.suppressions import NewSuppression, suppress_all
from app.vault import SealBroken
from providers.inbound import registry as inbound
from providers.inbound.base import HARD, InboundEvent, Kind, Receiver, Refused, WebhookRequest

# Later news wins, never earlier: a delivery report arriving after a bounce changes nothing.
STATUS_ORDER = [
    MessageStatus.UNKNOWN,
    MessageStatus.SENT,
    MessageStatus.DELIVERED,
    MessageStatus.BOUNCED,
    MessageStatus.COMPLAINED,
]
STATUS_FOR: dict[Kind, MessageStatus] = {
    Kind.DELIVERED: MessageStatus.DELIVERED,
    Kind.BOUNCED: MessageStatus.BOUNCED,
    Kind.COMPLAINED: MessageStatus.COMPLAINED,
}


@dataclass(frozen=True)
class Received:
    """What became of a request's events: applied (by what they became), replays, strangers."""

    applied: Counter[str]
    duplicates: int
    unmatched: int

    def answer(self, received: int) -> dict[str, int]:
        applied = sum(self.applied.values())
        return {"received": received, "applied": applied, "duplicates": self.duplicates, "unmatched": self.unmatched}


def receive(
    db: sessionmaker[Session],
    settings: Settings,
    client: redis.Redis,
    provider: str,
    project_id: str | None,
    request: WebhookRequest,
) -> dict[str, int]:
    """Verify a provider's webhook and apply its events; a project's own account has its own URL."""
    receiver = receiver_for(db, settings, provider, project_id)
    try:
        events = receiver.receive(request)
    except Refused as refusal:
        increment(client, "inbound_events", provider=provider, outcome=f"refused_{refusal.status}")
        abort(refusal.status, f"{provider} webhook refused: {refusal}")
    source = provider if project_id is None else own_scope(provider, project_id)
    return record(db, client, provider, source, project_id, events).answer(len(events))


def record(
    db: sessionmaker[Session],
    client: redis.Redis,
    provider: str,
    source: str,
    project_id: str | None,
    events: Sequence[InboundEvent],
) -> Received:
    """Apply verified events in one transaction, and count them: what a status webhook does
    once verified, and what a provider's reports given with its answer do (tasks/reports.py)."""
    with db.begin() as session:
        received = apply(session, provider, source, project_id, events)
    outcomes = received.applied + Counter(duplicate=received.duplicates, unmatched=received.unmatched)
    for outcome, count in outcomes.items():
        increment(client, "inbound_events", count, provider=provider, outcome=outcome)
    return received


def receiver_for(db: sessionmaker[Session], settings: Settings, provider: str, project_id: str | None) -> Receiver:
    """The deployment's receiver, or the one of a project's own account; 404 when not set up."""
    env = settings.environ if project_id is None else own_account_env(db, settings, provider, project_id)
    try:
        receiver = inbound.build(provider, env) if env is not None else None
    except ValueError:
        receiver = None
    if receiver is None:
        where = f"project {project_id!r}" if project_id else "this deployment"
        abort(404, f"No {provider} status webhooks are set up for {where}.")
    return receiver


def own_account_env(
    db: sessionmaker[Session], settings: Settings, provider: str, project_id: str
) -> Mapping[str, str] | None:
    """What a project's own account is verified with; None when it has no readable one."""
    with db() as session:
        accounts = store.project_accounts(session, provider, [project_id])
    try:
        return own_env(settings, provider, accounts[0].sealed) if accounts else None
    except SealBroken:
        return None


def apply(
    session: Session, provider: str, source: str, project_id: str | None, events: Sequence[InboundEvent]
) -> Received:
    """Apply the events not seen before."""
    unique = list({event.key: event for event in events}.values())
    fresh = new_keys(session, source, [event.key for event in unique])
    todo = [event for event in unique if event.key in fresh]
    found = find_messages(session, provider, project_id, todo)
    matched = [(event, found[index]) for index, event in enumerate(todo) if index in found]
    set_statuses(session, matched)
    suppressed = suppress(session, matched)
    store.record_events(
        session,
        [
            store.NewEvent(row.id, row.project_id, EventType(event.kind.value), event_data(provider, event, suppressed))
            for event, row in matched
        ],
    )
    return Received(
        applied=Counter(event.kind.value for event, _ in matched),
        duplicates=len(events) - len(todo),
        unmatched=len(todo) - len(matched),
    )


def new_keys(session: Session, source: str, keys: list[str]) -> set[str]:
    """Record the keys; those already recorded are replays."""
    if not keys:
        return set()
    return set(
        session.execute(
            text(
                """
                INSERT INTO inbound_receipts (source, key)
                SELECT :source, key FROM unnest(CAST(:keys AS text[])) AS key
                ON CONFLICT DO NOTHING
                RETURNING key
                """
            ),
            {"source": source, "keys": keys},
        ).scalars()
    )


def find_messages(
    session: Session, provider: str, project_id: str | None, events: Sequence[InboundEvent]
) -> dict[int, Row]:
    """Each event's message (by its index): by our id where the provider echoed it, else by
    the provider's id (and recipient); only messages this provider sent, of this project
    when the webhook came to a project's own URL."""
    if not events:
        return {}
    rows = session.execute(
        text(
            """
            WITH e AS (
                SELECT * FROM unnest(CAST(:ns AS int[]), CAST(:ids AS uuid[]), CAST(:pmids AS text[]),
                                     CAST(:recipients AS text[])) AS e(n, message_id, pmid, recipient)
            )
            SELECT e.n, m.id::text AS id, m.project_id, m.channel, m.to_address
            FROM e JOIN messages m ON m.id = e.message_id
            WHERE m.provider = :provider AND (CAST(:project AS text) IS NULL OR m.project_id = :project)
            UNION ALL
            SELECT e.n, m.id::text, m.project_id, m.channel, m.to_address
            FROM e JOIN messages m ON m.provider = :provider AND m.provider_message_id = e.pmid
            WHERE e.message_id IS NULL AND (e.recipient IS NULL OR m.to_address = e.recipient)
              AND (CAST(:project AS text) IS NULL OR m.project_id = :project)
            """
        ),
        {
            "ns": list(range(len(events))),
            "ids": [our_id(event) for event in events],
            "pmids": [event.provider_message_id for event in events],
            "recipients": [event.recipient for event in events],
            "provider": provider,
            "project": project_id,
        },
    ).all()
    return {row.n: row for row in rows}


def our_id(event: InboundEvent) -> str | None:
    """The echoed id if it is a UUID at all (it comes from outside; a malformed one matches nothing)."""
    try:
        return str(uuid.UUID(event.message_id)) if event.message_id else None
    except ValueError:
        return None


def set_statuses(session: Session, matched: Sequence[tuple[InboundEvent, Row]]) -> None:
    """Delivered, bounced, complained: each message takes the latest of the news about it."""
    rank = {status: n for n, status in enumerate(STATUS_ORDER)}
    latest: dict[str, MessageStatus] = {}
    for event, row in matched:
        status = STATUS_FOR.get(event.kind)
        if status is not None and rank[status] > rank.get(latest.get(row.id), -1):
            latest[row.id] = status
    if not latest:
        return
    session.execute(
        text(
            """
            UPDATE messages m SET status = v.status, updated_at = now()
            FROM unnest(CAST(:ids AS uuid[]), CAST(:statuses AS text[])) AS v(id, status)
            WHERE m.id = v.id
              AND array_position(CAST(:order AS text[]), CAST(m.status AS text))
                  < array_position(CAST(:order AS text[]), v.status)
            """
        ),
        {
            "ids": list(latest),
            "statuses": [status.value for status in latest.values()],
            "order": [status.value for status in STATUS_ORDER],
        },
    )


def suppression_reason(event: InboundEvent) -> SuppressionReason | None:
    if event.kind is Kind.BOUNCED and event.bounce == HARD:
        return SuppressionReason.BOUNCE
    if event.kind is Kind.COMPLAINED:
        return SuppressionReason.COMPLAINT
    if event.kind is Kind.UNSUBSCRIBED:
        return SuppressionReason.UNSUBSCRIBE
    return None


def suppress(session: Session, matched: Sequence[tuple[InboundEvent, Row]]) -> set[str]:
    """Hard bounces, complaints and unsubscribes suppress the message's address; the event
    keys that led to a suppression."""
    entries = {}
    for event, row in matched:
        reason = suppression_reason(event)
        if reason is not None and row.to_address:  # an erased message has no address left
            entries[event.key] = NewSuppression(row.project_id, Channel(row.channel), row.to_address, reason)
    suppress_all(session, entries.values())
    return set(entries)


def event_data(provider: str, event: InboundEvent, suppressed: set[str]) -> dict[str, Any]:
    data: dict[str, Any] = {"provider": provider, "provider_event": event.name}
    optional = {
        "provider_message_id": event.provider_message_id,
        "bounce": event.bounce,
        "occurred_at": event.occurred_at,
        "suppressed": suppression_reason(event).value if event.key in suppressed else None,
    }
    data.update({key: value for key, value in optional.items() if value is not None})
    data["raw"] = event.raw
    return data
