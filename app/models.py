"""SQLAlchemy models: the tables Alembic migrates and the rows the services read.

`messages` holds only the narrow, changing state of a notification; what is written once
(content, data, metadata) lives in `message_contents`, so each status change rewrites a
small row. The happy-path timeline (accepted → ready → sending → sent) is derived from the
message's own timestamps; `events` stores only what cannot be derived.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    Enum,
    ForeignKey,
    ForeignKeyConstraint,
    Index,
    Integer,
    SmallInteger,
    String,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, UUID
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from app.enums import (
    ACTIVE_STATUSES,
    Channel,
    DeviceStatus,
    EventType,
    InboxStatus,
    KeyKind,
    MessageStatus,
    Priority,
    RunStatus,
    SuppressionReason,
    WebhookDeliveryStatus,
)


def _enum(enum: type[StrEnum], length: int = 16) -> Enum:
    """Store a StrEnum as its plain value in a varchar: no native type to migrate."""
    return Enum(
        enum,
        native_enum=False,
        create_constraint=False,
        length=length,
        values_callable=lambda members: [m.value for m in members],
    )


class Base(DeclarativeBase):
    type_annotation_map = {
        datetime: DateTime(timezone=True),
        dict[str, Any]: JSONB,
        uuid.UUID: UUID(as_uuid=True),
    }


EMPTY_JSON = text("'{}'::jsonb")
# Room for the longest event type ("workflow.completed").
EVENT_TYPE_LENGTH = 32


def _now() -> Mapped[datetime]:
    return mapped_column(server_default=func.now())


class Project(Base):
    __tablename__ = "projects"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    channels: Mapped[list[str]] = mapped_column(ARRAY(String(16)))
    rate_limit_per_min: Mapped[int | None] = mapped_column(Integer)
    settings: Mapped[dict[str, Any]] = mapped_column(server_default=EMPTY_JSON)
    # The webhook channel's signing secret (whsec_…, encrypted: app.crypto). None for projects
    # made before there was one: they sign with the account's secret until they rotate.
    webhook_signing_secret: Mapped[str | None] = mapped_column(Text)
    # After a rotation the old secret signs too, until it expires; None with an expiry set:
    # the old one is the account's secret (the first rotation of such a project).
    webhook_signing_previous_secret: Mapped[str | None] = mapped_column(Text)
    webhook_signing_previous_expires_at: Mapped[datetime | None]
    created_at: Mapped[datetime] = _now()


class ApiKey(Base):
    __tablename__ = "api_keys"

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, server_default=text("gen_random_uuid()"))
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(200))
    kind: Mapped[KeyKind] = mapped_column(_enum(KeyKind))
    prefix: Mapped[str] = mapped_column(String(32))
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = _now()
    revoked_at: Mapped[datetime | None]


class Subscriber(Base):
    __tablename__ = "subscribers"

    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), primary_key=True)
    external_id: Mapped[str] = mapped_column(String(255), primary_key=True)
    email: Mapped[str | None] = mapped_column(String(320))
    phone: Mapped[str | None] = mapped_column(String(32))
    push_tokens: Mapped[list[str]] = mapped_column(ARRAY(Text), server_default=text("'{}'"))
    locale: Mapped[str | None] = mapped_column(String(35))
    timezone: Mapped[str | None] = mapped_column(String(64))
    data: Mapped[dict[str, Any]] = mapped_column(server_default=EMPTY_JSON)
    preferences: Mapped[dict[str, Any]] = mapped_column(server_default=EMPTY_JSON)
    created_at: Mapped[datetime] = _now()
    updated_at: Mapped[datetime] = _now()


class Message(Base):
    __tablename__ = "messages"
    __table_args__ = (
        # A project's test key and live key each have their own Idempotency-Keys. Partial: a
        # send without a key (most) costs no entry here, in any of its row versions.
        Index(
            "uq_messages_idempotency_key",
            "project_id",
            "test",
            "idempotency_key",
            unique=True,
            postgresql_where=text("idempotency_key IS NOT NULL"),
        ),
        Index("ix_messages_project_created", "project_id", "created_at"),
        # Erasure finds a subscriber's messages by it.
        Index(
            "ix_messages_project_subscriber",
            "project_id",
            "subscriber_id",
            postgresql_where=text("subscriber_id IS NOT NULL"),
        ),
        # Provider status webhooks name the message by the provider's id for it.
        Index(
            "ix_messages_provider_message_id",
            "provider",
            "provider_message_id",
            postgresql_where=text("provider_message_id IS NOT NULL"),
        ),
        # The delivery log's derived `sent` entries, newest first. Finalise stamps a whole
        # batch with one sent_at, so B-tree deduplication keeps this to a few bytes a message.
        Index(
            "ix_messages_project_sent",
            "project_id",
            "sent_at",
            postgresql_where=text("sent_at IS NOT NULL"),
        ),
        # The delivery log's batch filter; every message of a batch shares the key (deduplicated).
        Index("ix_messages_batch", "batch_id", postgresql_where=text("batch_id IS NOT NULL")),
        Index(
            "ix_messages_active",
            "status",
            "updated_at",
            postgresql_where=text("status IN (" + ", ".join(f"'{s.value}'" for s in ACTIVE_STATUSES) + ")"),
        ),
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, server_default=text("gen_random_uuid()"))
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    # No foreign key to batches: it would cost a lookup per message of a batch insert.
    batch_id: Mapped[uuid.UUID | None]
    channel: Mapped[Channel] = mapped_column(_enum(Channel))
    status: Mapped[MessageStatus] = mapped_column(_enum(MessageStatus))
    priority: Mapped[Priority] = mapped_column(_enum(Priority))
    category: Mapped[str | None] = mapped_column(String(64))
    subscriber_id: Mapped[str | None] = mapped_column(String(255))
    to_address: Mapped[str | None] = mapped_column(Text)
    provider: Mapped[str | None] = mapped_column(String(32))
    provider_message_id: Mapped[str | None] = mapped_column(Text)
    attempts: Mapped[int] = mapped_column(SmallInteger, server_default=text("0"))
    test: Mapped[bool] = mapped_column(Boolean, server_default=text("false"))
    bypass_quiet_hours: Mapped[bool] = mapped_column(Boolean, server_default=text("false"))
    idempotency_key: Mapped[str | None] = mapped_column(String(255))
    request_hash: Mapped[str | None] = mapped_column(String(64))
    template: Mapped[str | None] = mapped_column(String(128))
    template_version: Mapped[int | None]
    error: Mapped[str | None] = mapped_column(Text)
    scheduled_at: Mapped[datetime | None]
    next_attempt_at: Mapped[datetime | None]
    created_at: Mapped[datetime] = _now()
    updated_at: Mapped[datetime] = _now()
    ready_at: Mapped[datetime | None]
    claimed_at: Mapped[datetime | None]
    # The worker process holding a `sending` claim (tasks/heartbeat.py), and its run: the
    # sweeper acts when that worker's heartbeat stops, and resends a run as one call.
    claimed_by: Mapped[str | None] = mapped_column(Text)
    claim_id: Mapped[uuid.UUID | None]
    sent_at: Mapped[datetime | None]


class Batch(Base):
    """One POST /v1/messages/batch: what its messages share, and how many it took and refused.

    With an Idempotency-Key, `response` keeps the 202 body so a replay answers it again.
    """

    __tablename__ = "batches"
    __table_args__ = (
        UniqueConstraint("project_id", "test", "idempotency_key", name="uq_batches_project_test_idempotency_key"),
        # The sweeper's look for topic fan-outs that stopped moving: only unfinished ones are in it.
        Index(
            "ix_batches_fanout_pending",
            "fanout_at",
            postgresql_where=text("topic IS NOT NULL AND fanout_done_at IS NULL"),
        ),
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, server_default=text("gen_random_uuid()"))
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    channel: Mapped[Channel] = mapped_column(_enum(Channel))
    priority: Mapped[Priority] = mapped_column(_enum(Priority))
    category: Mapped[str | None] = mapped_column(String(64))
    template: Mapped[str | None] = mapped_column(String(128))
    template_version: Mapped[int | None]
    test: Mapped[bool] = mapped_column(Boolean, server_default=text("false"))
    accepted: Mapped[int] = mapped_column(Integer)
    rejected: Mapped[int] = mapped_column(Integer)
    scheduled_at: Mapped[datetime | None]
    idempotency_key: Mapped[str | None] = mapped_column(String(255))
    request_hash: Mapped[str | None] = mapped_column(String(64))
    response: Mapped[dict[str, Any] | None]
    created_at: Mapped[datetime] = _now()
    # A send to a topic: its messages are written by tasks/fanout.py a chunk of members at a
    # time. `fanout` holds the columns every message shares; `fanout_after` is the last member
    # written (members go in subscriber order), so a repeated task writes no one twice;
    # `fanout_at` is the last progress, for the sweeper to take up a fan-out whose task was lost.
    topic: Mapped[str | None] = mapped_column(String(128))
    fanout: Mapped[dict[str, Any] | None]
    fanout_after: Mapped[str | None] = mapped_column(String(255))
    fanout_at: Mapped[datetime | None]
    fanout_done_at: Mapped[datetime | None]


class Topic(Base):
    """Something subscribers follow, so that one send reaches all of them."""

    __tablename__ = "topics"

    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), primary_key=True)
    key: Mapped[str] = mapped_column(String(128), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    description: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = _now()
    updated_at: Mapped[datetime] = _now()


class TopicMember(Base):
    """A subscriber of a topic. Both sides cascade: a deleted topic or an erased subscriber
    leaves no membership behind."""

    __tablename__ = "topic_members"
    __table_args__ = (
        ForeignKeyConstraint(["project_id", "topic_key"], ["topics.project_id", "topics.key"], ondelete="CASCADE"),
        ForeignKeyConstraint(
            ["project_id", "subscriber_id"], ["subscribers.project_id", "subscribers.external_id"], ondelete="CASCADE"
        ),
        # A subscriber's topics, and the erasure's cascade, without a scan.
        Index("ix_topic_members_subscriber", "project_id", "subscriber_id"),
    )

    project_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    topic_key: Mapped[str] = mapped_column(String(128), primary_key=True)
    subscriber_id: Mapped[str] = mapped_column(String(255), primary_key=True)
    created_at: Mapped[datetime] = _now()


class MessageContent(Base):
    __tablename__ = "message_contents"
    __table_args__ = (
        # Which messages still name a file: retention deletes the files none names any more.
        Index(
            "ix_message_contents_attachment_ids",
            "attachment_ids",
            postgresql_using="gin",
            postgresql_where=text("attachment_ids IS NOT NULL"),
        ),
    )

    message_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("messages.id", ondelete="CASCADE"), primary_key=True)
    subject: Mapped[str | None] = mapped_column(Text)
    text: Mapped[str | None] = mapped_column(Text)
    html: Mapped[str | None] = mapped_column(Text)
    data: Mapped[dict[str, Any]] = mapped_column(server_default=EMPTY_JSON)
    meta: Mapped[dict[str, Any]] = mapped_column("metadata", server_default=EMPTY_JSON)
    # The locale the sender asked for; prepare falls back to the subscriber's, then the template's.
    locale: Mapped[str | None] = mapped_column(String(35))
    # Rendered structured content beside the text: a push notification's data.
    payload: Mapped[dict[str, Any] | None]
    # What an email brings besides its words (relayed over SMTP, or an API send's extras):
    # its sender (None: the provider's EMAIL_FROM), where replies go, the Cc header to show
    # (never to send to: each of its addresses has a message of its own), headers kept as
    # they came (Message-ID, threading, List-Unsubscribe) or given, and its files, stored
    # once in `attachments` for all its recipients.
    from_address: Mapped[str | None] = mapped_column(Text)
    reply_to: Mapped[str | None] = mapped_column(Text)
    cc: Mapped[str | None] = mapped_column(Text)
    headers: Mapped[dict[str, Any] | None]
    attachment_ids: Mapped[list[uuid.UUID] | None] = mapped_column(ARRAY(UUID(as_uuid=True)))


class Attachment(Base):
    """A file sent with email, written once and shared by every message that names it.

    One SMTP message to fifty recipients is fifty messages but one copy of its files. The
    content is base64 text, exactly what providers take, so it is never decoded.
    """

    __tablename__ = "attachments"

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, server_default=text("gen_random_uuid()"))
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), index=True)
    filename: Mapped[str] = mapped_column(Text)
    content_type: Mapped[str] = mapped_column(String(255))
    content: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = _now()


class PushDelivery(Base):
    """One device of a push message to a subscriber: the token it had when the message was
    prepared, and what the provider answered for it.

    A retry goes only to the devices still pending or retrying, so a device that took the
    message never gets it twice; the message's status sums its devices up. `n` is the token's
    place in the subscriber's list, which the timeline keeps.
    """

    __tablename__ = "push_deliveries"

    message_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("messages.id", ondelete="CASCADE"), primary_key=True)
    n: Mapped[int] = mapped_column(SmallInteger, primary_key=True)
    token: Mapped[str] = mapped_column(Text)
    status: Mapped[DeviceStatus] = mapped_column(_enum(DeviceStatus), server_default=text("'pending'"))
    attempts: Mapped[int] = mapped_column(SmallInteger, server_default=text("0"))
    provider_message_id: Mapped[str | None] = mapped_column(Text)
    error: Mapped[str | None] = mapped_column(Text)
    # What the provider's answer led to beyond this device (`token_removed`).
    follow_up: Mapped[str | None] = mapped_column(String(32))
    updated_at: Mapped[datetime] = _now()


class Event(Base):
    """One entry of the delivery log that the message row cannot tell.

    `message_id` is empty for the few project-level events (an endpoint disabled).
    """

    __tablename__ = "events"
    __table_args__ = (
        Index("ix_events_message_at", "message_id", "at"),
        Index("ix_events_project_at", "project_id", "at"),
        # The log's type filter: a rare type is found without walking the project's whole log.
        Index("ix_events_project_type_at", "project_id", "type", "at"),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    message_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("messages.id", ondelete="CASCADE"))
    project_id: Mapped[str] = mapped_column(String(64))
    type: Mapped[EventType] = mapped_column(_enum(EventType, EVENT_TYPE_LENGTH))
    at: Mapped[datetime] = _now()
    data: Mapped[dict[str, Any]] = mapped_column(server_default=EMPTY_JSON)


class Template(Base):
    """One immutable version of a template: every locale variant of it, as it was saved.

    A change makes a new row, so a message that recorded (key, version) renders the same
    words whenever it is prepared, and the worker may cache compiled versions for good.
    """

    __tablename__ = "templates"

    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), primary_key=True)
    key: Mapped[str] = mapped_column(String(128), primary_key=True)
    version: Mapped[int] = mapped_column(Integer, primary_key=True)
    channel: Mapped[Channel] = mapped_column(_enum(Channel))
    default_locale: Mapped[str] = mapped_column(String(35))
    # locale → {field: source}; fields per channel as in app.content.rendering.FIELDS.
    variants: Mapped[dict[str, Any]]
    # Email only: {"opens": bool, "clicks": bool} overriding the project's tracking switches.
    tracking: Mapped[dict[str, Any] | None]
    # Email only: {"from": {"email", "name"}, "reply_to": [...]}, what a send gives none of.
    sender: Mapped[dict[str, Any] | None]
    created_at: Mapped[datetime] = _now()


class Suppression(Base):
    """An address that must not be contacted on a channel, until `expires_at` if set."""

    __tablename__ = "suppressions"

    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), primary_key=True)
    channel: Mapped[Channel] = mapped_column(_enum(Channel), primary_key=True)
    address: Mapped[str] = mapped_column(Text, primary_key=True)
    reason: Mapped[SuppressionReason] = mapped_column(_enum(SuppressionReason))
    expires_at: Mapped[datetime | None]
    created_at: Mapped[datetime] = _now()
    updated_at: Mapped[datetime] = _now()


class ProjectProvider(Base):
    """A project's own account with a provider (bring your own account).

    The settings (the provider's environment variable names → values) are sealed with a key
    derived from TIDINGS_SECRET_KEY (app/vault.py): a database dump alone reveals no
    credentials. `updated_at` is what workers compare to know their cached adapter is stale.
    """

    __tablename__ = "project_providers"

    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), primary_key=True)
    provider: Mapped[str] = mapped_column(String(32), primary_key=True)
    sealed: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = _now()
    updated_at: Mapped[datetime] = _now()


class Engagement(Base):
    """Opens of a message and clicks per link: the first of each is an event, the rest a count."""

    __tablename__ = "message_engagements"

    message_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("messages.id", ondelete="CASCADE"), primary_key=True)
    kind: Mapped[EventType] = mapped_column(_enum(EventType, EVENT_TYPE_LENGTH), primary_key=True)
    # The clicked URL; empty for opens. Only URLs of at most 2,000 characters are tracked.
    link: Mapped[str] = mapped_column(Text, primary_key=True, server_default=text("''"))
    count: Mapped[int] = mapped_column(Integer, server_default=text("1"))
    first_at: Mapped[datetime] = _now()
    last_at: Mapped[datetime] = _now()


class InboxItem(Base):
    """An in-app notification in its subscriber's inbox; the words live with the message."""

    __tablename__ = "inbox_items"
    __table_args__ = (
        # Unread first, newest first, one subscriber at a time; unread counts read its prefix.
        Index("ix_inbox_items_subscriber", "project_id", "subscriber_id", "status", "created_at", "message_id"),
    )

    message_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("messages.id", ondelete="CASCADE"), primary_key=True)
    project_id: Mapped[str] = mapped_column(String(64))
    subscriber_id: Mapped[str] = mapped_column(String(255))
    status: Mapped[InboxStatus] = mapped_column(_enum(InboxStatus), server_default=text("'unread'"))
    created_at: Mapped[datetime] = _now()
    read_at: Mapped[datetime | None]
    archived_at: Mapped[datetime | None]


