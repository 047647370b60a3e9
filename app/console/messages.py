"""Console pages for the delivery log: filter and page through messages, read one with its
timeline, content and webhook deliveries, cancel it or (admin) requeue it."""

from __future__ import annotations

import re
from typing import Any

from flask import Response, abort, flash, redirect, render_template, request, url_for

from app.console.blueprint import blp, read_form
from app.console.session import project_page, signed_in_viewer, tidings
from app.enums import REQUEUABLE_STATUSES, Channel, MessageStatus
from app.errors import uuid_or_404
from app.schemas.core import MessageQuerySchema
from app.services import messages, operations, webhooks

FILTERS = ("status", "channel", "to", "subscriber_id", "batch_id", "template", "since", "until")
PAGE_SIZE = 50
# A browser's datetime-local input has no offset; the console says its times are UTC.
LOCAL_MINUTE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}$")

# The rendered content is the tenant's HTML: it runs in a sandbox with an opaque origin, no
# script, nothing fetched from anywhere (no tracking pixel counts a console view as an open).
CONTENT_CSP = "sandbox; default-src 'none'; style-src 'unsafe-inline'; img-src data:; frame-ancestors 'self'"

query_schema = MessageQuerySchema()


@blp.route("/messages", endpoint="messages")
@project_page
def messages_page(project_id: str):
    given = {name: request.args.get(name, "") for name in FILTERS}
    query = {name: as_utc(value) if name in ("since", "until") else value for name, value in given.items()}
    filters, errors = read_form(query_schema, {**query, "cursor": request.args.get("cursor", ""), "limit": PAGE_SIZE})
    listed = (
        messages.list_messages(tidings().db, project_id, filters) if filters else {"items": [], "next_cursor": None}
    )
    return render_template(
        "console/messages.html",
        page=listed,
        given=given,
        errors=errors,
        statuses=[s.value for s in MessageStatus],
        channels=[c.value for c in Channel],
        next_url=url_for("console.messages", **{**given, "cursor": listed["next_cursor"]})
        if listed["next_cursor"]
        else None,
    )


def as_utc(value: str) -> str:
    return f"{value}:00+00:00" if LOCAL_MINUTE.match(value) else value


@blp.route("/messages/<message_id>")
@project_page
def message_page(project_id: str, message_id: str):
    db = tidings().db
    message = messages.get_message(db, project_id, message_id)
    content = messages.rendered_content(db, project_id, message_id)
    deliveries = webhooks.deliveries_of_message(db, project_id, message["id"], message["created_at"])
    return render_template(
        "console/message.html",
        message=message,
        content=content,
        deliveries=deliveries,
        cancellable=message["status"] in {s.value for s in messages.CANCELLABLE},
        requeueable=message["status"] in REQUEUABLE_STATUSES and signed_in_viewer().admin,
    )


@blp.route("/messages/<message_id>/content")
@project_page
def message_content(project_id: str, message_id: str):
    """The message's HTML as the recipient sees it, for the message page's sandboxed frame only."""
    content = messages.rendered_content(tidings().db, project_id, message_id)
    response = Response(content["html"] or "", mimetype="text/html")
    response.headers["Content-Security-Policy"] = CONTENT_CSP
    response.headers["X-Frame-Options"] = "SAMEORIGIN"
    return response


@blp.route("/messages/<message_id>/cancel", methods=["POST"])
@project_page
def cancel_message(project_id: str, message_id: str):
    messages.cancel_message(tidings().db, project_id, message_id)
    flash("Cancelled.")
    return redirect(url_for("console.message_page", message_id=message_id))


@blp.route("/messages/<message_id>/requeue", methods=["POST"])
@project_page
def requeue_message(project_id: str, message_id: str):
    """A dead letter, or an `unknown` message, sent again, as the admin API's requeue does
    (admin only, as there); the page warns that an `unknown` one may arrive twice."""
    status = messages.get_message(tidings().db, project_id, message_id)["status"]
    if status in REQUEUABLE_STATUSES:
        requeue_dead(project_id, [message_id], MessageStatus(status))
    return redirect(url_for("console.message_page", message_id=message_id))


def requeue_dead(project_id: str | None, ids: list[str] | None, status: MessageStatus = MessageStatus.DEAD) -> int:
    """Requeue through operations.requeue, by the console's admin; a project key gets a 403."""
    if not signed_in_viewer().admin:
        abort(403, "Requeueing dead letters needs the admin key.")
    criteria: dict[str, Any] = {"requested_by": "console", "status": status.value}
    if project_id is not None:
        criteria["project"] = project_id
    if ids:
        criteria["ids"] = [str(uuid_or_404(i, "message")) for i in ids]
    count = operations.requeue(tidings().db, criteria)
    flash(f"Requeued {count} message{'s' if count != 1 else ''}.")
    return count
