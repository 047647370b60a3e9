"""Writing new messages: the one insert every way in (HTTP API, SMTP) goes through.

Every message of one insert shares its content and differs only in its recipient, so the
messages, their content rows and their files are one statement whatever the number of
recipients: `messages` from the unnest of the recipients, the files once (if any message
was inserted), and one `message_contents` row for each message that was inserted. A
recipient whose idempotency key was used before inserts nothing, and neither does its content.

The function takes a session and never commits: the caller owns the transaction, and
publishes the prepare tasks after it commits.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Row, text
from sqlalchemy.orm import Session

from app.enums import Channel, MessageStatus, Priority
from providers.base import Attachment


@dataclass(frozen=True)
class Recipient:
    """What differs between the messages of one insert: who each goes to, and, for an API
    send, the idempotency key that guards it."""

    to_address: str | None = None
    subscriber_id: str | None = None
    idempotency_key: str | None = None
    request_hash: str | None = None


@dataclass(frozen=True)
class Common:
    """What every message of one insert has: its routing and state, and its written-once content."""

    channel: Channel
    priority: Priority
    status: MessageStatus = MessageStatus.ACCEPTED
    category: str | None = None
    test: bool = False
    bypass_quiet_hours: bool = False
    template: str | None = None
    template_version: int | None = None
    scheduled_at: datetime | None = None
    subject: str | None = None
    text: str | None = None
    html: str | None = None
    data: Mapping[str, Any] = field(default_factory=dict)
    meta: Mapping[str, Any] = field(default_factory=dict)
    locale: str | None = None
    reply_to: str | None = None
    cc: str | None = None
    headers: Mapping[str, str] | None = None
    attachments: Sequence[Attachment] = ()


INSERT = text(
    """
    WITH new AS (
        INSERT INTO messages (project_id, channel, status, priority, category, subscriber_id, to_address, test,
                              bypass_quiet_hours, template, template_version, idempotency_key, request_hash,
                              scheduled_at)
        SELECT :project_id, :channel, :status, :priority, :category, r.subscriber_id, r.to_address, :test,
               :bypass_quiet_hours, :template, :template_version, r.idempotency_key, r.request_hash, :scheduled_at
        FROM unnest(CAST(:subscriber_ids AS text[]), CAST(:to_addresses AS text[]),
                    CAST(:idempotency_keys AS text[]), CAST(:request_hashes AS text[]))
             AS r(subscriber_id, to_address, idempotency_key, request_hash)
        ON CONFLICT ON CONSTRAINT uq_messages_project_idempotency_key DO NOTHING
        RETURNING id, created_at
    ), files AS (
        INSERT INTO attachments (id, project_id, filename, content_type, content)
        SELECT f.id, :project_id, f.filename, f.content_type, f.content
        FROM unnest(CAST(:file_ids AS uuid[]), CAST(:filenames AS text[]), CAST(:content_types AS text[]),
                    CAST(:contents AS text[])) AS f(id, filename, content_type, content)
        WHERE EXISTS (SELECT FROM new)
    ), contents AS (
        INSERT INTO message_contents (message_id, subject, text, html, data, metadata, locale, reply_to, cc,
                                      headers, attachment_ids)
        SELECT new.id, :subject, :text, :html, CAST(:data AS jsonb), CAST(:metadata AS jsonb), :locale, :reply_to,
               :cc, CAST(:headers AS jsonb), CAST(:attachment_ids AS uuid[])
        FROM new
    )
    SELECT id, created_at FROM new
    """
)


def insert_messages(session: Session, project_id: str, common: Common, recipients: Sequence[Recipient]) -> list[Row]:
    """Insert one message per recipient with `common`'s content; (id, created_at) of those inserted.

    Files get their ids here, so the messages list them in the order given.
    """
    file_ids = [str(uuid.uuid4()) for _ in common.attachments]
    return list(
        session.execute(
            INSERT,
            {
                "project_id": project_id,
                "channel": common.channel.value,
                "status": common.status.value,
                "priority": common.priority.value,
                "category": common.category,
                "test": common.test,
                "bypass_quiet_hours": common.bypass_quiet_hours,
                "template": common.template,
                "template_version": common.template_version,
                "scheduled_at": common.scheduled_at,
                "subscriber_ids": [r.subscriber_id for r in recipients],
                "to_addresses": [r.to_address for r in recipients],
                "idempotency_keys": [r.idempotency_key for r in recipients],
                "request_hashes": [r.request_hash for r in recipients],
                "file_ids": file_ids,
                "attachment_ids": file_ids or None,
                "filenames": [a.filename for a in common.attachments],
                "content_types": [a.content_type for a in common.attachments],
                "contents": [a.content for a in common.attachments],
                "subject": common.subject,
                "text": common.text,
                "html": common.html,
                "data": json.dumps(common.data),
                "metadata": json.dumps(common.meta),
                "locale": common.locale,
                "reply_to": common.reply_to,
                "cc": common.cc,
                "headers": None if common.headers is None else json.dumps(common.headers),
            },
        ).all()
    )
