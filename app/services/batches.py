"""Batches: one request, up to 10,000 messages, written with one COPY and counted by status.

A batch is answered per recipient row: the good rows become messages, the bad ones are
named by their index. Checking the rows is the API's per-message work, so it is a loop
over the single send's own field checks rather than a schema load per row (see
`check_recipients`); writing them is `intake.copy_messages`; publishing is a prepare task
per 500 ids after the commit.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any, cast

from marshmallow import ValidationError
from sqlalchemy import func, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session, sessionmaker

from app.access import admission
from app.access.auth import Caller
from app.access.storage import stored_bytes
from app.db import enqueue_after_commit
from app.delivery import dispatch
from app.enums import Channel, MessageStatus, Priority
from app.errors import abort, uuid_or_404
from app.models import Batch, Message
from app.schemas.batches import MAX_RECIPIENTS, BatchRecipientSchema
from app.schemas.core import ADDRESS_KINDS, EXACTLY_ONE_ADDRESS, address_misfit
from app.schemas.nesting import MAX_DATA_DEPTH, TOO_DEEP, nesting
from app.services import email_extras, intake, topics
from app.services.messages import Accepted, check_channel_enabled, request_fingerprint

# The single send's checks of each address kind (and of a row's data), called field by
# field, and the schema's own words for what is not a field.
ROW_SCHEMA = BatchRecipientSchema()
ROW_FIELDS = ROW_SCHEMA.fields
NOT_AN_OBJECT = ROW_SCHEMA.error_messages["type"]
UNKNOWN_FIELD = ROW_SCHEMA.error_messages["unknown"]
NOT_A_MAPPING = ROW_FIELDS["data"].error_messages["invalid"]

Rejected = dict[str, Any]


def check_recipients(channel: Channel, recipients: Sequence[Any]) -> tuple[list[intake.BatchRecipient], list[Rejected]]:
    """The rows that can take a `channel` message, and the others as {"index", "errors"}.

    The same checks and messages as a single send's `to` (RecipientSchema's own fields),
    without a schema load per row: 3-7 µs a row here against 13-23 µs for a load per row
    and about 10 µs for one `many=True` load (10,000 email rows, busy 2-core box), where
    the whole COPY of a row costs about 15 µs.
    """
    valid: list[intake.BatchRecipient] = []
    rejected: list[Rejected] = []
    for index, row in enumerate(recipients):
        checked = _check_row(channel, row)
        if isinstance(checked, dict):
            rejected.append({"index": index, "errors": checked})
        else:
            valid.append(checked)
    return valid, rejected


def _check_row(channel: Channel, row: Any) -> intake.BatchRecipient | dict[str, Any]:
    if not isinstance(row, dict):
        return {"_schema": [NOT_AN_OBJECT]}
    errors: dict[str, Any] = {}
    kinds = []
    for name in row:
        if name in ADDRESS_KINDS:
            kinds.append(name)
        elif name != "data":
            errors[name] = [UNKNOWN_FIELD]
    address: tuple[str | None, str | None] = (None, None)
    if len(kinds) != 1:
        errors["_schema"] = [EXACTLY_ONE_ADDRESS]
    elif misfit := address_misfit(channel, kinds[0]):
        errors[kinds[0]] = [misfit]
    else:
        kind, value = kinds[0], row[kinds[0]]
        try:
            stripped = value.strip() if isinstance(value, str) else value  # as RecipientSchema.strip_spaces
            # No address field allows None.
            address = intake.recipient_of(kind, cast(str, ROW_FIELDS[kind].deserialize(stripped)))
        except ValidationError as error:
            errors[kind] = error.messages
    data = row.get("data")
    if "data" in row and type(data) is not dict:
        # What the `data` field checks, less its per-key loop: keys from JSON are strings.
        errors["data"] = [NOT_A_MAPPING]
    elif data is not None and nesting(data) > MAX_DATA_DEPTH:
        errors["data"] = [TOO_DEEP]
    if errors:
        return errors
    return intake.BatchRecipient(*address, data)


def send_batch(
    db: sessionmaker[Session],
    caller: Caller,
    data: dict[str, Any],
    raw_body: Any,
    idempotency_key: str | None,
) -> Accepted:
    """Record a message per valid recipient and, once committed, hand them to the pipeline.

    Nothing is written unless at least one row is valid. With an Idempotency-Key the batch
    row is inserted first, so a replay writes no message and answers the stored body. A batch
    the project's limits have no room for is refused whole, before its messages are copied.
    """
    channel: Channel = data["channel"]
    check_channel_enabled(caller, channel)
    if isinstance(data["recipients"], dict):
        return _send_to_topic(db, caller, data, raw_body, idempotency_key)
    check_copies_fit(data)
    recipients, rejected = check_recipients(channel, data["recipients"])
    if not recipients:
        abort(
            422,
            "No recipient of the batch is valid.",
            errors={"json": {"recipients": {str(row["index"]): row["errors"] for row in rejected}}},
        )
    batch_id = uuid.uuid4()
    body: dict[str, Any] = {"batch_id": str(batch_id), "accepted": len(recipients), "rejected": rejected}
    duplicates = copies_of(data, recipients)
    if duplicates:
        body["copies"] = len(duplicates)
    with db.begin() as session:
        common = intake.common_for_send(session, caller.project_id, data, test=caller.is_test, batch_id=batch_id)
        if not _insert_batch(session, caller.project_id, common, body, raw_body, idempotency_key):
            return _replay(session, caller, idempotency_key, raw_body)
        rows = recipients + duplicates
        stored = stored_bytes(common, len(rows), own_data=(row.data for row in rows))
        limits = admission.admit(session, caller, channel, len(rows), stored=stored)
        limit = caller.limits.transactional_per_min
        earned = intake.earn(caller.project_id, common.priority, len(rows), limit, whole=False)
        ids = intake.copy_messages(session, caller.project_id, common, rows, demoted=earned.demoted)
        intake.record_demotions(session, caller.project_id, ids[earned.kept :], earned)
        if common.status is MessageStatus.ACCEPTED:
            for part, priority in ((ids[: earned.kept], common.priority), (ids[earned.kept :], Priority.BULK)):
                for signature in dispatch.prepare(part, priority, project=caller.project_id):
                    enqueue_after_commit(session, signature)
    return Accepted(body, replayed=False, headers=limits)


def _send_to_topic(
    db: sessionmaker[Session], caller: Caller, data: dict[str, Any], raw_body: Any, idempotency_key: str | None
) -> Accepted:
    """Record the batch of a send to a topic and, once committed, start its fan-out.

    The API writes no message: tasks/fanout.py writes them from the membership a chunk at a
    time, however many members there are. What the topic's members are now is what the
    limits are asked for, and what `accepted` says; the batch's Idempotency-Key guards the
    whole fan-out, as the fan-out belongs to the one batch row.
    """
    topic = data["recipients"]["topic"]
    if data.get("cc") or data.get("bcc"):
        abort(422, "Invalid request.", errors={"json": {"recipients": [COPIES_NEED_A_LIST]}})
    batch_id = uuid.uuid4()
    with db.begin() as session:
        if not topics.exists(session, caller.project_id, topic):
            abort(422, "Invalid request.", errors={"json": {"recipients": {"topic": [f"No topic {topic!r}."]}}})
        members = topics.member_count(session, caller.project_id, topic)
        body: dict[str, Any] = {"batch_id": str(batch_id), "accepted": members, "rejected": []}
        common = intake.common_for_send(session, caller.project_id, data, test=caller.is_test, batch_id=batch_id)
        fanout = intake.topic_columns(session, caller.project_id, common)
        if not _insert_batch(session, caller.project_id, common, body, raw_body, idempotency_key, topic, fanout):
            return _replay(session, caller, idempotency_key, raw_body)
        limits = admission.admit(session, caller, data["channel"], members, stored=stored_bytes(common, members))
        limit = caller.limits.transactional_per_min
        priority = common.priority
        if intake.earn(caller.project_id, priority, members, limit, whole=True).demoted:
            priority = demote_topic_send(session, batch_id, limit)
        enqueue_after_commit(session, dispatch.fan_out(str(batch_id), priority))
    return Accepted(body, replayed=False, headers=limits)


def demote_topic_send(session: Session, batch_id: uuid.UUID, limit: int | None) -> Priority:
    """A topic send above its project's transactional rate writes its messages as bulk, each
    with its `demoted` event: its fan-out reads both from the batch row (tasks/fanout.py)."""
    demoted = func.jsonb_build_object("priority", "bulk", "demoted_limit", limit)
    session.execute(
        update(Batch).where(Batch.id == batch_id).values(priority=Priority.BULK, fanout=Batch.fanout.op("||")(demoted))
    )
    return Priority.BULK


COPIES_NEED_A_LIST = "cc and bcc go with a list of recipients, not a topic."


def check_copies_fit(data: dict[str, Any]) -> None:
    """A batch with cc or bcc writes a message per recipient and copy: at most MAX_RECIPIENTS in all."""
    per_recipient = 1 + len(data.get("cc") or ()) + len(data.get("bcc") or ())
    if per_recipient > 1 and len(data["recipients"]) * per_recipient > MAX_RECIPIENTS:
        most, copies = MAX_RECIPIENTS // per_recipient, per_recipient - 1
        problem = f"With {copies} cop{'y' if copies == 1 else 'ies'} each, a batch takes at most {most:,} recipients."
        abort(422, "Invalid request.", errors={"json": {"recipients": [problem]}})


def copies_of(data: dict[str, Any], recipients: Sequence[intake.BatchRecipient]) -> list[intake.BatchRecipient]:
    """Every recipient's copies (cc, bcc), each a message of its own with the recipient's data,
    so it reads what the recipient reads."""
    if not (data.get("cc") or data.get("bcc")):
        return []
    return [
        intake.BatchRecipient(None, address, recipient.data)
        for recipient in recipients
        for address, _ in email_extras.copies(data, recipient.to_address)
    ]


def _insert_batch(
    session: Session,
    project_id: str,
    common: intake.Common,
    body: dict[str, Any],
    raw_body: Any,
    idempotency_key: str | None,
    topic: str | None = None,
    fanout: dict[str, Any] | None = None,
) -> bool:
    """Insert the batch row; False when its Idempotency-Key was used before. A send to a
    topic names it, with what its messages share (`fanout`), for its fan-out to read.

    Of two concurrent requests with one key, the second waits on the first's row and then
    finds it: the unique constraint decides, not a read before the write. The project's test
    key and live key each have their own keys (the batch's `test` is in the constraint).
    """
    inserted = session.execute(
        insert(Batch)
        .values(
            id=common.batch_id,
            project_id=project_id,
            channel=common.channel,
            priority=common.priority,
            category=common.category,
            template=common.template,
            template_version=common.template_version,
            test=common.test,
            accepted=body["accepted"],
            rejected=len(body["rejected"]),
            scheduled_at=common.scheduled_at,
            idempotency_key=idempotency_key,
            request_hash=request_fingerprint(raw_body) if idempotency_key else None,
            response=body if idempotency_key else None,
            topic=topic,
            fanout=fanout,
            fanout_at=func.now() if topic else None,
        )
        .on_conflict_do_nothing(constraint="uq_batches_project_test_idempotency_key")
        .returning(Batch.id)
    ).first()
    return inserted is not None


def _replay(session: Session, caller: Caller, idempotency_key: str | None, raw_body: Any) -> Accepted:
    original = session.execute(
        select(Batch.request_hash, Batch.response).where(
            Batch.project_id == caller.project_id,
            Batch.test == caller.is_test,
            Batch.idempotency_key == idempotency_key,
        )
    ).one()
    if original.request_hash != request_fingerprint(raw_body):
        abort(409, "This Idempotency-Key was used with a different request body.")
    return Accepted(original.response, replayed=True)


def get_batch(db: sessionmaker[Session], project_id: str, batch_id: str) -> dict[str, Any]:
    """The batch and its messages counted by status now; another project's batch is a 404."""
    key = uuid_or_404(batch_id, "batch")
    with db() as session:
        batch = session.scalar(select(Batch).where(Batch.id == key, Batch.project_id == project_id))
        if batch is None:
            abort(404, f"No batch {batch_id!r}.")
        counts = session.execute(
            select(Message.status, func.count()).where(Message.batch_id == key).group_by(Message.status)
        ).all()
    return {
        "id": str(batch.id),
        "channel": batch.channel.value,
        "priority": batch.priority.value,
        "category": batch.category,
        "template": batch.template,
        "template_version": batch.template_version,
        "test": batch.test,
        "accepted": batch.accepted,
        "rejected": batch.rejected,
        "scheduled_at": batch.scheduled_at,
        "created_at": batch.created_at,
        "counts": {status.value: count for status, count in counts},
    }
