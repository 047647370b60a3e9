"""Postmark's webhooks: Basic auth credentials in the URL we give Postmark
(`https://user:password@…/v1/inbound/postmark`), no signature and no timestamp. One record
per request; `RecordType` says which. Bounces and complaints carry an `ID`; the others do
not, so their key is a digest of the record.
"""

from __future__ import annotations

import base64
import binascii
import hmac
from collections.abc import Mapping
from typing import Any, ClassVar, Self

from providers.base import required
from providers.inbound.base import (
    HARD,
    SOFT,
    BadSignature,
    InboundEvent,
    Kind,
    Unreadable,
    WebhookRequest,
    digest,
    json_body,
    tagged_id,
)

RECORDS: Mapping[str, Kind] = {
    "Delivery": Kind.DELIVERED,
    "Bounce": Kind.BOUNCED,
    "SpamComplaint": Kind.COMPLAINED,
    "Open": Kind.OPENED,
    "Click": Kind.CLICKED,
    "SubscriptionChange": Kind.UNSUBSCRIBED,
}
# Bounce types that mean the address will never work; Postmark also marks the address
# `Inactive` when it stops sending to it, which we treat as hard too.
HARD_BOUNCES = frozenset({"HardBounce", "BadEmailAddress", "ManuallyDeactivated"})


class PostmarkReceiver:
    name: ClassVar[str] = "postmark"
    settings: ClassVar[tuple[str, ...]] = ("POSTMARK_WEBHOOK_USERNAME", "POSTMARK_WEBHOOK_PASSWORD")

    def __init__(self, username: str, password: str):
        self.expected = f"{username}:{password}".encode()

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Self | None:
        if not any(env.get(name, "").strip() for name in cls.settings):
            return None
        return cls(required(env, "POSTMARK_WEBHOOK_USERNAME"), required(env, "POSTMARK_WEBHOOK_PASSWORD"))

    def receive(self, request: WebhookRequest) -> list[InboundEvent]:
        scheme, _, encoded = request.header("Authorization").partition(" ")
        try:
            given = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            given = b""
        if scheme.lower() != "basic" or not hmac.compare_digest(given, self.expected):
            raise BadSignature("Basic auth credentials are missing or wrong")
        record = json_body(request.body)
        if not isinstance(record, dict):
            raise Unreadable("expected a JSON object")
        name = str(record.get("RecordType"))
        kind = kind_of(name, record)
        return [
            InboundEvent(
                key=f"{name}:{record['ID']}" if record.get("ID") is not None else digest(record),
                kind=kind,
                name=name,
                raw=record,
                provider_message_id=record.get("MessageID"),
                message_id=tagged_id(record.get("Metadata")),
                recipient=record.get("Email") or record.get("Recipient"),
                bounce=bounce_type(record) if kind is Kind.BOUNCED else None,
                occurred_at=record.get("BouncedAt") or record.get("DeliveredAt") or record.get("ReceivedAt"),
            )
        ]


def kind_of(name: str, record: Mapping[str, Any]) -> Kind:
    if name == "Bounce" and record.get("Type") == "SpamComplaint":
        return Kind.COMPLAINED  # older servers report complaints through the bounce hook
    if name == "SubscriptionChange" and not record.get("SuppressSending"):
        return Kind.UNKNOWN  # the address was reactivated
    return RECORDS.get(name, Kind.UNKNOWN)


def bounce_type(record: Mapping[str, Any]) -> str:
    return HARD if record.get("Type") in HARD_BOUNCES or record.get("Inactive") is True else SOFT
