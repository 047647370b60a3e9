"""Twilio's status callbacks: form-encoded, signed with `X-Twilio-Signature`, the base64
HMAC-SHA1, under the account's auth token, of the full URL Twilio called followed by every
POST parameter's name and value, sorted by name. There is no timestamp and no event id: a
callback is one status of one message, so (MessageSid, MessageStatus) identifies it.

The URL is the one configured at Twilio, which a proxy may hide from us: set
TIDINGS_PUBLIC_URL. Twilio's own libraries also accept the URL with the scheme's default port
added or removed, since that is how it may have been written at Twilio; so do we.

Our message id comes back in the URL's query, where the adapter put it (`StatusCallback`);
being part of the signed URL, it is as authentic as the rest.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping
from typing import ClassVar, Self
from urllib.parse import parse_qs, parse_qsl, urlsplit

from providers.inbound.base import HARD, SOFT, BadSignature, InboundEvent, Kind, WebhookRequest, tagged_id

STATUSES: Mapping[str, Kind] = {
    "delivered": Kind.DELIVERED,
    "undelivered": Kind.BOUNCED,
    "failed": Kind.FAILED,
    "canceled": Kind.FAILED,
    "read": Kind.OPENED,
}
# Steps on the way we know of already, or that concern inbound messages.
REDUNDANT = frozenset({"queued", "accepted", "scheduled", "sending", "sent", "receiving", "received"})
# Carrier errors that say the number cannot receive SMS at all (unknown handset, landline).
HARD_ERRORS = frozenset({"30005", "30006"})
# The recipient opted out (replied STOP).
UNSUBSCRIBED_ERRORS = frozenset({"21610"})


def signature(token: str, url: str, params: list[tuple[str, str]]) -> str:
    signed = url + "".join(name + value for name, value in sorted(params))
    return base64.b64encode(hmac.new(token.encode(), signed.encode(), hashlib.sha1).digest()).decode()


def url_variants(url: str) -> list[str]:
    """The URL without and with its scheme's default port (the one given comes first)."""
    parts = urlsplit(url)
    default = {"https": 443, "http": 80}.get(parts.scheme)
    if default is None or parts.port not in (None, default):
        return [url]
    bare = parts.netloc.rsplit(":", 1)[0] if parts.port is not None else parts.netloc
    variants = [parts._replace(netloc=bare).geturl(), parts._replace(netloc=f"{bare}:{default}").geturl()]
    return variants if parts.port is None else variants[::-1]


class TwilioReceiver:
    name: ClassVar[str] = "twilio"
    settings: ClassVar[tuple[str, ...]] = ("TWILIO_AUTH_TOKEN",)

    def __init__(self, token: str):
        self.token = token

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Self | None:
        token = env.get("TWILIO_AUTH_TOKEN", "").strip()
        return cls(token) if token else None

    def receive(self, request: WebhookRequest) -> list[InboundEvent]:
        given = request.header("X-Twilio-Signature")
        params = parse_qsl(request.body.decode("utf-8", "replace"), keep_blank_values=True)
        if not given or not any(
            hmac.compare_digest(given, signature(self.token, url, params)) for url in url_variants(request.url)
        ):
            raise BadSignature("X-Twilio-Signature is missing or does not match")
        form = dict(params)
        status = form.get("MessageStatus") or form.get("SmsStatus") or ""
        if status in REDUNDANT:
            return []
        sid = form.get("MessageSid") or form.get("SmsSid")
        error = form.get("ErrorCode", "")
        kind = Kind.UNSUBSCRIBED if error in UNSUBSCRIBED_ERRORS else STATUSES.get(status, Kind.UNKNOWN)
        return [
            InboundEvent(
                key=f"{sid}:{status}",
                kind=kind,
                name=status,
                raw=form,
                provider_message_id=sid,
                message_id=tagged_id(parse_qs(urlsplit(request.url).query)),
                recipient=form.get("To"),
                bounce=(HARD if error in HARD_ERRORS else SOFT) if kind is Kind.BOUNCED else None,
            )
        ]