class WebhookEndpoint(Base):
    """Where a project wants its events POSTed; secrets are stored encrypted (app.crypto)."""

    __tablename__ = "webhook_endpoints"

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, server_default=text("gen_random_uuid()"))
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), index=True)
    url: Mapped[str] = mapped_column(Text)
    description: Mapped[str | None] = mapped_column(String(200))
    # Event types to send; empty: every type.
    event_types: Mapped[list[str]] = mapped_column(ARRAY(String(EVENT_TYPE_LENGTH)), server_default=text("'{}'"))
    # True: the endpoint takes a JSON array of events per POST.
    batch: Mapped[bool] = mapped_column(Boolean, server_default=text("false"))
    secret: Mapped[str] = mapped_column(Text)
    # After a rotation the old secret signs too, until it expires.
    previous_secret: Mapped[str | None] = mapped_column(Text)
    previous_secret_expires_at: Mapped[datetime | None]
    # Since when every attempt has failed; None after any success.
    failing_since: Mapped[datetime | None]
    disabled_at: Mapped[datetime | None]
    disabled_reason: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = _now()
    updated_at: Mapped[datetime] = _now()


class InboundReceipt(Base):
    """A provider status event already applied: a webhook replayed with the same event is a no-op.

    `source` is the provider, with `@project` for a project's own account; `key` is the
    provider's event id, or a digest of the event where the provider gives none.
    """

    __tablename__ = "inbound_receipts"

    source: Mapped[str] = mapped_column(String(100), primary_key=True)
    key: Mapped[str] = mapped_column(Text, primary_key=True)
    received_at: Mapped[datetime] = mapped_column(server_default=func.now(), index=True)


