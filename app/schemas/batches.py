"""Schemas for batches: one send to up to 10,000 recipients, and its counts."""

from __future__ import annotations

from typing import Any

from marshmallow import Schema, fields

from app.enums import Priority
from app.schemas.core import MessageFieldsSchema, RecipientSchema
from app.schemas.nesting import Data
from app.schemas.topics import TOPIC_KEY

MAX_RECIPIENTS = 10_000


class BatchRecipientSchema(RecipientSchema):
    """One recipient of a batch: exactly one address, and its own data merged over the batch's."""

    data = Data()


class TopicAudienceSchema(Schema):
    """A send to everyone who follows a topic when it is sent."""

    topic = fields.String(required=True, validate=TOPIC_KEY, metadata={"description": "The topic's key."})


class Audience(fields.Field):
    """The recipient rows as given, or a topic.

    Rows are checked one by one by `app.services.batches.check_recipients`: a bad row must
    not fail the whole batch but be answered by its index, and a schema load per row costs
    several times the hand-written check at 10,000 rows; so a list is only checked for its
    type and length here. A topic is a whole audience, checked here, and has no cap.
    """

    default_error_messages = {
        "invalid": 'Give a list of recipients or {{"topic": key}}.',  # braces doubled: the message is formatted
        "length": "Give 1 to 10,000 recipients.",
    }

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> list[Any] | dict[str, str]:
        if isinstance(value, dict):
            return TopicAudienceSchema().load(value)
        if not isinstance(value, list):
            raise self.make_error("invalid")
        if not 1 <= len(value) <= MAX_RECIPIENTS:
            raise self.make_error("length")
        return value


# How the spec shows `recipients`: either form, each as its schema (registered by app/api/contract.py).
AUDIENCE_FORMS = [
    {
        "type": "array",
        "items": {"$ref": "#/components/schemas/BatchRecipient"},
        "minItems": 1,
        "maxItems": MAX_RECIPIENTS,
    },
    {"$ref": "#/components/schemas/TopicAudience"},
]


class BatchSendSchema(MessageFieldsSchema):
    priority = fields.Enum(Priority, by_value=True, load_default=Priority.BULK)
    recipients = Audience(
        required=True,
        metadata={
            "oneOf": AUDIENCE_FORMS,
            "description": "1 to 10,000 recipient rows, or a topic: every subscriber following it when it is sent.",
        },
    )


class RejectedRowSchema(Schema):
    index = fields.Integer(metadata={"description": "The row's place in `recipients`, from 0."})
    errors = fields.Dict(metadata={"description": 'Field errors of the row, e.g. {"email": ["Not a valid …"]}.'})


class BatchAcceptedSchema(Schema):
    batch_id = fields.String()
    accepted = fields.Integer(metadata={"description": "Messages created, one per valid recipient."})
    rejected = fields.List(fields.Nested(RejectedRowSchema), metadata={"description": "The rows refused."})
    copies = fields.Integer(
        metadata={
            "description": "With cc or bcc only: the messages made for them, one per accepted recipient and address."
        }
    )


class BatchSchema(Schema):
    id = fields.String()
    channel = fields.String()
    priority = fields.String()
    category = fields.String(allow_none=True)
    template = fields.String(allow_none=True)
    template_version = fields.Integer(allow_none=True)
    test = fields.Boolean(metadata={"description": "Sent with a test key: no message reaches a provider."})
    accepted = fields.Integer(metadata={"description": "Messages the batch created."})
    rejected = fields.Integer(metadata={"description": "Recipient rows it refused."})
    scheduled_at = fields.DateTime(allow_none=True)
    created_at = fields.DateTime()
    counts = fields.Dict(
        keys=fields.String(),
        values=fields.Integer(),
        metadata={"description": 'The batch\'s messages by status now, e.g. {"sent": 9990, "failed": 8}.'},
    )
