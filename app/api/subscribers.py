"""Project routes for subscribers and their preferences."""

from __future__ import annotations

from typing import Any

from flask import g

from app.api import contract
from app.api.context import context
from app.api.project import large_body, project_blueprint
from app.errors import field_error
from app.pagination import PageArgsSchema
from app.schemas.audience import (
    ImportResultSchema,
    PreferenceLinkRequestSchema,
    PreferenceLinkSchema,
    PreferencesSchema,
    SubscriberImportSchema,
    SubscriberOutSchema,
    SubscriberPageSchema,
    SubscriberProfileSchema,
    SubscriberSchema,
)
from app.schemas.events import SubscriberTokenRequestSchema, SubscriberTokenSchema
from app.services import inbox, preference_page, preferences, subscribers

MAX_EXTERNAL_ID = 255

blp = project_blueprint("subscribers", __name__, contract.AUDIENCE, "Who gets notifications, and what they want.")


@blp.route("/subscribers/<external_id>", methods=["PUT"])
@blp.arguments(SubscriberSchema)
@blp.response(200, SubscriberOutSchema, description="Updated.")
@blp.alt_response(201, schema=SubscriberOutSchema, description="Created.")
def put_subscriber(profile: dict[str, Any], external_id: str):
    """Create or replace a subscriber.

    Create or replace a subscriber's profile; fields left out are cleared, preferences kept.
    """
    if len(external_id) > MAX_EXTERNAL_ID:
        field_error(422, "Invalid request.", "path", "external_id", "Use 1 to 255 characters.")
    row = subscribers.put(context().db, g.caller.project_id, external_id, profile)
    return row, 201 if row.created else 200


@blp.route("/subscribers/<external_id>", methods=["GET"])
@blp.response(200, SubscriberProfileSchema)
def get_subscriber(external_id: str):
    """Get a subscriber.

    The subscriber's profile: addresses, push tokens, locale, time zone and data, and the topics it follows.
    """
    return subscribers.profile(context().db, g.caller.project_id, external_id)


@blp.route("/subscribers/<external_id>", methods=["DELETE"])
@blp.response(204)
def erase_subscriber(external_id: str):
    """Erase a subscriber.

    Erasure: the subscriber goes; its messages keep ids, statuses, times and events only.
    """
    subscribers.erase(context().db, g.caller.project_id, external_id)


@blp.route("/subscribers", methods=["GET"])
@blp.arguments(PageArgsSchema, location="query")
@blp.response(200, SubscriberPageSchema)
def list_subscribers(args: dict[str, Any]):
    """List subscribers.

    The project's subscribers by external id, a page at a time.
    """
    return subscribers.list_page(context().db, g.caller.project_id, args.get("cursor"), args["limit"])


@blp.route("/subscribers/import", methods=["POST"])
@blp.arguments(SubscriberImportSchema)
@blp.response(200, ImportResultSchema)
@large_body
def import_subscribers(body: dict[str, Any]):
    """Import subscribers.

    Upsert up to 10,000 subscribers at once; bad rows are reported by index, good ones written.
    """
    return subscribers.import_many(context().db, g.caller.project_id, body["subscribers"])


@blp.route("/subscribers/<external_id>/preferences", methods=["GET"])
@blp.response(200, PreferencesSchema)
def get_preferences(external_id: str):
    """Get a subscriber's preferences.

    The subscriber's switches per channel and per category, and quiet hours.
    """
    return preferences.get(context().db, g.caller.project_id, external_id)


@blp.route("/subscribers/<external_id>/preferences", methods=["PUT"])
@blp.arguments(PreferencesSchema)
@blp.response(200, PreferencesSchema)
def put_preferences(body: dict[str, Any], external_id: str):
    """Replace a subscriber's preferences.

    Replace the subscriber's switches and quiet hours; required categories ignore them.
    """
    return preferences.put(context().db, g.caller.project_id, external_id, body)


@blp.route("/subscribers/<external_id>/token", methods=["POST"])
@blp.arguments(SubscriberTokenRequestSchema)
@blp.response(200, SubscriberTokenSchema)
def mint_subscriber_token(body: dict[str, Any], external_id: str):
    """Mint a subscriber token.

    A short-lived token for this subscriber's browser: its inbox and inbox stream, nothing else.
    """
    return inbox.mint_token(context().db, g.caller.project_id, external_id, body["ttl_seconds"])


@blp.route("/subscribers/<external_id>/preference-link", methods=["POST"])
@blp.arguments(PreferenceLinkRequestSchema)
@blp.response(200, PreferenceLinkSchema)
def mint_preference_link(body: dict[str, Any], external_id: str):
    """Make a preference link.

    A signed link to the subscriber's own preference page, for a message or a reply. Whoever
    holds it may change this subscriber's preferences (and nothing else) until it expires:
    give it to the subscriber only. Templates get one as `{{ preferences_url }}`.
    """
    return preference_page.link(
        context().db, context().settings.public_url, g.caller.project_id, external_id, body["expires_in"]
    )
