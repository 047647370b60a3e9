"""Schemas for topics: what subscribers follow, and their members."""

from __future__ import annotations

from marshmallow import Schema, fields, validate

from app.pagination import page_schema
from app.schemas.audience import TEMPLATE_KEY

TOPIC_KEY = TEMPLATE_KEY  # a topic's key follows the same rule as a template's
MAX_MEMBERS_PER_CALL = 10_000


class TopicSchema(Schema):
    name = fields.String(required=True, validate=validate.Length(1, 200))
    description = fields.String(allow_none=True, validate=validate.Length(max=2000))


class TopicOutSchema(Schema):
    key = fields.String()
    name = fields.String()
    description = fields.String(allow_none=True)
    subscribers = fields.Integer(metadata={"description": "How many subscribers follow the topic now (GET only)."})
    created_at = fields.DateTime()
    updated_at = fields.DateTime()


class TopicMembersSchema(Schema):
    subscriber_ids = fields.List(
        fields.String(validate=validate.Length(1, 255)),
        required=True,
        validate=validate.Length(1, MAX_MEMBERS_PER_CALL, error="Give 1 to 10,000 subscriber ids."),
        metadata={"description": "External ids of the project's subscribers; repeats and current members are fine."},
    )


class MembersAddedSchema(Schema):
    added = fields.Integer(metadata={"description": "Subscribers that were not members before."})


class MembersRemovedSchema(Schema):
    removed = fields.Integer(metadata={"description": "Subscribers that were members."})


class TopicMemberSchema(Schema):
    subscriber_id = fields.String()
    added_at = fields.DateTime()


TopicMemberPageSchema = page_schema(TopicMemberSchema, "TopicMemberPage")