class WebhookDelivery(Base):
    """One signed POST to one endpoint (one event, or a batch of them), retried until it lands.

    Its id is the `webhook-id` header, the same on every attempt, so receivers deduplicate.
    """

    __tablename__ = "webhook_deliveries"
    __table_args__ = (
        Index("ix_webhook_deliveries_endpoint_created", "endpoint_id", "created_at"),
        Index(
            "ix_webhook_deliveries_due",
            "next_attempt_at",
            postgresql_where=text("status IN ('pending', 'retrying')"),
        ),
        Index("ix_webhook_deliveries_sending", "claimed_at", postgresql_where=text("status = 'sending'")),
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, server_default=text("gen_random_uuid()"))
    endpoint_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("webhook_endpoints.id", ondelete="CASCADE"))
    project_id: Mapped[str] = mapped_column(String(64))
    status: Mapped[WebhookDeliveryStatus] = mapped_column(
        _enum(WebhookDeliveryStatus), server_default=text("'pending'")
    )
    # The events as sent: a list of {"type", "timestamp", "data"} (one item unless batched).
    events: Mapped[list[dict[str, Any]]] = mapped_column(JSONB)
    attempts: Mapped[int] = mapped_column(SmallInteger, server_default=text("0"))
    next_attempt_at: Mapped[datetime | None] = mapped_column(server_default=func.now())
    claimed_at: Mapped[datetime | None]
    delivered_at: Mapped[datetime | None]
    created_at: Mapped[datetime] = _now()
    updated_at: Mapped[datetime] = _now()


