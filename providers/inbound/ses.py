"""Amazon SES events, delivered through an SNS topic subscribed to /v1/inbound/ses.

Every SNS message is verified before it is read: signature version 2 (RSA with SHA-256
over the message's signed fields, in SNS's fixed order) under the certificate at
`SigningCertURL`, which is fetched only over https from an `sns.<region>.amazonaws.com`
host and cached per process. The topic must be one we listed (SES_SNS_TOPIC_ARNS): anyone
can create a topic, and SNS would sign its messages just as well. A subscription
confirmation is answered by visiting its `SubscribeURL`, which must be an SNS host too.

Anyone can post to our URL, so what costs nothing is checked before the certificate is
fetched: the message type, the signature version, the topic and the timestamp. A failed
fetch is remembered for FAILED_FETCH_SECONDS, so a flood naming one bad certificate makes
one request, not one each; that is shorter than SNS's retry delay (20 s by default), so a
real message refused while AWS did not answer is verified on its retry.

The message inside is SES event publishing (`eventType`) or an SES notification
(`notificationType`); our id travels as the `tidings_message_id` tag, SES's as `mail.messageId`.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, Self
from urllib.parse import urlsplit

import requests
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from providers.inbound.base import (
    HARD,
    SOFT,
    BadSignature,
    ForeignSource,
    InboundEvent,
    Kind,
    Refused,
    Unreadable,
    WebhookRequest,
    check_fresh,
    json_body,
    tagged_id,
)

SNS_HOST = re.compile(r"^sns\.[a-z0-9-]+\.amazonaws\.com$")
# Only a test may name another host, and only this machine's loopback address.
TEST_HOST = re.compile(r"^127\.0\.0\.1:\d{1,5}$")
MAX_CERTIFICATE_BYTES = 64 * 1024
FETCH_TIMEOUT = 5.0
FAILED_FETCH_SECONDS = 10.0
# Failed fetches remembered at most (one per URL); past that they are forgotten at once.
MAX_FAILED_FETCHES = 1000

# The fields each message type signs, in the order SNS signs them.
SIGNED = {
    "Notification": ("Message", "MessageId", "Subject", "Timestamp", "TopicArn", "Type"),
    "SubscriptionConfirmation": ("Message", "MessageId", "SubscribeURL", "Timestamp", "Token", "TopicArn", "Type"),
    "UnsubscribeConfirmation": ("Message", "MessageId", "SubscribeURL", "Timestamp", "Token", "TopicArn", "Type"),
}

EVENTS: Mapping[str, Kind] = {
    "Delivery": Kind.DELIVERED,
    "Bounce": Kind.BOUNCED,
    "Complaint": Kind.COMPLAINED,
    "Open": Kind.OPENED,
    "Click": Kind.CLICKED,
    "Reject": Kind.FAILED,
    "Rendering Failure": Kind.FAILED,
    "DeliveryDelay": Kind.UNKNOWN,
    "Subscription": Kind.UNSUBSCRIBED,
}
REDUNDANT = frozenset({"Send"})


class Unverifiable(Refused):
    """The signing certificate could not be fetched: SNS should try again later."""

    status = 503


class SnsHosts:
    """Where certificates and confirmations may come from: https SNS hosts, plus one
    127.0.0.1 host when a test setting names it (never by default)."""

    def __init__(self, test_host: str | None = None):
        self.test_host = test_host

    def allow(self, url: str) -> bool:
        parts = urlsplit(url)
        if parts.username is not None or parts.password is not None:
            return False
        if parts.scheme == "https" and parts.port in (None, 443) and SNS_HOST.match(parts.hostname or ""):
            return True
        return self.test_host is not None and parts.scheme in ("http", "https") and parts.netloc == self.test_host


@dataclass(frozen=True)
class FailedFetch:
    """A certificate that could not be had, refused the same way until `until` (monotonic)."""

    refusal: type[Refused]
    reason: str
    until: float


_certificates: dict[str, rsa.RSAPublicKey] = {}
_failures: dict[str, FailedFetch] = {}
_lock = threading.Lock()


def certificate_key(url: str, hosts: SnsHosts) -> rsa.RSAPublicKey:
    """The public key of the certificate at `url`, fetched once per process; a failed fetch
    is not tried again for FAILED_FETCH_SECONDS."""
    if not hosts.allow(url):
        raise BadSignature(f"SigningCertURL {url!r} is not an https SNS host")
    now = time.monotonic()
    with _lock:
        key, failed = _certificates.get(url), _failures.get(url)
    if key is not None:
        return key
    if failed is not None and now < failed.until:
        raise failed.refusal(f"{failed.reason} (not fetched again for {FAILED_FETCH_SECONDS:.0f} s)")
    try:
        key = fetch_certificate(url)
    except Refused as refusal:
        with _lock:
            if len(_failures) >= MAX_FAILED_FETCHES:
                _failures.clear()
            _failures[url] = FailedFetch(type(refusal), str(refusal), now + FAILED_FETCH_SECONDS)
        raise
    with _lock:
        _certificates[url] = key
        _failures.pop(url, None)
    return key


def fetch_certificate(url: str) -> rsa.RSAPublicKey:
    try:
        response = requests.get(url, timeout=FETCH_TIMEOUT, allow_redirects=False)
        response.raise_for_status()
        if len(response.content) > MAX_CERTIFICATE_BYTES:
            raise ValueError("the certificate is too large")
        key = x509.load_pem_x509_certificate(response.content).public_key()
    except (requests.RequestException, ValueError) as error:
        raise Unverifiable(f"could not fetch the signing certificate: {error}") from None
    if not isinstance(key, rsa.RSAPublicKey):
        raise BadSignature("the signing certificate does not hold an RSA key")
    return key


def string_to_sign(message: Mapping[str, Any], fields: tuple[str, ...]) -> bytes:
    return "".join(f"{name}\n{message[name]}\n" for name in fields if message.get(name) is not None).encode()


class SesReceiver:
    name: ClassVar[str] = "ses"
    settings: ClassVar[tuple[str, ...]] = ("SES_SNS_TOPIC_ARNS",)

    def __init__(self, topics: frozenset[str], hosts: SnsHosts):
        self.topics = topics
        self.hosts = hosts

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Self | None:
        topics = frozenset(t.strip() for t in env.get("SES_SNS_TOPIC_ARNS", "").split(",") if t.strip())
        if not topics:
            return None
        test_host = env.get("SES_SNS_TEST_HOST", "").strip() or None
        if test_host is not None and not TEST_HOST.match(test_host):
            raise ValueError(f"SES_SNS_TEST_HOST may only name 127.0.0.1:<port>; got {test_host!r}")
        return cls(topics, SnsHosts(test_host))

    def receive(self, request: WebhookRequest) -> list[InboundEvent]:
        message = json_body(request.body)
        if not isinstance(message, dict) or message.get("Type") not in SIGNED:
            raise Unreadable("not an SNS message")
        self.verify(message)
        if message["Type"] == "SubscriptionConfirmation":
            self.confirm(message.get("SubscribeURL", ""))
        if message["Type"] != "Notification":
            return []
        try:
            inner = json.loads(message["Message"])
        except (TypeError, ValueError):
            raise Unreadable("the SNS message does not hold an SES event") from None
        if not isinstance(inner, dict):
            raise Unreadable("the SNS message does not hold an SES event")
        name = str(inner.get("eventType") or inner.get("notificationType"))
        return [] if name in REDUNDANT else [event_of(message["MessageId"], name, inner)]

    def verify(self, message: Mapping[str, Any]) -> None:
        """What costs nothing first (see the module's docstring), then the signature."""
        if message.get("SignatureVersion") != "2":
            raise BadSignature("only SNS signature version 2 (SHA256) is accepted: set it on the topic")
        if message.get("TopicArn") not in self.topics:
            raise ForeignSource(f"topic {message.get('TopicArn')!r} is not in SES_SNS_TOPIC_ARNS")
        try:
            check_fresh(datetime.fromisoformat(str(message.get("Timestamp"))).timestamp())
        except ValueError:
            raise Unreadable(f"unreadable Timestamp {message.get('Timestamp')!r}") from None
        key = certificate_key(str(message.get("SigningCertURL", "")), self.hosts)
        try:
            signature = base64.b64decode(str(message.get("Signature", "")), validate=True)
            key.verify(signature, string_to_sign(message, SIGNED[message["Type"]]), padding.PKCS1v15(), hashes.SHA256())
        except (InvalidSignature, binascii.Error, ValueError):
            raise BadSignature("the SNS signature does not match") from None

    def confirm(self, url: str) -> None:
        if not self.hosts.allow(url):
            raise BadSignature(f"SubscribeURL {url!r} is not an https SNS host")
        try:
            requests.get(url, timeout=FETCH_TIMEOUT, allow_redirects=False).raise_for_status()
        except requests.RequestException as error:
            raise Unverifiable(f"could not confirm the subscription: {error}") from None


def event_of(key: str, name: str, inner: Mapping[str, Any]) -> InboundEvent:
    mail = inner.get("mail")
    mail = mail if isinstance(mail, dict) else {}
    found = inner.get(name[0].lower() + name[1:].replace(" ", ""))
    detail = found if isinstance(found, dict) else {}
    kind = EVENTS.get(name, Kind.UNKNOWN)
    if name == "Subscription" and not (detail.get("newTopicPreferences") or {}).get("unsubscribeAll"):
        kind = Kind.UNKNOWN  # preferences changed, but not an unsubscribe from everything
    recipients = detail.get("bouncedRecipients") or detail.get("complainedRecipients") or []
    recipient = recipients[0].get("emailAddress") if recipients else next(iter(mail.get("destination") or []), None)
    return InboundEvent(
        key=key,
        kind=kind,
        name=name,
        raw=inner,
        provider_message_id=mail.get("messageId"),
        message_id=tagged_id(mail.get("tags")),
        recipient=recipient,
        bounce=(HARD if detail.get("bounceType") == "Permanent" else SOFT) if kind is Kind.BOUNCED else None,
        occurred_at=detail.get("timestamp") or mail.get("timestamp"),
    )
