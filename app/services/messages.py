"""Accepting notifications and reporting on them."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import func, select, tuple_, update
from sqlalchemy.orm import Session, sessionmaker

from app.access import admission
from app.access.auth import Caller
from app.access.storage import stored_bytes
from app.delivery import coalescer, device_store, store
from app.delivery.event_log import sent_data
from app.enums import Channel, EventType, MessageStatus, Priority
from app.errors import abort, field_error, uuid_or_404
from app.models import Event, Message, MessageContent
from app.pagination import aware_time, decode_cursor, page
from app.schemas.core import ADDRESS_FOR_CHANNEL
from app.services import email_extras, engagement, intake

INVALID = "Invalid request."


@dataclass(frozen=True)
class Accepted:
    body: dict[str, Any]
    replayed: bool
    # Where the send left the project's limits (app/access/admission.py); none on a replay.
    headers: Mapping[str, str] = field(default_factory=dict)


def accept(
    db: sessionmaker[Session],
    caller: Caller,
    data: dict[str, Any],
    raw_body: Any,
    idempotency_key: str | None,
) -> Accepted:
    """Record one notification and, once committed, hand it to the pipeline.

    With an Idempotency-Key, the insert and the replay check are one statement: of two
    concurrent requests with the same key, one inserts and the other replays. The project's
    test key and live key each have their own keys (the message's `test` is in the constraint).

    Each cc and bcc address gets a message of its own in the same statement (see
    app/services/email_extras.py), guarded by a key derived from the send's, so a replay
    inserts none of them either. The limits are taken once the insert says it is no replay,
    a message for each copy too; a refusal rolls the insert back.
    """
    check_channel_enabled(caller, data["channel"])
    kind, value = next(iter(data["to"].items()))
    with db.begin() as session:
        common = intake.common_for_send(session, caller.project_id, data, test=caller.is_test)
        status = common.status
        subscriber_id, to_address = intake.recipient_of(kind, value)
        recipient = intake.Recipient(
            subscriber_id=subscriber_id,
            to_address=to_address,
            idempotency_key=idempotency_key,
            request_hash=request_fingerprint(raw_body) if idempotency_key else None,
        )
        copies = email_extras.copies(data, to_address)
        duplicates = [
            intake.Recipient(to_address=address, idempotency_key=copy_key(idempotency_key, address))
            for address, _ in copies
        ]
        inserted = intake.insert_messages(session, caller.project_id, common, [recipient, *duplicates])
        copied = {address for address, _ in copies}
        row = next((row for row in inserted if row.to_address not in copied), None)
        if row is None:  # the key was used before (copies it did not have are rolled back by a 409)
            return _replay(session, caller, idempotency_key, raw_body, copies)
        stored = stored_bytes(common, len(inserted))
        limits = admission.admit(session, caller, data["channel"], len(inserted), written=True, stored=stored)
        limit = caller.limits.transactional_per_min
        earned = intake.earn(caller.project_id, common.priority, len(inserted), limit, whole=True)
        if earned.demoted:
            intake.demote(session, caller.project_id, [r.id for r in inserted], earned)
    if status is MessageStatus.ACCEPTED:
        priority = Priority.BULK if earned.demoted else common.priority
        coalescer.prepare_soon([str(r.id) for r in inserted], priority, project=caller.project_id)
    body = {"id": str(row.id), "status": status.value, "created_at": row.created_at}
    if copies:
        body["copies"] = copies_answer(copies, {r.to_address: str(r.id) for r in inserted if r is not row})
    return Accepted(body, replayed=False, headers=limits)


def copy_key(idempotency_key: str | None, address: str) -> str | None:
    """The key that guards a send's copy to `address`: a digest of the send's key and the
    address, so it fits the column and is found again by a replay."""
    if idempotency_key is None:
        return None
    return "copy-" + hashlib.sha256(f"{idempotency_key}\n{address}".encode()).hexdigest()


def copies_answer(copies: list[tuple[str, str]], ids: dict[str, str]) -> list[dict[str, str]]:
    return [{"id": ids[address], "email": address, "kind": kind} for address, kind in copies]


def check_channel_enabled(caller: Caller, channel: Channel) -> None:
    if channel.value not in caller.channels:
        field_error(422, INVALID, "json", "channel", f"The {channel} channel is not enabled for this project.")


def request_fingerprint(raw_body: Any) -> str:
    canonical = json.dumps(raw_body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _replay(
    session: Session, caller: Caller, idempotency_key: str | None, raw_body: Any, copies: list[tuple[str, str]]
) -> Accepted:
    mine = (Message.project_id == caller.project_id, Message.test == caller.is_test)
    original = session.execute(
        select(Message.id, Message.created_at, Message.scheduled_at, Message.request_hash).where(
            *mine, Message.idempotency_key == idempotency_key
        )
    ).one()
    if original.request_hash != request_fingerprint(raw_body):
        abort(409, "This Idempotency-Key was used with a different request body.")
    was_scheduled = original.scheduled_at is not None and original.scheduled_at > original.created_at
    status = MessageStatus.SCHEDULED if was_scheduled else MessageStatus.ACCEPTED
    body = {"id": str(original.id), "status": status.value, "created_at": original.created_at}
    if copies:
        keys = [copy_key(idempotency_key, address) for address, _ in copies]
        found = session.execute(select(Message.to_address, Message.id).where(*mine, Message.idempotency_key.in_(keys)))
        body["copies"] = copies_answer(copies, {address: str(message_id) for address, message_id in found})
    return Accepted(body, replayed=True)


def get_message(db: sessionmaker[Session], project_id: str, message_id: str) -> dict[str, Any]:
    """A message and its timeline; another project's message is a 404, as if it did not exist."""
    key = uuid_or_404(message_id, "message")
    with db() as session:
        found = session.execute(
            select(Message, MessageContent.meta)
            .outerjoin(MessageContent, MessageContent.message_id == Message.id)
            .where(Message.id == key, Message.project_id == project_id)
        ).first()
        if found is None:
            abort(404, f"No message {message_id!r}.")
        message, meta = found
        stored = session.scalars(select(Event).where(Event.message_id == key).order_by(Event.at, Event.id)).all()
        devices = device_store.of_messages(session, [str(key)]) if message.channel is Channel.PUSH else []
        tracked = engagement.summary(session, key)
    events = timeline(message, list(stored), devices)
    return {**message_view(message, meta), "events": events, "engagement": tracked}


def list_messages(db: sessionmaker[Session], project_id: str, filters: dict[str, Any]) -> dict[str, Any]:
    """The project's messages, newest first, a page at a time (keyset pagination on created_at, id)."""
    query = (
        select(Message, MessageContent.meta)
        .outerjoin(MessageContent, MessageContent.message_id == Message.id)
        .where(Message.project_id == project_id)
        .order_by(Message.created_at.desc(), Message.id.desc())
        .limit(filters["limit"] + 1)
    )
    for name, column in (
        ("status", Message.status),
        ("channel", Message.channel),
        ("batch_id", Message.batch_id),
        ("subscriber_id", Message.subscriber_id),
        ("to", Message.to_address),
        ("template", Message.template),
    ):
        if filters.get(name) is not None:
            query = query.where(column == filters[name])
    if filters.get("since") is not None:
        query = query.where(Message.created_at >= filters["since"])
    if filters.get("until") is not None:
        query = query.where(Message.created_at < filters["until"])
    after = decode_cursor(filters.get("cursor"), aware_time, uuid.UUID)
    if after is not None:
        query = query.where(tuple_(Message.created_at, Message.id) < tuple_(*after))
    with db() as session:
        rows = session.execute(query).all()
    result = page(rows, filters["limit"], key=lambda row: (row[0].created_at.isoformat(), str(row[0].id)))
    result["items"] = [message_view(message, meta) for message, meta in result["items"]]
    return result


CANCELLABLE = (MessageStatus.SCHEDULED, MessageStatus.ACCEPTED, MessageStatus.READY, MessageStatus.RETRYING)


def cancel_message(db: sessionmaker[Session], project_id: str, message_id: str) -> dict[str, Any]:
    """Cancel a message no worker has claimed yet; the claim's status check does the rest."""
    key = uuid_or_404(message_id, "message")
    with db.begin() as session:
        cancelled = session.execute(
            update(Message)
            .where(Message.id == key, Message.project_id == project_id, Message.status.in_(CANCELLABLE))
            .values(status=MessageStatus.CANCELLED, next_attempt_at=None, updated_at=func.now())
            .returning(Message.id)
        ).first()
        if cancelled is None:
            current = session.scalar(select(Message.status).where(Message.id == key, Message.project_id == project_id))
            if current is None:
                abort(404, f"No message {message_id!r}.")
            abort(
                409,
                f"The message is {current.value}: only messages no worker has claimed can be cancelled.",
                errors={"status": [current.value]},
            )
        store.record_events(session, [store.NewEvent(str(key), project_id, EventType.CANCELLED, {})])
    return get_message(db, project_id, message_id)


def planned_send_time(message: Message) -> datetime | None:
    """When a scheduled message goes out: its quiet-hours release if held, else the time asked for."""
    if message.status is MessageStatus.SCHEDULED and message.next_attempt_at is not None:
        return message.next_attempt_at
    return message.scheduled_at


def message_view(message: Message, meta: dict[str, Any] | None) -> dict[str, Any]:
    address_kind = ADDRESS_FOR_CHANNEL.get(message.channel)
    return {
        "id": str(message.id),
        "channel": message.channel.value,
        "to": {address_kind: message.to_address} if message.to_address and address_kind else {},
        "subscriber_id": message.subscriber_id,
        "status": message.status.value,
        "priority": message.priority.value,
        "category": message.category,
        "template": message.template,
        "template_version": message.template_version,
        "batch_id": str(message.batch_id) if message.batch_id else None,
        "attempts": message.attempts,
        "provider": message.provider,
        "provider_message_id": message.provider_message_id,
        "error": message.error,
        "scheduled_at": planned_send_time(message),
        "created_at": message.created_at,
        "updated_at": message.updated_at,
        "sent_at": message.sent_at,
        "metadata": meta or {},
    }


def timeline(
    message: Message, stored: list[Event], devices: Sequence[device_store.Device] = ()
) -> list[dict[str, Any]]:
    """Every status the message passed through, oldest first.

    The happy path is read off the message's own timestamps, so a delivered message costs
    no event rows; stored events add what a row cannot tell (failures, retries, …). A push
    message to a subscriber adds a `device` entry per token, where it stands now, read off
    its row (app/delivery/device_store.py): listed before a step of the same moment, since
    the message's `sent` or `retrying` sums them up.
    """
    test = {"test": True} if message.test else {}
    was_scheduled = message.scheduled_at is not None and message.scheduled_at > message.created_at
    derived: list[tuple[datetime | None, EventType, dict[str, Any]]] = [
        (message.created_at, EventType.SCHEDULED if was_scheduled else EventType.ACCEPTED, dict(test)),
        (message.ready_at, EventType.READY, {}),
        (message.claimed_at, EventType.SENDING, {"attempt": message.attempts}),
        *((device.updated_at, EventType.DEVICE, device_view(device)) for device in devices),
        (message.sent_at, EventType.SENT, sent_data(message.provider, message.provider_message_id, message.test)),
    ]
    entries = [(at, kind.value, data) for at, kind, data in derived if at is not None]
    entries += [(event.at, event.type.value, event.data) for event in stored]
    entries.sort(key=lambda entry: entry[0])
    return [{"type": kind, "at": at, "data": data} for at, kind, data in entries]


def device_view(device: device_store.Device) -> dict[str, Any]:
    """One device's entry: its token, status and attempts, and what the provider last said."""
    view = {"token": device.token, "status": device.status, "attempts": device.attempts}
    extra = {"provider_message_id": device.provider_message_id, "error": device.error, "follow_up": device.follow_up}
    return view | {name: value for name, value in extra.items() if value is not None}


def rendered_content(db: sessionmaker[Session], project_id: str, message_id: str) -> dict[str, Any]:
    """What the recipient gets (once prepared: rendered, with tracking added), for people who
    must see it: all None where nothing is kept. Another project's message is a 404 as in
    `get_message`."""
    key = uuid_or_404(message_id, "message")
    with db() as session:
        row = session.execute(
            select(MessageContent.subject, MessageContent.text, MessageContent.html, MessageContent.payload)
            .select_from(Message)
            .outerjoin(MessageContent, MessageContent.message_id == Message.id)
            .where(Message.id == key, Message.project_id == project_id)
        ).first()
    if row is None:
        abort(404, f"No message {message_id!r}.")
    return row._asdict()
