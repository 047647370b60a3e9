"""Project routes for the suppression list."""

from __future__ import annotations

from typing import Any

from flask import g

from app.api import contract
from app.api.context import context
from app.api.project import project_blueprint
from app.schemas.audience import (
    SuppressionCreateSchema,
    SuppressionListArgsSchema,
    SuppressionPageSchema,
    SuppressionSchema,
)
from app.services import suppressions

blp = project_blueprint("suppressions", __name__, contract.AUDIENCE, "Addresses that must not be contacted.")


@blp.route("/suppressions", methods=["POST"])
@blp.arguments(SuppressionCreateSchema)
@blp.response(201, SuppressionSchema, description="Created.")
@blp.alt_response(200, schema=SuppressionSchema, description="Updated: new reason and expiry.")
def add_suppression(data: dict[str, Any]):
    """Suppress an address.

    No message goes to the address on the channel until the suppression is removed or expires; suppressing it
    again updates the reason and expiry (200).
    """
    row, created = suppressions.create(context().db, g.caller.project_id, data)
    return row, 201 if created else 200


@blp.route("/suppressions", methods=["GET"])
@blp.arguments(SuppressionListArgsSchema, location="query")
@blp.response(200, SuppressionPageSchema)
def list_suppressions(args: dict[str, Any]):
    """List suppressions.

    The project's suppressed addresses, optionally of one channel, a page at a time.
    """
    return suppressions.list_page(
        context().db, g.caller.project_id, args.get("channel"), args.get("cursor"), args["limit"]
    )


@blp.route("/suppressions/<channel>/<path:address>", methods=["DELETE"])
@blp.response(204)
def remove_suppression(channel: str, address: str):
    """Remove a suppression.

    The address may be contacted again on that channel.
    """
    suppressions.remove(context().db, g.caller.project_id, channel, address)
