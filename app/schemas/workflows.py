"""Schemas for workflows: a version's steps, a trigger, a cancel, and a run with its steps.

The steps are checked and compiled by app/workflows/definition.py, which knows each kind;
the schema takes them as a list of objects, so a 422 names each problem by step index.
"""

from __future__ import annotations

from typing import Any, cast

from marshmallow import Schema, ValidationError, fields, validate

from app.schemas.batches import TopicAudienceSchema
from app.schemas.nesting import MAX_DATA_DEPTH, shallow
from app.schemas.topics import MAX_MEMBERS_PER_CALL

MAX_DATA_CHARS = 32_000
SUBSCRIBER_IDS = fields.List(
    fields.String(validate=validate.Length(1, 255)),
    validate=validate.Length(1, MAX_MEMBERS_PER_CALL, error="Give 1 to 10,000 subscriber ids."),
)

STEPS_DESCRIPTION = (
    "1 to 20 steps, each an object with one key, its kind: `send` (`channel`, `template`, optional `category`, "
    "`priority`: `bulk` unless given, as for a batch; or the fallback short form `channels`, `templates` by "
    "channel, `fallback_after`, `unless`), "
    "`delay` (`for` a duration, or `until` a time in the data as `{{ name }}` with an optional `offset`; a run whose "
    "time with its offset is more than a year from now, either way, fails), "
    "`branch` (`if` or `unless` a condition), `digest` (`window`, optional `sliding` with `max`, `key`), "
    "`throttle` (`limit`, `window`, optional `key`). Durations: `90s`, `10m`, `2h`, `1d`. README: Workflows."
)


def trigger_data(value: dict[str, Any]) -> None:
    """Refuse data nested too deep before measuring it (repr recurses), then too long: every step reads it."""
    shallow(value)
    if len(repr(value)) > MAX_DATA_CHARS:
        raise ValidationError(f"At most {MAX_DATA_CHARS:,} characters.")


class WorkflowSchema(Schema):
    name = fields.String(required=True, validate=validate.Length(1, 200))
    steps = fields.List(fields.Dict(), required=True, metadata={"description": STEPS_DESCRIPTION})


class WorkflowOutSchema(Schema):
    key = fields.String()
    version = fields.Integer(metadata={"description": "Runs keep the version they started with."})
    name = fields.String()
    steps = fields.List(fields.Dict(), metadata={"description": "As saved."})
    created_at = fields.DateTime()


class WorkflowVersionArgsSchema(Schema):
    version = fields.Integer(validate=validate.Range(min=1), metadata={"description": "A version; the latest if none."})


class SubscriberAudience(fields.Field):
    """Subscriber ids, or a topic: every subscriber following it when the workflow is triggered."""

    default_error_messages = {"invalid": 'Give a list of subscriber ids or {{"topic": key}}.'}

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> list[str] | dict[str, str]:
        if isinstance(value, dict):
            return TopicAudienceSchema().load(value)
        if not isinstance(value, list):
            raise self.make_error("invalid")
        return cast(list[str], SUBSCRIBER_IDS.deserialize(value))  # its String allows no None


class TriggerSchema(Schema):
    recipients = SubscriberAudience(
        required=True,
        metadata={
            "oneOf": [
                {
                    "type": "array",
                    "items": {"type": "string", "minLength": 1, "maxLength": 255},
                    "minItems": 1,
                    "maxItems": MAX_MEMBERS_PER_CALL,
                },
                {"$ref": "#/components/schemas/TopicAudience"},
            ],
            "description": "1 to 10,000 subscriber ids (one run each), or a topic: a run per subscriber following it.",
        },
    )
    data = fields.Dict(
        load_default=dict,
        validate=trigger_data,
        metadata={
            "description": "For the templates, conditions and keys of the steps; at most 32,000 characters, "
            f"nested at most {MAX_DATA_DEPTH} deep."
        },
    )
    trigger_key = fields.String(
        validate=validate.Length(1, 255),
        metadata={"description": "Yours, to cancel these runs by later (`order-17`)."},
    )


class TriggerAcceptedSchema(Schema):
    runs = fields.Integer(metadata={"description": "Runs started: one per subscriber (for a topic, its members now)."})
    trigger_id = fields.String()


class CancelSchema(Schema):
    trigger_key = fields.String(required=True, validate=validate.Length(1, 255))
    recipients = fields.List(
        fields.String(validate=validate.Length(1, 255)),
        validate=validate.Length(1, MAX_MEMBERS_PER_CALL, error="Give 1 to 10,000 subscriber ids."),
        metadata={"description": "Only these subscribers' runs; all of the trigger key's if none."},
    )


class CancelledSchema(Schema):
    cancelled = fields.Integer(metadata={"description": "Runs stopped; those that had ended are left as they were."})


class RunStepSchema(Schema):
    step = fields.Integer(metadata={"description": "The step's index, the fallback short form spelled out."})
    kind = fields.String()
    outcome = fields.String(
        metadata={"description": "sent, waited, continued, stopped, passed, throttled, digested, flushed or failed."}
    )
    message_id = fields.String(allow_none=True)
    message_status = fields.String(allow_none=True, metadata={"description": "The message's status now."})
    detail = fields.Dict(allow_none=True)
    at = fields.DateTime()


class WorkflowRunSchema(Schema):
    id = fields.String()
    workflow = fields.String()
    version = fields.Integer()
    trigger_id = fields.String()
    trigger_key = fields.String(allow_none=True)
    subscriber_id = fields.String()
    test = fields.Boolean()
    data = fields.Dict()
    status = fields.String(metadata={"description": "running, completed, cancelled, failed, throttled or digested."})
    step = fields.Integer(metadata={"description": "The step it is at (or ended at)."})
    due_at = fields.DateTime(allow_none=True, metadata={"description": "When a waiting run goes on."})
    reason = fields.String(allow_none=True)
    created_at = fields.DateTime()
    updated_at = fields.DateTime()
    ended_at = fields.DateTime(allow_none=True)
    steps = fields.List(fields.Nested(RunStepSchema))