class WebhookAttempt(Base):
    """One try of a delivery: what the receiver answered, or why there was no answer."""

    __tablename__ = "webhook_attempts"
    __table_args__ = (Index("ix_webhook_attempts_delivery_at", "delivery_id", "at"),)

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    delivery_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("webhook_deliveries.id", ondelete="CASCADE"))
    at: Mapped[datetime] = _now()
    status_code: Mapped[int | None] = mapped_column(SmallInteger)
    error: Mapped[str | None] = mapped_column(Text)
    response: Mapped[str | None] = mapped_column(Text)
    duration_ms: Mapped[int] = mapped_column(Integer)


class MessageCount(Base):
    """How many messages created in an hour are in each status, per project and channel.

    The digest reads this instead of counting `messages`, so it answers in the same time
    at ten million rows as at a hundred thousand. A trigger on `messages` appends every
    statement's net change to `message_count_deltas`; beat folds those in here (see
    migrations 0005 and tasks/rollup.py), so no two writers ever wait on one counter row.
    """

    __tablename__ = "message_counts"
    __table_args__ = (
        # One project's window, and the dead letters of all time, without reading every cell.
        Index("ix_message_counts_project_hour", "project_id", "hour"),
        Index("ix_message_counts_dead", "project_id", postgresql_where=text("status = 'dead'")),
    )

    hour: Mapped[datetime] = mapped_column(primary_key=True)
    project_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    channel: Mapped[str] = mapped_column(String(16), primary_key=True)
    status: Mapped[str] = mapped_column(String(16), primary_key=True)
    count: Mapped[int] = mapped_column(BigInteger)


