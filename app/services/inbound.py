"""Provider status webhooks: verify, then apply each new event to its message.

For a request of any size, a fixed number of statements: one INSERT of the events' keys
into `inbound_receipts` (a key already there is a replay, and is skipped), one query for
the messages, one UPDATE of their statuses, one suppression statement, one event insert
(through `app.delivery.store.record_events`, the pipeline's one writer of events). It is all one
transaction: a request that fails half-way leaves no receipt, so the provider's retry is
applied in full.

A verified event that names no message of ours (sent before Tidings, or erased) is
acknowledged and counted, not an error: the provider would retry it forever.

A message is `unknown` when its worker stopped during the provider call: the provider may
have taken it, and we never read its answer, nor its id for the message. The provider's own
report settles it: found by our id, which every adapter sends along, it moves the message on
(a failure too, which a `sent` message ignores), records the provider's id, and its event
says `resolved: unknown`. A message still `sending` is settled alike: its worker may be
dead with the sweeper yet to notice, and the report, applied once, would not come again.
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
    MessageStatus.SENDING,
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
# Where we do not know whether the provider took the message: the worker stopped during the
# call (`unknown`), or may have (`sending`). Only the provider's report can settle these.
UNSETTLED = (MessageStatus.SENDING, MessageStatus.UNKNOWN)
# A provider's failure report moves only an unsettled message: it says the provider took the
# message and did not send it. A `sent` one keeps its status, as it always has, the failure
# on its timeline. Any other news about the same message outranks it.
FAILED_IF_UNSETTLED = {Kind.FAILED: MessageStatus.FAILED}

# Whether the news `v.status` moves message `m` on: only forward in STATUS_ORDER, or a failure
# report for an unsettled message. Read in the UPDATE itself, so a message another request
# (or its worker's finalise) moved meanwhile is judged as it now stands.
MOVES = """v.status IS NOT NULL
              AND (array_position(CAST(:order AS text[]), CAST(m.status AS text))
                   < array_position(CAST(:order AS text[]), v.status)
                   OR (m.status = ANY(CAST(:unsettled AS text[])) AND v.status = 'failed'))"""


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
    update_messages(session, matched)
    suppressed = suppress(session, matched)
    store.record_events(
        session,
        [
            store.NewEvent(
                row.id, row.project_id, EventType(event.kind.value), event_data(provider, event, row, suppressed)
            )
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
            SELECT e.n, m.id::text AS id, m.project_id, m.channel, m.to_address, m.status,
                   m.provider_message_id
            FROM e JOIN messages m ON m.id = e.message_id
            WHERE m.provider = :provider AND (CAST(:project AS text) IS NULL OR m.project_id = :project)
            UNION ALL
            SELECT e.n, m.id::text, m.project_id, m.channel, m.to_address, m.status, m.provider_message_id
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


def target_status(event: InboundEvent, row: Row) -> MessageStatus | None:
    """The status an event asks its message to take, if any (the UPDATE keeps it only forward)."""
    if row.status in UNSETTLED and event.kind in FAILED_IF_UNSETTLED:
        return FAILED_IF_UNSETTLED[event.kind]
    return STATUS_FOR.get(event.kind)


def rank(status: MessageStatus) -> int:
    """Where news stands in STATUS_ORDER; a failure report (for an unsettled message only) below all other news."""
    return -1 if status is MessageStatus.FAILED else STATUS_ORDER.index(status)


def update_messages(session: Session, matched: Sequence[tuple[InboundEvent, Row]]) -> None:
    """Each message takes the latest of the news about it (delivered, bounced, complained; a
    failure where it was unsettled) and, where it has none, the provider's id for it, which a
    message left `unknown` never recorded."""
    latest: dict[str, MessageStatus] = {}
    provider_ids: dict[str, str] = {}
    for event, row in matched:
        status = target_status(event, row)
        if status is not None and (row.id not in latest or rank(status) > rank(latest[row.id])):
            latest[row.id] = status
        if row.provider_message_id is None and event.provider_message_id:
            provider_ids.setdefault(row.id, event.provider_message_id)
    ids = sorted(latest.keys() | provider_ids.keys())
    if not ids:
        return
    session.execute(
        text(
            f"""
            UPDATE messages m
            SET status = CASE WHEN {MOVES} THEN v.status ELSE m.status END,
                provider_message_id = COALESCE(m.provider_message_id, v.pmid),
                updated_at = now()
            FROM unnest(CAST(:ids AS uuid[]), CAST(:statuses AS text[]), CAST(:pmids AS text[]))
                 AS v(id, status, pmid)
            WHERE m.id = v.id AND ({MOVES} OR (m.provider_message_id IS NULL AND v.pmid IS NOT NULL))
            """
        ),
        {
            "ids": ids,
            "statuses": [latest[i].value if i in latest else None for i in ids],
            "pmids": [provider_ids.get(i) for i in ids],
            "order": [status.value for status in STATUS_ORDER],
            "unsettled": [status.value for status in UNSETTLED],
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


def event_data(provider: str, event: InboundEvent, row: Row, suppressed: set[str]) -> dict[str, Any]:
    data: dict[str, Any] = {"provider": provider, "provider_event": event.name}
    reason = suppression_reason(event) if event.key in suppressed else None
    optional = {
        # The message was `unknown` or `sending` (its worker stopped mid-call, or may have)
        # and this report settles it.
        "resolved": row.status if settles(event, row) else None,
        "provider_message_id": event.provider_message_id,
        "bounce": event.bounce,
        "occurred_at": event.occurred_at,
        "suppressed": reason.value if reason is not None else None,
    }
    data.update({key: value for key, value in optional.items() if value is not None})
    data["raw"] = event.raw
    return data


def settles(event: InboundEvent, row: Row) -> bool:
    return row.status in UNSETTLED and target_status(event, row) is not None
