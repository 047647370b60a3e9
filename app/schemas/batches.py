"""Schemas for batches: one send to up to 10,000 recipients, and its counts."""

from __future__ import annotations

from typing import Any

from marshmallow import Schema, fields, validate

from app.enums import Priority
from app.schemas.core import MessageFieldsSchema, RecipientSchema

MAX_RECIPIENTS = 10_000


class BatchRecipientSchema(RecipientSchema):
    """One recipient of a batch: exactly one address, and its own data merged over the batch's."""

    data = fields.Dict(keys=fields.String())


class RecipientRows(fields.List):
    """The recipient rows as given, checked one by one by `app.services.batches.check_recipients`.

    A bad row must not fail the whole batch but be answered by its index, and a schema load
    per row costs several times the hand-written check at 10,000 rows; so the list is only
    checked for its type here. The inner schema documents a row in the OpenAPI spec.
    """

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> list[Any]:
        if not isinstance(value, list):
            raise self.make_error("invalid")
        return value


class BatchSendSchema(MessageFieldsSchema):
    priority = fields.Enum(Priority, by_value=True, load_default=Priority.BULK)
    recipients = RecipientRows(
        fields.Nested(BatchRecipientSchema),
        required=True,
        validate=validate.Length(1, MAX_RECIPIENTS, error="Give 1 to 10,000 recipients."),
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
