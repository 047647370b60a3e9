"""Outbound webhook endpoints: create, change, rotate, disable; their deliveries and replays.

The signing secret is shown in the answers to creation and rotation only and stored
encrypted (app.crypto). A rotation keeps the old secret signing beside the new one for a
day, so receivers can switch without losing a request.
"""

from __future__ import annotations

import base64
import secrets
import uuid
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select, tuple_, update
from sqlalchemy.orm import Session, sessionmaker

from app.crypto import encrypt
from app.db import enqueue_after_commit
from app.delivery import dispatch
from app.delivery.webhook_store import webhook_id
from app.enums import WebhookDeliveryStatus
from app.errors import abort, uuid_or_404
from app.models import WebhookAttempt, WebhookDelivery, WebhookEndpoint
from app.pagination import aware_time, decode_cursor, page

ROTATION_OVERLAP = timedelta(hours=24)


def new_secret() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


def present(endpoint: WebhookEndpoint, secret: str | None = None) -> dict[str, Any]:
    view = {
        "id": str(endpoint.id),
        "url": endpoint.url,
        "description": endpoint.description,
        "event_types": endpoint.event_types,
        "batch": endpoint.batch,
        "enabled": endpoint.disabled_at is None,
        "disabled_at": endpoint.disabled_at,
        "disabled_reason": endpoint.disabled_reason,
        "failing_since": endpoint.failing_since,
        "previous_secret_expires_at": endpoint.previous_secret_expires_at,
        "created_at": endpoint.created_at,
        "updated_at": endpoint.updated_at,
    }
    return view if secret is None else {**view, "secret": secret}


def create(db: sessionmaker[Session], project_id: str, data: dict[str, Any]) -> dict[str, Any]:
    secret = new_secret()
    with db.begin() as session:
        endpoint = WebhookEndpoint(project_id=project_id, secret=encrypt(secret), **data)
        session.add(endpoint)
        session.flush()
        session.refresh(endpoint)
    return present(endpoint, secret)


def list_page(db: sessionmaker[Session], project_id: str, cursor: str | None, limit: int) -> dict[str, Any]:
    after = decode_cursor(cursor, aware_time, uuid.UUID)
    query = select(WebhookEndpoint).where(WebhookEndpoint.project_id == project_id)
    if after is not None:
        query = query.where(tuple_(WebhookEndpoint.created_at, WebhookEndpoint.id) > after)
    with db() as session:
        rows = session.scalars(query.order_by(WebhookEndpoint.created_at, WebhookEndpoint.id).limit(limit + 1)).all()
    result = page(rows, limit, lambda e: [e.created_at.isoformat(), str(e.id)])
    result["items"] = [present(row) for row in result["items"]]
    return result


def get(db: sessionmaker[Session], project_id: str, endpoint_id: str) -> dict[str, Any]:
    with db() as session:
        return present(_endpoint(session, project_id, endpoint_id))


def change(db: sessionmaker[Session], project_id: str, endpoint_id: str, data: dict[str, Any]) -> dict[str, Any]:
    """Change what is given; `enabled: true` switches a disabled endpoint back on (its waiting
    deliveries then go out), `enabled: false` switches it off by hand."""
    enabled = data.pop("enabled", None)
    with db.begin() as session:
        endpoint = _endpoint(session, project_id, endpoint_id, lock=True)
        for name, value in data.items():
            setattr(endpoint, name, value)
        if enabled is True:
            endpoint.disabled_at = endpoint.disabled_reason = endpoint.failing_since = None
        elif enabled is False and endpoint.disabled_at is None:
            endpoint.disabled_at, endpoint.disabled_reason = func.now(), "disabled by hand"
        endpoint.updated_at = func.now()
        session.flush()
        session.refresh(endpoint)
    return present(endpoint)


def delete(db: sessionmaker[Session], project_id: str, endpoint_id: str) -> None:
    with db.begin() as session:
        session.delete(_endpoint(session, project_id, endpoint_id))


def rotate(db: sessionmaker[Session], project_id: str, endpoint_id: str) -> dict[str, Any]:
    """A new secret; the current one keeps signing beside it for ROTATION_OVERLAP."""
    secret = new_secret()
    with db.begin() as session:
        endpoint = _endpoint(session, project_id, endpoint_id, lock=True)
        endpoint.previous_secret = endpoint.secret
        endpoint.previous_secret_expires_at = func.now() + ROTATION_OVERLAP
        endpoint.secret = encrypt(secret)
        endpoint.updated_at = func.now()
        session.flush()
        session.refresh(endpoint)
    return present(endpoint, secret)