class MessageCountDelta(Base):
    """A statement's net change to `message_counts`, written by the trigger, not yet folded."""

    __tablename__ = "message_count_deltas"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    hour: Mapped[datetime]
    project_id: Mapped[str] = mapped_column(String(64))
    channel: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(16))
    delta: Mapped[int] = mapped_column(BigInteger)


class QuotaGeneration(Base):
    """Which of PostgreSQL's daily quota decisions a project's channel counts from (app/access/quota.py).

    A new generation, from one sequence, with every decision PostgreSQL lets through when
    Redis could not decide; a Redis counter is trusted only while it carries the latest.
    """

    __tablename__ = "quota_generations"

    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), primary_key=True)
    channel: Mapped[str] = mapped_column(String(16), primary_key=True)
    generation: Mapped[int] = mapped_column(BigInteger)


class Workflow(Base):
    """One immutable version of a workflow: its steps as saved and as the engine runs them.

    A change makes a new row; a run names (key, version), so it keeps the steps it started with.
    """

    __tablename__ = "workflows"

    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), primary_key=True)
    key: Mapped[str] = mapped_column(String(128), primary_key=True)
    version: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    # What the client PUT, given back as it was; `compiled` is what app/workflows/definition.py
    # made of it: plain steps, the fallback short form spelled out, durations in seconds.
    definition: Mapped[dict[str, Any]]
    compiled: Mapped[dict[str, Any]]
    created_at: Mapped[datetime] = _now()


