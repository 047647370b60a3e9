"""Schemas for the delivery log, webhook endpoints and the in-app inbox."""

from __future__ import annotations

from typing import Any

from marshmallow import Schema, ValidationError, fields, validate, validates
from webargs.fields import DelimitedList

from app.enums import PUBLIC_EVENT_TYPES, InboxStatus, WebhookDeliveryStatus
from app.pagination import PageArgsSchema, page_schema
from app.schemas.text import webhook_url
from app.schemas.times import UtcDateTime

EVENT_TYPE_NAMES = [t.value for t in PUBLIC_EVENT_TYPES]


class EventQuerySchema(PageArgsSchema):
    message_id = fields.UUID()
    subscriber_id = fields.String(validate=validate.Length(1, 255))
    batch_id = fields.UUID()
    type = DelimitedList(
        fields.String(validate=validate.OneOf(EVENT_TYPE_NAMES)),
        validate=validate.Length(min=1),
        metadata={"description": "One type or several, comma-separated: `type=delivered,opened`."},
    )
    since = UtcDateTime()
    until = UtcDateTime()


class LogEntrySchema(Schema):
    id = fields.String(metadata={"description": "evt_… for a stored event, sent_<message id> for a send."})
    type = fields.String()
    at = fields.String(metadata={"format": "date-time"})
    message_id = fields.String(allow_none=True)
    channel = fields.String(allow_none=True)
    subscriber_id = fields.String(allow_none=True)
    batch_id = fields.String(allow_none=True)
    data = fields.Dict()


LogPageSchema = page_schema(LogEntrySchema, "LogPage")


class WebhookEndpointCreateSchema(Schema):
    url = webhook_url(required=True, validate=validate.Length(max=2048))
    description = fields.String(validate=validate.Length(1, 200), allow_none=True)
    event_types = fields.List(
        fields.String(validate=validate.OneOf(EVENT_TYPE_NAMES)),
        load_default=list,
        metadata={"description": "Types to send; empty: all."},
    )
    batch = fields.Boolean(
        load_default=False, metadata={"description": "True: POST a JSON array of up to 100 events at a time."}
    )

    @validates("url")
    def no_credentials(self, value: str, **_: Any) -> None:
        if "@" in value.split("/")[2]:
            raise ValidationError("Put no credentials in the URL; verify our signature instead.")


class WebhookEndpointUpdateSchema(WebhookEndpointCreateSchema):
    url = webhook_url(validate=validate.Length(max=2048))
    event_types = fields.List(fields.String(validate=validate.OneOf(EVENT_TYPE_NAMES)))
    batch = fields.Boolean()
    enabled = fields.Boolean(metadata={"description": "true re-enables a disabled endpoint."})


class WebhookEndpointSchema(Schema):
    id = fields.String()
    url = fields.String()
    description = fields.String(allow_none=True)
    event_types = fields.List(fields.String())
    batch = fields.Boolean()
    enabled = fields.Boolean()
    disabled_at = fields.DateTime(allow_none=True)
    disabled_reason = fields.String(allow_none=True)
    failing_since = fields.DateTime(allow_none=True)
    previous_secret_expires_at = fields.DateTime(allow_none=True)
    secret = fields.String(metadata={"description": "whsec_…: in the answers to creation and rotation only."})
    created_at = fields.DateTime()
    updated_at = fields.DateTime()


WebhookEndpointPageSchema = page_schema(WebhookEndpointSchema, "WebhookEndpointPage")


class DeliveryQuerySchema(PageArgsSchema):
    status = fields.Enum(WebhookDeliveryStatus, by_value=True)


class AttemptSchema(Schema):
    at = fields.DateTime()
    status_code = fields.Integer(allow_none=True)
    error = fields.String(allow_none=True)
    response = fields.String(allow_none=True)
    duration_ms = fields.Integer()


class DeliverySchema(Schema):
    id = fields.String()
    webhook_id = fields.String(metadata={"description": "The webhook-id header: the same on every attempt."})
    status = fields.String()
    events = fields.List(fields.Dict())
    attempts = fields.List(fields.Nested(AttemptSchema))
    next_attempt_at = fields.DateTime(allow_none=True)
    delivered_at = fields.DateTime(allow_none=True)
    created_at = fields.DateTime()


DeliveryPageSchema = page_schema(DeliverySchema, "DeliveryPage")


class InboxQuerySchema(PageArgsSchema):
    status = fields.Enum(
        InboxStatus,
        by_value=True,
        metadata={"description": "Only this state; by default unread and read, unread first."},
    )


class InboxItemSchema(Schema):
    id = fields.String()
    status = fields.String()
    category = fields.String(allow_none=True)
    title = fields.String(allow_none=True)
    body = fields.String(allow_none=True)
    data = fields.Dict(allow_none=True)
    created_at = fields.DateTime()
    read_at = fields.DateTime(allow_none=True)
    archived_at = fields.DateTime(allow_none=True)


InboxPageSchema = page_schema(InboxItemSchema, "InboxPage")


class InboxCountSchema(Schema):
    unread = fields.Integer()
    total = fields.Integer(metadata={"description": "Unread and read; archived items are not counted."})


class ChangedSchema(InboxCountSchema):
    changed = fields.Integer()


class SubscriberTokenRequestSchema(Schema):
    ttl_seconds = fields.Integer(load_default=3600, validate=validate.Range(60, 24 * 3600))


class SubscriberTokenSchema(Schema):
    token = fields.String()
    expires_at = fields.DateTime()
