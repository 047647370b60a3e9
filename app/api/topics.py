"""Project routes for topics: what subscribers follow, so one send reaches all of them."""

from __future__ import annotations

from typing import Any

from flask import g
from marshmallow import ValidationError

from app.api import contract
from app.api.context import context
from app.api.project import large_body, project_blueprint
from app.errors import field_error
from app.pagination import PageArgsSchema
from app.schemas.topics import (
    TOPIC_KEY,
    MembersAddedSchema,
    MembersRemovedSchema,
    TopicMemberPageSchema,
    TopicMembersSchema,
    TopicOutSchema,
    TopicSchema,
)
from app.services import topics

blp = project_blueprint("topics", __name__, contract.AUDIENCE, "Topics subscribers follow; a send to one reaches all.")


@blp.route("/topics/<topic_key>", methods=["PUT"])
@blp.arguments(TopicSchema)
@blp.response(200, TopicOutSchema, description="Updated.")
@blp.alt_response(201, schema=TopicOutSchema, description="Created.")
def put_topic(fields: dict[str, Any], topic_key: str):
    """Create or update a topic.

    Create the topic, or replace its name and description; its members stay.
    """
    try:
        TOPIC_KEY(topic_key)
    except ValidationError as error:
        field_error(422, "Invalid request.", "path", "topic_key", error.messages[0])
    row = topics.put(context().db, g.caller.project_id, topic_key, fields)
    return row, 201 if row.created else 200


@blp.route("/topics/<topic_key>", methods=["GET"])
@blp.response(200, TopicOutSchema)
def get_topic(topic_key: str):
    """Get a topic.

    The topic, with how many subscribers follow it now.
    """
    return topics.get(context().db, g.caller.project_id, topic_key)


@blp.route("/topics/<topic_key>", methods=["DELETE"])
@blp.response(204)
def delete_topic(topic_key: str):
    """Delete a topic.

    The topic goes, and every membership in it; messages already sent to it stay.
    """
    topics.delete(context().db, g.caller.project_id, topic_key)


@blp.route("/topics/<topic_key>/subscribers", methods=["POST"])
@blp.arguments(TopicMembersSchema)
@blp.response(200, MembersAddedSchema)
@large_body
def add_topic_subscribers(body: dict[str, Any], topic_key: str):
    """Add subscribers to a topic.

    Up to 10,000 subscriber ids in one call; current members are left as they are. A call naming a subscriber
    the project does not have adds no one (422, with the unknown ids).
    """
    return topics.add_members(context().db, g.caller.project_id, topic_key, body["subscriber_ids"])


@blp.route("/topics/<topic_key>/subscribers", methods=["DELETE"])
@blp.arguments(TopicMembersSchema)
@blp.response(200, MembersRemovedSchema)
@large_body
def remove_topic_subscribers(body: dict[str, Any], topic_key: str):
    """Remove subscribers from a topic.

    Up to 10,000 subscriber ids in one call; ids that are not members are ignored.
    """
    return topics.remove_members(context().db, g.caller.project_id, topic_key, body["subscriber_ids"])


@blp.route("/topics/<topic_key>/subscribers", methods=["GET"])
@blp.arguments(PageArgsSchema, location="query")
@blp.response(200, TopicMemberPageSchema)
def list_topic_subscribers(args: dict[str, Any], topic_key: str):
    """List a topic's subscribers.

    The topic's members by subscriber id, a page at a time, with when each joined.
    """
    return topics.members_page(context().db, g.caller.project_id, topic_key, args.get("cursor"), args["limit"])
