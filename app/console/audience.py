"""Console pages for subscribers (search, profile, preferences, suppressions, erasure),
batches (progress by status, kept live by a small script) and webhook endpoints (deliveries
with attempts, replay, secret rotation): the API's service functions behind each."""

from __future__ import annotations

import json

from flask import flash, jsonify, redirect, render_template, request, url_for

from app.console.blueprint import blp, read_form
from app.console.session import project_page, tidings
from app.schemas.audience import PreferencesSchema
from app.services import batches, preferences, subscribers, suppressions, webhooks

PAGE_SIZE = 50
preferences_schema = PreferencesSchema()


@blp.route("/subscribers", endpoint="subscribers")
@project_page
def subscribers_page(project_id: str):
    """Every subscriber a page at a time, or those whose id, email or phone was searched for."""
    db, wanted = tidings().db, request.args.get("q", "").strip()
    if wanted:
        listed = {"items": subscribers.find(db, project_id, wanted), "next_cursor": None}
    else:
        listed = subscribers.list_page(db, project_id, request.args.get("cursor"), PAGE_SIZE)
    return render_template("console/subscribers.html", page=listed, wanted=wanted)


@blp.route("/subscribers/<external_id>")
@project_page
def subscriber_page(project_id: str, external_id: str):
    db = tidings().db
    subscriber = subscribers.get(db, project_id, external_id)
    return render_template(
        "console/subscriber.html",
        subscriber=subscriber,
        topics=subscribers.profile(db, project_id, external_id)["topics"],
        preferences=json.dumps(subscriber.preferences, indent=2, ensure_ascii=False),
        suppressed=suppressions.of_subscriber(db, project_id, subscriber),
    )


@blp.route("/subscribers/<external_id>/preferences", methods=["POST"])
@project_page
def put_preferences(project_id: str, external_id: str):
    """The switches as JSON, through the API's schema and service (replaced whole)."""
    try:
        given = json.loads(request.form.get("preferences", ""))
    except ValueError:
        given = None
    data, errors = read_form(preferences_schema, given) if isinstance(given, dict) else (None, "not a JSON object")
    if data is None:
        flash(f"Not saved: {errors}")
    else:
        preferences.put(tidings().db, project_id, external_id, data)
        flash("Preferences saved.")
    return redirect(url_for("console.subscriber_page", external_id=external_id))


@blp.route("/subscribers/<external_id>/erase", methods=["POST"])
@project_page
def erase_subscriber(project_id: str, external_id: str):
    """Erasure, once the id is typed again: it cannot be undone."""
    if request.form.get("confirm") != external_id:
        flash("Not erased: type the subscriber's id to confirm.")
        return redirect(url_for("console.subscriber_page", external_id=external_id))
    subscribers.erase(tidings().db, project_id, external_id)
    flash(f"Erased subscriber {external_id}.")
    return redirect(url_for("console.subscribers"))


@blp.route("/batches", endpoint="batches")
@project_page
def batches_page(project_id: str):
    wanted = request.args.get("id", "").strip()
    if wanted:
        return redirect(url_for("console.batch_page", batch_id=wanted))
    return render_template("console/batches.html")


@blp.route("/batches/<batch_id>")
@project_page
def batch_page(project_id: str, batch_id: str):
    return render_template("console/batch.html", batch=batches.get_batch(tidings().db, project_id, batch_id))


@blp.route("/batches/<batch_id>/progress")
@project_page
def batch_progress(project_id: str, batch_id: str):
    """The batch's counts by status, for the page's script to poll."""
    batch = batches.get_batch(tidings().db, project_id, batch_id)
    return jsonify(counts=batch["counts"], accepted=batch["accepted"])


@blp.route("/webhooks", endpoint="webhooks")
@project_page
def webhooks_page(project_id: str):
    listed = webhooks.list_page(tidings().db, project_id, request.args.get("cursor"), PAGE_SIZE)
    return render_template("console/webhooks.html", page=listed)


@blp.route("/webhooks/<endpoint_id>")
@project_page
def webhook_page(project_id: str, endpoint_id: str):
    return show_endpoint(project_id, endpoint_id, secret=None)


def show_endpoint(project_id: str, endpoint_id: str, secret: str | None) -> str:
    """An endpoint with its recent deliveries; with its new secret right after a rotation."""
    db = tidings().db
    endpoint = webhooks.get(db, project_id, endpoint_id)
    deliveries = webhooks.deliveries(db, project_id, endpoint_id, None, request.args.get("cursor"), PAGE_SIZE)
    return render_template("console/webhook.html", endpoint=endpoint, deliveries=deliveries, secret=secret)


@blp.route("/webhooks/<endpoint_id>/rotate", methods=["POST"])
@project_page
def rotate_webhook_secret(project_id: str, endpoint_id: str):
    """A new secret, shown in this answer only (never put in the session cookie)."""
    rotated = webhooks.rotate(tidings().db, project_id, endpoint_id)
    return show_endpoint(project_id, endpoint_id, secret=rotated["secret"])


@blp.route("/webhooks/<endpoint_id>/deliveries/<delivery_id>/replay", methods=["POST"])
@project_page
def replay_delivery(project_id: str, endpoint_id: str, delivery_id: str):
    webhooks.replay(tidings().db, project_id, endpoint_id, delivery_id)
    flash("Sent again with the same webhook-id.")
    return redirect(url_for("console.webhook_page", endpoint_id=endpoint_id))
