"""SendGrid's Event Webhook, signed: an ECDSA (P-256, SHA-256) signature over the timestamp
header followed by the raw body, in `X-Twilio-Email-Event-Webhook-Signature` (base64 DER),
checked with the verification key SendGrid shows (base64 DER SubjectPublicKeyInfo).

One request carries a JSON array of events; each has its own `sg_event_id`, and our message
id among its top-level fields (the personalization's `custom_args`). `sg_message_id` starts
with the `X-Message-Id` we stored, which several messages of one request share.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any, ClassVar, Self

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from providers.base import MESSAGE_ID_TAG
from providers.inbound.base import (
    HARD,
    SOFT,
    BadSignature,
    InboundEvent,
    Kind,
    Unreadable,
    WebhookRequest,
    check_fresh,
    digest,
    json_body,
)

SIGNATURE = "X-Twilio-Email-Event-Webhook-Signature"
TIMESTAMP = "X-Twilio-Email-Event-Webhook-Timestamp"

EVENTS: Mapping[str, Kind] = {
    "delivered": Kind.DELIVERED,
    "bounce": Kind.BOUNCED,
    "dropped": Kind.FAILED,
    "deferred": Kind.UNKNOWN,
    "open": Kind.OPENED,
    "click": Kind.CLICKED,
    "spamreport": Kind.COMPLAINED,
    "unsubscribe": Kind.UNSUBSCRIBED,
    "group_unsubscribe": Kind.UNSUBSCRIBED,
}
REDUNDANT = frozenset({"processed"})


def public_key(value: str) -> ec.EllipticCurvePublicKey:
    """The key as SendGrid shows it (base64 DER), or as PEM."""
    try:
        if value.startswith("-----BEGIN"):
            key = serialization.load_pem_public_key(value.encode())
        else:
            key = serialization.load_der_public_key(base64.b64decode(value, validate=True))
    except (ValueError, binascii.Error):
        raise ValueError("SENDGRID_WEBHOOK_PUBLIC_KEY is not a public key (base64 DER, or PEM)") from None
    if not isinstance(key, ec.EllipticCurvePublicKey):
        raise ValueError("SENDGRID_WEBHOOK_PUBLIC_KEY must be an elliptic-curve (ECDSA) key")
    return key


class SendGridReceiver:
    name: ClassVar[str] = "sendgrid"
    settings: ClassVar[tuple[str, ...]] = ("SENDGRID_WEBHOOK_PUBLIC_KEY",)

    def __init__(self, key: ec.EllipticCurvePublicKey):
        self.key = key

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Self | None:
        value = env.get("SENDGRID_WEBHOOK_PUBLIC_KEY", "").strip()
        return cls(public_key(value)) if value else None

    def receive(self, request: WebhookRequest) -> list[InboundEvent]:
        signature, timestamp = request.header(SIGNATURE), request.header(TIMESTAMP)
        if not (signature and timestamp):
            raise BadSignature(f"the {SIGNATURE} and {TIMESTAMP} headers are required")
        try:
            self.key.verify(base64.b64decode(signature), timestamp.encode() + request.body, ec.ECDSA(hashes.SHA256()))
        except (InvalidSignature, binascii.Error, ValueError):
            raise BadSignature("the signature does not match") from None
        check_fresh(timestamp)
        events = json_body(request.body)
        if not isinstance(events, list) or not all(isinstance(e, dict) for e in events):
            raise Unreadable("expected a JSON array of events")
        return [event_of(e) for e in events if e.get("event") not in REDUNDANT]


def event_of(event: Mapping[str, Any]) -> InboundEvent:
    name = str(event.get("event"))
    kind = EVENTS.get(name, Kind.UNKNOWN)
    recipient = event.get("email")
    return InboundEvent(
        key=str(event.get("sg_event_id") or digest(event)),
        kind=kind,
        name=name,
        raw=event,
        provider_message_id=str(event.get("sg_message_id") or "").split(".")[0] or None,
        message_id=event.get(MESSAGE_ID_TAG),
        recipient=recipient.strip().lower() if isinstance(recipient, str) else None,
        # `bounce` is a refusal by the receiving server; `blocked` a temporary block of the sender.
        bounce=(SOFT if event.get("type") == "blocked" else HARD) if kind is Kind.BOUNCED else None,
        occurred_at=str(event["timestamp"]) if "timestamp" in event else None,
    )
