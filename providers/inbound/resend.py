"""Resend's webhooks, signed by Svix: Standard Webhooks signatures (providers/signing.py)
under the endpoint's `whsec_` secret, in `svix-*` headers (or `webhook-*`, the same scheme
under the standard's own names). One event per request; `svix-id` identifies it across retries.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Self

from providers import signing
from providers.inbound.base import (
    HARD,
    SOFT,
    BadSignature,
    InboundEvent,
    Kind,
    Unreadable,
    WebhookRequest,
    check_fresh,
    json_body,
    tagged_id,
)

EVENTS: Mapping[str, Kind] = {
    "email.delivered": Kind.DELIVERED,
    "email.bounced": Kind.BOUNCED,
    "email.complained": Kind.COMPLAINED,
    "email.opened": Kind.OPENED,
    "email.clicked": Kind.CLICKED,
    "email.failed": Kind.FAILED,
    # Resend did not send it: the address is on Resend's own suppression list.
    "email.suppressed": Kind.FAILED,
}
# What we know already (it was sent, or is scheduled at Resend): acknowledged, not recorded.
REDUNDANT = frozenset({"email.sent", "email.scheduled"})


class ResendReceiver:
    name: ClassVar[str] = "resend"
    settings: ClassVar[tuple[str, ...]] = ("RESEND_WEBHOOK_SECRET",)

    def __init__(self, secret: str):
        self.key = signing.secret_key(secret, "RESEND_WEBHOOK_SECRET")

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Self | None:
        secret = env.get("RESEND_WEBHOOK_SECRET", "").strip()
        return cls(secret) if secret else None

    def receive(self, request: WebhookRequest) -> list[InboundEvent]:
        prefix = "svix" if request.header("svix-id") else "webhook"
        event_id, timestamp, signature = (
            request.header(f"{prefix}-{part}") for part in ("id", "timestamp", "signature")
        )
        if not (event_id and timestamp and signature):
            raise BadSignature("the svix-id, svix-timestamp and svix-signature headers are required")
        if not signing.verify(self.key, event_id, timestamp, request.body, signature):
            raise BadSignature("the signature does not match")
        check_fresh(timestamp)
        payload = json_body(request.body)
        if not isinstance(payload, dict):
            raise Unreadable("expected a JSON object")
        name = str(payload.get("type"))
        if name in REDUNDANT:
            return []
        found = payload.get("data")
        data = found if isinstance(found, dict) else {}
        kind = EVENTS.get(name, Kind.UNKNOWN)
        to = data.get("to")
        return [
            InboundEvent(
                key=event_id,
                kind=kind,
                name=name,
                raw=payload,
                provider_message_id=data.get("email_id"),
                message_id=tagged_id(data.get("tags")),
                recipient=to[0] if isinstance(to, list) and to else None,
                bounce=bounce_type(data) if kind is Kind.BOUNCED else None,
                occurred_at=payload.get("created_at"),
            )
        ]


def bounce_type(data: Mapping[str, Any]) -> str:
    """Resend sends `email.bounced` for permanent rejections; its `bounce.type` says so."""
    found = data.get("bounce")
    bounce = found if isinstance(found, dict) else {}
    return SOFT if str(bounce.get("type", "Permanent")).lower() in ("transient", "undetermined") else HARD