def deliveries(
    db: sessionmaker[Session],
    project_id: str,
    endpoint_id: str,
    status: WebhookDeliveryStatus | None,
    cursor: str | None,
    limit: int,
) -> dict[str, Any]:
    """The endpoint's deliveries, newest first, each with every attempt made."""
    after = decode_cursor(cursor, aware_time, uuid.UUID)
    with db() as session:
        endpoint = _endpoint(session, project_id, endpoint_id)
        query = select(WebhookDelivery).where(WebhookDelivery.endpoint_id == endpoint.id)
        if status is not None:
            query = query.where(WebhookDelivery.status == status)
        if after is not None:
            query = query.where(tuple_(WebhookDelivery.created_at, WebhookDelivery.id) < after)
        rows = session.scalars(
            query.order_by(WebhookDelivery.created_at.desc(), WebhookDelivery.id.desc()).limit(limit + 1)
        ).all()
        result = page(rows, limit, lambda d: [d.created_at.isoformat(), str(d.id)])
        attempts = _attempts(session, [d.id for d in result["items"]])
    result["items"] = [_delivery(d, attempts.get(d.id, [])) for d in result["items"]]
    return result


MESSAGE_DELIVERIES_LIMIT = 20


def deliveries_of_message(
    db: sessionmaker[Session], project_id: str, message_id: str, since: datetime
) -> list[dict[str, Any]]:
    """The project's deliveries (with attempts) that carried an event of one message, newest
    first: made after the message (`since`, its creation), which bounds what is read."""
    carried = [{"data": {"message_id": message_id}}]
    with db() as session:
        rows = session.scalars(
            select(WebhookDelivery)
            .where(
                WebhookDelivery.project_id == project_id,
                WebhookDelivery.created_at >= since,
                WebhookDelivery.events.contains(carried),
            )
            .order_by(WebhookDelivery.created_at.desc(), WebhookDelivery.id.desc())
            .limit(MESSAGE_DELIVERIES_LIMIT)
        ).all()
        attempts = _attempts(session, [d.id for d in rows])
    return [{**_delivery(d, attempts.get(d.id, [])), "endpoint_id": str(d.endpoint_id)} for d in rows]


def replay(db: sessionmaker[Session], project_id: str, endpoint_id: str, delivery_id: str) -> dict[str, Any]:
    """Send a delivery again now, with the same webhook-id and a fresh set of attempts."""
    key = uuid_or_404(delivery_id, "delivery")
    with db.begin() as session:
        endpoint = _endpoint(session, project_id, endpoint_id)
        if endpoint.disabled_at is not None:
            abort(409, "The endpoint is disabled; enable it first (PATCH with enabled: true).")
        delivery = session.execute(
            update(WebhookDelivery)
            .where(
                WebhookDelivery.id == key,
                WebhookDelivery.endpoint_id == endpoint.id,
                WebhookDelivery.status != WebhookDeliveryStatus.SENDING,
            )
            .values(status=WebhookDeliveryStatus.PENDING, attempts=0, next_attempt_at=func.now(), updated_at=func.now())
            .returning(WebhookDelivery)
        ).scalar_one_or_none()
        if delivery is None:
            exists = session.scalar(
                select(WebhookDelivery.id).where(WebhookDelivery.id == key, WebhookDelivery.endpoint_id == endpoint.id)
            )
            if exists is None:
                abort(404, f"No delivery {delivery_id!r}.")
            abort(409, "The delivery is being attempted right now.")
        for signature in dispatch.webhooks([str(delivery.id)]):
            enqueue_after_commit(session, signature)
        attempts = _attempts(session, [delivery.id])
    return _delivery(delivery, attempts.get(delivery.id, []))


def _attempts(session: Session, delivery_ids: list[uuid.UUID]) -> dict[uuid.UUID, list[dict[str, Any]]]:
    found: dict[uuid.UUID, list[dict[str, Any]]] = {}
    if not delivery_ids:
        return found
    rows = session.scalars(
        select(WebhookAttempt)
        .where(WebhookAttempt.delivery_id.in_(delivery_ids))
        .order_by(WebhookAttempt.at, WebhookAttempt.id)
    )
    for row in rows:
        found.setdefault(row.delivery_id, []).append(
            {
                "at": row.at,
                "status_code": row.status_code,
                "error": row.error,
                "response": row.response,
                "duration_ms": row.duration_ms,
            }
        )
    return found


def _delivery(delivery: WebhookDelivery, attempts: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "id": str(delivery.id),
        "webhook_id": webhook_id(str(delivery.id)),
        "status": delivery.status.value,
        "events": delivery.events,
        "attempts": attempts,
        "next_attempt_at": delivery.next_attempt_at if delivery.status in _WAITING else None,
        "delivered_at": delivery.delivered_at,
        "created_at": delivery.created_at,
    }


_WAITING = (WebhookDeliveryStatus.PENDING, WebhookDeliveryStatus.RETRYING)


def _endpoint(session: Session, project_id: str, endpoint_id: str, lock: bool = False) -> WebhookEndpoint:
    query = select(WebhookEndpoint).where(
        WebhookEndpoint.id == uuid_or_404(endpoint_id, "webhook endpoint"), WebhookEndpoint.project_id == project_id
    )
    endpoint = session.scalars(query.with_for_update() if lock else query).first()
    if endpoint is None:
        abort(404, f"No webhook endpoint {endpoint_id!r}.")
    return endpoint