class WorkflowTrigger(Base):
    """One POST /v1/workflows/{key}/trigger: the runs it started, and its Idempotency-Key.

    A trigger for a topic writes its runs a chunk of members at a time (tasks/workflows.py):
    `fanout_after` is the last member written, `fanout_at` its last progress.
    """

    __tablename__ = "workflow_triggers"
    __table_args__ = (
        UniqueConstraint("project_id", "test", "idempotency_key", name="uq_workflow_triggers_idempotency_key"),
        ForeignKeyConstraint(
            ["project_id", "workflow_key", "workflow_version"],
            ["workflows.project_id", "workflows.key", "workflows.version"],
            ondelete="CASCADE",
        ),
        Index(
            "ix_workflow_triggers_fanout_pending",
            "fanout_at",
            postgresql_where=text("topic IS NOT NULL AND fanout_done_at IS NULL"),
        ),
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True)
    project_id: Mapped[str] = mapped_column(String(64))
    workflow_key: Mapped[str] = mapped_column(String(128))
    workflow_version: Mapped[int] = mapped_column(Integer)
    test: Mapped[bool] = mapped_column(Boolean)
    trigger_key: Mapped[str | None] = mapped_column(String(255))
    data: Mapped[dict[str, Any]]
    idempotency_key: Mapped[str | None] = mapped_column(String(255))
    request_hash: Mapped[str | None] = mapped_column(String(64))
    response: Mapped[dict[str, Any] | None]
    topic: Mapped[str | None] = mapped_column(String(128))
    fanout_after: Mapped[str | None] = mapped_column(String(255))
    fanout_at: Mapped[datetime | None]
    fanout_done_at: Mapped[datetime | None]
    created_at: Mapped[datetime] = _now()


