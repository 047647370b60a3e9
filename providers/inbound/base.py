"""What every receiver shares: the request it reads, the events it returns, why it refuses.

A receiver verifies a request before it reads a single field of it, and a request it
refuses changes nothing: the caller maps `Refused.status` to the HTTP answer (401 for a bad
signature, 400 for a stale or unreadable request, 403 for a source that is not ours).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ClassVar, Protocol, Self

from providers.base import MESSAGE_ID_TAG

# How far a signed timestamp may be from our clock, either way, before the request is stale.
TOLERANCE_SECONDS = 300


class Kind(StrEnum):
    """What a provider's event means for the message; the values are the engine's event types."""

    DELIVERED = "delivered"
    BOUNCED = "bounced"
    COMPLAINED = "complained"
    OPENED = "opened"
    CLICKED = "clicked"
    UNSUBSCRIBED = "unsubscribed"
    FAILED = "failed"
    UNKNOWN = "unknown"


HARD = "hard"
SOFT = "soft"


@dataclass(frozen=True)
class WebhookRequest:
    """A provider's POST as it arrived: the URL it called (some schemes sign it), the headers
    with lower-cased names, the raw body (every scheme signs the bytes, never a re-encoding)."""

    url: str
    headers: Mapping[str, str]
    body: bytes

    def header(self, name: str) -> str:
        return self.headers.get(name.lower(), "").strip()


@dataclass(frozen=True)
class InboundEvent:
    """One provider event, normalised.

    `key` is unique per provider event (the provider's event id, or a digest of the event
    where it gives none): the same event received twice is applied once. The message is
    found by our id where the provider echoes it (`message_id`), else by the provider's id
    for it (`provider_message_id`, with `recipient` where one provider id covers several).
    """

    key: str
    kind: Kind
    name: str
    raw: Mapping[str, Any]
    provider_message_id: str | None = None
    message_id: str | None = None
    recipient: str | None = None
    bounce: str | None = None  # HARD or SOFT, for BOUNCED
    occurred_at: str | None = None


class Refused(Exception):
    status: ClassVar[int] = 400


class BadSignature(Refused):
    status = 401


class Stale(Refused):
    status = 400


class Unreadable(Refused):
    status = 400


class ForeignSource(Refused):
    """Correctly signed, but not by a source of ours (another AWS account's SNS topic)."""

    status = 403


class Receiver(Protocol):
    name: ClassVar[str]  # the provider, as in /v1/inbound/{provider}
    # The settings it reads; a project with its own account may bring them too.
    settings: ClassVar[tuple[str, ...]]

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Self | None:
        """The receiver, or None when its settings are absent; ValueError when malformed."""
        ...

    def receive(self, request: WebhookRequest) -> list[InboundEvent]:
        """Verify the request and return its events; raise a `Refused` to turn it away."""
        ...


def check_fresh(timestamp: str | float, now: float | None = None) -> None:
    """A signed Unix timestamp more than five minutes off is a replay or a broken clock."""
    try:
        value = float(timestamp)
    except (TypeError, ValueError):
        raise Unreadable(f"unreadable timestamp {timestamp!r}") from None
    if abs((now or time.time()) - value) > TOLERANCE_SECONDS:
        raise Stale(f"timestamp {timestamp} is more than {TOLERANCE_SECONDS} seconds off")


def json_body(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        raise Unreadable("the body is not JSON") from None


def digest(*parts: Any) -> str:
    """A stable key for an event the provider gives no id to."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def tagged_id(tags: Any) -> str | None:
    """Our message id among a provider's echoed metadata: {"name": "value"}, {"name": ["value"]}
    (SES), or [{"name", "value"}] (the form Resend takes them in)."""
    if isinstance(tags, Mapping):
        value = tags.get(MESSAGE_ID_TAG)
        value = value[0] if isinstance(value, list) and value else value
        return value if isinstance(value, str) else None
    if isinstance(tags, list):
        for tag in tags:
            if isinstance(tag, Mapping) and tag.get("name") == MESSAGE_ID_TAG:
                return tag.get("value")
    return None
