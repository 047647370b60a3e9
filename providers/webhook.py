"""Webhook (webhook channel): POST the message's JSON to its URL, signed as Standard Webhooks.

Headers `webhook-id` (our message id, the same on every retry so the receiver can
deduplicate), `webhook-timestamp` and `webhook-signature` (providers/signing.py), as
standardwebhooks.com specifies. The engine hands each message its project's keys
(`Outbound.signing_keys`), so no project signs for another; the configured
WEBHOOK_SIGNING_SECRET signs only where it says so, or for a message that brings none.

The URL comes from whoever sends the notification, so the request must not become a way
into our own network (SSRF): the address actually connected to is checked on every new
connection, after DNS resolution, so a name that resolves (or re-resolves) to a private,
loopback or link-local address is refused. Plain http is allowed only to networks listed
in WEBHOOK_ALLOWED_NETWORKS (an internal service, or tests on 127.0.0.1).
"""

from __future__ import annotations

import ipaddress
import json
import time
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Self

import requests
from urllib3.connection import HTTPConnection, HTTPSConnection

from providers import signing
from providers.base import (
    HttpClient,
    Outbound,
    Outcome,
    PermanentError,
    ProviderError,
    SendResult,
    TransientError,
    number,
    one_by_one,
    required,
    send_groups,
)
from providers.bounded import Answer, BoundedAdapter

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class RefusedTarget(Exception):
    """The connection reached an address webhooks may not go to.

    Deliberately not an OSError: urllib3 would take it for a network failure and retry.
    """


def check_peer(address: str, allowed: Sequence[Network], plain_http: bool) -> None:
    """Refuse a non-public address unless allowed, and plain http anywhere but allowed networks."""
    ip = ipaddress.ip_address(address.split("%")[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    if any(ip in network for network in allowed):
        return
    if plain_http:
        raise RefusedTarget(f"plain http to {ip} refused: webhooks use https")
    if not ip.is_global or ip.is_multicast:
        raise RefusedTarget(f"{ip} is a private, loopback or link-local address")


def guarded(base: type[HTTPConnection], allowed: Sequence[Network]) -> type[HTTPConnection]:
    """A urllib3 connection class that checks the peer right after connecting, before TLS."""
    plain_http = not issubclass(base, HTTPSConnection)

    class Guarded(base):
        def _new_conn(self):
            sock = super()._new_conn()
            try:
                check_peer(sock.getpeername()[0], allowed, plain_http=plain_http)
            except RefusedTarget:
                sock.close()
                raise
            return sock

    return Guarded


class GuardedAdapter(BoundedAdapter):
    """A bounded requests transport whose every connection also goes through `check_peer`."""

    def __init__(self, allowed: Sequence[Network]):
        super().__init__(lambda base: guarded(base, allowed))


def classify(response: Answer) -> ProviderError:
    """A receiver's answer concerns its own endpoint only: never pause the whole channel.

    Timeouts, 5xx, 408, 409, 425 and 429 are worth another attempt later; any other answer
    (3xx, which we do not follow, 4xx, and 410 Gone above all) fails the message. Its body
    is only an excerpt in the error.
    """
    detail = f"HTTP {response.status_code} from the receiver: {response.excerpt(300)}"
    if response.status_code >= 500 or response.status_code in (408, 409, 425, 429):
        return TransientError(detail)
    return PermanentError(detail)


def guarded_session(allowed: Sequence[Network]) -> requests.Session:
    """A bounded session whose every connection goes through `check_peer`, and that ignores
    proxies from the environment (a proxy would hide the real target)."""
    session = requests.Session()
    session.trust_env = False
    session.mount("http://", GuardedAdapter(allowed))
    session.mount("https://", GuardedAdapter(allowed))
    return session


def signed_headers(webhook_id: str, body: str, keys: Sequence[bytes]) -> dict[str, str]:
    """Standard Webhooks headers: `v1,` + base64 HMAC-SHA256 of `{id}.{timestamp}.{body}`.

    Several keys give several space-separated signatures, as the spec allows while a
    secret is being rotated: a receiver holding either secret verifies the request.
    """
    timestamp = str(int(time.time()))
    return {
        "Content-Type": "application/json",
        "webhook-id": webhook_id,
        "webhook-timestamp": timestamp,
        "webhook-signature": " ".join(signing.sign(key, webhook_id, timestamp, body.encode()) for key in keys),
    }


def networks(raw: str) -> list[Network]:
    try:
        return [ipaddress.ip_network(item.strip()) for item in raw.split(",") if item.strip()]
    except ValueError as error:
        raise ValueError(f"WEBHOOK_ALLOWED_NETWORKS: {error}") from None


class WebhookProvider:
    name: ClassVar[str] = "webhook"
    channels: ClassVar[frozenset[str]] = frozenset({"webhook"})
    max_batch: ClassVar[int] = 1
    idempotent: bool = True  # webhook-id is our message id: receivers de-duplicate on it
    account_settings: ClassVar[tuple[str, ...]] = ("WEBHOOK_SIGNING_SECRET",)

    def __init__(self, secret: str, allowed: Sequence[Network], timeout: float):
        self.key = signing.secret_key(secret, "WEBHOOK_SIGNING_SECRET")
        self.client = HttpClient("", timeout=timeout, classify=classify, session=guarded_session(allowed))

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Self:
        return cls(
            required(env, "WEBHOOK_SIGNING_SECRET"),
            networks(env.get("WEBHOOK_ALLOWED_NETWORKS", "")),
            number(env, "WEBHOOK_TIMEOUT", 10.0),
        )

    def send(self, batch: Sequence[Outbound]) -> list[SendResult]:
        return send_groups(one_by_one(batch), self._send_one)

    def _send_one(self, group: Sequence[Outbound]) -> list[SendResult]:
        message = group[0]
        if not message.to.startswith(("https://", "http://")):
            raise PermanentError(f"not an http(s) URL: {message.to!r}")
        body = request_body(message)
        try:
            self.client.request("POST", message.to, data=body.encode(), headers=self.headers(message, body))
        except RefusedTarget as error:
            raise PermanentError(f"refused target {message.to}: {error}") from error
        return [SendResult(message.message_id, Outcome.SENT, provider_message_id=message.message_id)]

    def headers(self, message: Outbound, body: str) -> dict[str, str]:
        """Signed with the message's project's keys where it has them, so that no project can
        sign for another; with this adapter's (the deployment's or an own account's) otherwise."""
        keys = [self.key if key is None else key for key in message.signing_keys] or [self.key]
        return signed_headers(message.message_id, body, keys)


def request_body(message: Outbound) -> str:
    """The JSON we POST, compact; apart from sending, so benchmarks can time building alone."""
    return json.dumps(payload(message), separators=(",", ":"))


def payload(message: Outbound) -> Any:
    """The rendered JSON in `data`; a message without it sends its subject and bodies."""
    if message.data is not None:
        return message.data
    content = {"subject": message.subject, "text": message.text, "html": message.html}
    return {key: value for key, value in content.items() if value is not None}