class WorkflowRun(Base):
    """One recipient's way through one version of a workflow: the step it is at and its state.

    The engine (app/workflows/engine.py) moves runs in sets, each change conditional on the
    step the run is at, so a repeated task moves nothing twice. `due_at` is when the current
    step may run (a delay's end, a digest's close); a run `parked` waits for beat to release
    it, the others for a countdown task already sent.
    """

    __tablename__ = "workflow_runs"
    __table_args__ = (
        ForeignKeyConstraint(
            ["project_id", "workflow_key", "workflow_version"],
            ["workflows.project_id", "workflows.key", "workflows.version"],
            ondelete="CASCADE",
        ),
        ForeignKeyConstraint(
            ["project_id", "subscriber_id"], ["subscribers.project_id", "subscribers.external_id"], ondelete="CASCADE"
        ),
        # Cancelling by trigger key; throttle counts per subscriber, and the cascade when one is deleted.
        Index("ix_workflow_runs_trigger_key", "project_id", "workflow_key", "trigger_key"),
        Index("ix_workflow_runs_subscriber", "project_id", "subscriber_id", "workflow_key", "created_at"),
        Index("ix_workflow_runs_trigger", "trigger_id"),
        # Beat's two looks, each only at runs still running: parked ones come due, others stopped moving.
        Index("ix_workflow_runs_parked", "due_at", postgresql_where=text("status = 'running' AND parked")),
        Index("ix_workflow_runs_moving", "updated_at", postgresql_where=text("status = 'running' AND NOT parked")),
        Index("ix_workflow_runs_digest", "digest_id", postgresql_where=text("digest_id IS NOT NULL")),
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True)
    project_id: Mapped[str] = mapped_column(String(64))
    workflow_key: Mapped[str] = mapped_column(String(128))
    workflow_version: Mapped[int] = mapped_column(Integer)
    trigger_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("workflow_triggers.id", ondelete="CASCADE"))
    trigger_key: Mapped[str | None] = mapped_column(String(255))
    subscriber_id: Mapped[str] = mapped_column(String(255))
    test: Mapped[bool] = mapped_column(Boolean)
    # Empty: the trigger's data, read from there (a trigger for 10,000 stores its data once).
    # A run that gathered a digest keeps its own: the trigger's, with `items` and `count`.
    data: Mapped[dict[str, Any] | None]
    status: Mapped[RunStatus] = mapped_column(_enum(RunStatus), server_default=text("'running'"))
    step: Mapped[int] = mapped_column(SmallInteger, server_default=text("0"))
    due_at: Mapped[datetime | None]
    parked: Mapped[bool] = mapped_column(Boolean, server_default=text("false"))
    digest_id: Mapped[uuid.UUID | None]
    reason: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = _now()
    updated_at: Mapped[datetime] = _now()
    ended_at: Mapped[datetime | None]


