"""Project routes for outbound webhook endpoints and their deliveries, and for the secret
the webhook channel signs the project's messages with."""

from __future__ import annotations

from typing import Any

from flask import g

from app.api import contract
from app.api.context import context
from app.api.project import project_blueprint
from app.pagination import PageArgsSchema
from app.schemas.core import SigningSecretSchema
from app.schemas.events import (
    DeliveryPageSchema,
    DeliveryQuerySchema,
    DeliverySchema,
    WebhookEndpointCreateSchema,
    WebhookEndpointPageSchema,
    WebhookEndpointSchema,
    WebhookEndpointUpdateSchema,
)
from app.services import projects, webhooks

blp = project_blueprint("webhooks", __name__, contract.EVENTS, "Signed webhooks (Standard Webhooks) for log events.")


@blp.route("/webhooks", methods=["POST"])
@blp.arguments(WebhookEndpointCreateSchema)
@blp.response(201, WebhookEndpointSchema)
def create_endpoint(data: dict[str, Any]):
    """Create a webhook endpoint.

    A new endpoint; its `secret` (whsec_…) is in this answer only.
    """
    return webhooks.create(context().db, g.caller.project_id, data)


@blp.route("/webhooks", methods=["GET"])
@blp.arguments(PageArgsSchema, location="query")
@blp.response(200, WebhookEndpointPageSchema)
def list_endpoints(args: dict[str, Any]):
    """List webhook endpoints.

    The project's endpoints, with their filters, batching and state.
    """
    return webhooks.list_page(context().db, g.caller.project_id, args.get("cursor"), args["limit"])


@blp.route("/webhooks/<endpoint_id>", methods=["GET"])
@blp.response(200, WebhookEndpointSchema)
def get_endpoint(endpoint_id: str):
    """Get a webhook endpoint.

    One endpoint, with its filters, batching and state (never its secret).
    """
    return webhooks.get(context().db, g.caller.project_id, endpoint_id)


@blp.route("/webhooks/<endpoint_id>", methods=["PATCH"])
@blp.arguments(WebhookEndpointUpdateSchema)
@blp.response(200, WebhookEndpointSchema)
def change_endpoint(data: dict[str, Any], endpoint_id: str):
    """Change a webhook endpoint.

    Change the URL, filters or batching; `enabled: true` re-enables a disabled endpoint.
    """
    return webhooks.change(context().db, g.caller.project_id, endpoint_id, data)


@blp.route("/webhooks/<endpoint_id>", methods=["DELETE"])
@blp.response(204)
def delete_endpoint(endpoint_id: str):
    """Delete a webhook endpoint.

    No more events go to it.
    """
    webhooks.delete(context().db, g.caller.project_id, endpoint_id)


@blp.route("/webhooks/<endpoint_id>/rotate", methods=["POST"])
@blp.response(200, WebhookEndpointSchema)
def rotate_secret(endpoint_id: str):
    """Rotate a webhook endpoint's secret.

    A new secret (in this answer only); the old one keeps signing beside it for 24 hours.
    """
    return webhooks.rotate(context().db, g.caller.project_id, endpoint_id)


@blp.route("/webhooks/<endpoint_id>/deliveries", methods=["GET"])
@blp.arguments(DeliveryQuerySchema, location="query")
@blp.response(200, DeliveryPageSchema)
def list_deliveries(args: dict[str, Any], endpoint_id: str):
    """List a webhook endpoint's deliveries.

    Deliveries newest first, with every attempt: status code, error, response, duration.
    """
    return webhooks.deliveries(
        context().db, g.caller.project_id, endpoint_id, args.get("status"), args.get("cursor"), args["limit"]
    )


@blp.route("/webhooks/<endpoint_id>/deliveries/<delivery_id>/replay", methods=["POST"])
@blp.response(202, DeliverySchema)
@blp.alt_response(409)
def replay_delivery(endpoint_id: str, delivery_id: str):
    """Replay a webhook delivery.

    Send a delivery again now, with the same webhook-id (receivers deduplicate on it).
    """
    return webhooks.replay(context().db, g.caller.project_id, endpoint_id, delivery_id)


@blp.route("/webhook-signing-secret/rotate", methods=["POST"])
@blp.response(200, SigningSecretSchema)
def rotate_own_signing_secret():
    """Rotate the webhook channel's signing secret.

    A new secret for the webhook channel's messages (in this answer only); the old one keeps signing beside it
    for 24 hours.
    """
    return projects.rotate_signing_secret(context().db, g.caller.project_id)