class WorkflowRunStep(Base):
    """What one step did for one run: its outcome, and the message a `send` step wrote."""

    __tablename__ = "workflow_run_steps"

    run_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("workflow_runs.id", ondelete="CASCADE"), primary_key=True)
    step: Mapped[int] = mapped_column(SmallInteger, primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))
    outcome: Mapped[str] = mapped_column(String(32))
    message_id: Mapped[uuid.UUID | None]
    # A throttle's key, a digest's id and count, a branch's reading: what the outcome rests on.
    detail: Mapped[dict[str, Any] | None]
    at: Mapped[datetime] = _now()


class WorkflowDigest(Base):
    """The digest a `digest` step is gathering for one subscriber and digest key.

    Open until `closes_at`; the first run to arrive leads it and, once it is flushed, goes on
    with every gathered run's data. The partial unique index admits one open digest per
    subscriber and key, so two triggers arriving together land in the same one.
    """

    __tablename__ = "workflow_digests"
    __table_args__ = (
        Index(
            "uq_workflow_digests_open",
            "project_id",
            "workflow_key",
            "step",
            "subscriber_id",
            "digest_key",
            unique=True,
            postgresql_where=text("flushed_at IS NULL"),
        ),
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True)
    project_id: Mapped[str] = mapped_column(String(64))
    workflow_key: Mapped[str] = mapped_column(String(128))
    step: Mapped[int] = mapped_column(SmallInteger)
    subscriber_id: Mapped[str] = mapped_column(String(255))
    digest_key: Mapped[str] = mapped_column(String(255))
    leader_id: Mapped[uuid.UUID]
    closes_at: Mapped[datetime]
    # A sliding window moves `closes_at` with each arrival, never past this.
    latest_close_at: Mapped[datetime]
    flushed_at: Mapped[datetime | None]
    created_at: Mapped[datetime] = _now()


# Every status column, and the vocabulary it holds. A CHECK constraint built from the enum
# guards each (migration 0018), so a misspelt status in SQL is an error, not a row no query
# ever finds; tests/test_migrations.py holds the database's constraints to these enums.
STATUS_COLUMNS: dict[tuple[str, str], type[StrEnum]] = {
    ("messages", "status"): MessageStatus,
    ("message_counts", "status"): MessageStatus,
    ("message_count_deltas", "status"): MessageStatus,
    ("push_deliveries", "status"): DeviceStatus,
    ("inbox_items", "status"): InboxStatus,
    ("webhook_deliveries", "status"): WebhookDeliveryStatus,
    ("workflow_runs", "status"): RunStatus,
}


def status_check_name(table: str, column: str) -> str:
    return f"ck_{table}_{column}"


def _add_status_checks() -> None:
    """Give each status column's table its CHECK constraint, as migration 0018 made them."""
    for (table, column), vocabulary in STATUS_COLUMNS.items():
        allowed = ", ".join(f"'{member.value}'" for member in vocabulary)
        Base.metadata.tables[table].append_constraint(
            CheckConstraint(f"{column} IN ({allowed})", name=status_check_name(table, column))
        )


_add_status_checks()
