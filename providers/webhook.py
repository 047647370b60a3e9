"""Webhook (webhook channel): POST the message's JSON to its URL, signed as Standard Webhooks.

Headers `webhook-id` (our message id, the same on every retry so the receiver can
deduplicate), `webhook-timestamp` and `webhook-signature` (providers/signing.py), as
standardwebhooks.com specifies. The engine hands each message its project's keys
(`Outbound.signing_keys`), so no project signs for another; the configured
WEBHOOK_SIGNING_SECRET signs only where it says so, or for a message that brings none.

The URL comes from whoever sends the notification, so the request must not become a way
into our own network (SSRF). Each new connection resolves the name once, checks every
address it has, and connects to exactly the checked address (a second lookup could answer
otherwise: DNS rebinding); TLS and the Host header still use the name. Private, loopback
and link-local addresses are refused, and so are public-looking IPv6 addresses that carry
such an IPv4 address (mapped, NAT64, 6to4). Plain http is allowed only to networks listed
in WEBHOOK_ALLOWED_NETWORKS (an internal service, or tests on 127.0.0.1).

Whatever stopped us reaching a target (a refused address, a closed port, a name that does
not resolve), its sender is told the same words, `UNREACHABLE`: different words would let
a tenant map our internal network through the guard. The precise reason goes to the log.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Self, cast

import requests
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.exceptions import NameResolutionError

from providers import signing
from providers.base import (
    HttpClient,
    Outbound,
    Outcome,
    PermanentError,
    ProviderError,
    SendResult,
    TransientError,
    Unreachable,
    number,
    one_by_one,
    required,
    send_groups,
)
from providers.bounded import Answer, BoundedAdapter

logger = logging.getLogger(__name__)

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address
# A name's addresses, in the resolver's order: `socket.getaddrinfo` unless a test says otherwise.
Resolver = Callable[[str, int], list[str]]

# What a tenant is told when a target could not be reached, whatever the reason.
UNREACHABLE = "the target could not be reached"

NAT64 = ipaddress.IPv6Network("64:ff9b::/96")  # RFC 6052's well-known prefix: the IPv4 address is the last 32 bits
LOCAL_NAT64 = ipaddress.IPv6Network("64:ff9b:1::/48")  # RFC 8215: an operator's own, of any RFC 6052 length


class RefusedTarget(Exception):
    """The connection would reach an address webhooks may not go to.

    Deliberately not an OSError: urllib3 would take it for a network failure and retry.
    """


def resolve(host: str, port: int) -> list[str]:
    """Every address of `host`, once each, in the system resolver's order."""
    # An IPv4 or IPv6 address is a str; typeshed's int is for the other families.
    found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(cast(str, info[4][0]) for info in found))


def embedded_ipv4(ip: Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address leads to through a translator, for judging it by them.

    A local-use NAT64 prefix may be of any RFC 6052 length from /48 to /96, each placing the
    IPv4 address elsewhere (around the reserved octet 8): we cannot know which one the
    network uses, so every reading is judged.
    """
    if isinstance(ip, ipaddress.IPv4Address):
        return []
    if ip.ipv4_mapped:
        return [ip.ipv4_mapped]
    if ip.sixtofour:  # 6to4, 2002::/16: the IPv4 address is bits 16 to 47
        return [ip.sixtofour]
    if ip in NAT64:
        return [ipaddress.IPv4Address(ip.packed[12:])]
    if ip in LOCAL_NAT64:
        octets = ip.packed[:8] + ip.packed[9:]  # without the reserved octet
        return [ipaddress.IPv4Address(ip.packed[12:])] + [
            ipaddress.IPv4Address(octets[length // 8 : length // 8 + 4]) for length in (48, 56, 64)
        ]
    return []


def check_peer(address: str, allowed: Sequence[Network], plain_http: bool) -> None:
    """Refuse a non-public address unless allowed, and plain http anywhere but allowed networks.

    An address that carries IPv4 addresses (`embedded_ipv4`) is judged by them: they are where
    the packets end up.
    """
    ip = ipaddress.ip_address(address.split("%")[0])
    judged: Sequence[Address] = embedded_ipv4(ip) or [ip]
    if any(ip in network for network in allowed) or all(
        any(target in network for network in allowed) for target in judged
    ):
        return
    if plain_http:
        raise RefusedTarget(f"plain http to {ip} refused: webhooks use https")
    for target in judged:
        if not target.is_global or target.is_multicast:
            shown = f"{ip} (to {target})" if target != ip else str(ip)
            raise RefusedTarget(f"{shown} is a private, loopback or link-local address")


def checked_address(host: str, port: int, allowed: Sequence[Network], plain_http: bool, resolver: Resolver) -> str:
    """The address to connect to `host` at: its first, once all of them pass `check_peer`.

    One refused address refuses the name, rather than trying the next: a receiver has no
    reason to publish an internal address, and the answer would depend on the order the
    resolver happens to give.
    """
    addresses = resolver(host, port)
    if not addresses:
        raise socket.gaierror(socket.EAI_NONAME, f"{host} has no address")
    for address in addresses:
        try:
            check_peer(address, allowed, plain_http)
        except RefusedTarget as error:
            raise RefusedTarget(f"{host} resolves to {address}: {error}") from None
    return addresses[0]


def guarded(base: type[HTTPConnection], allowed: Sequence[Network], resolver: Resolver) -> type[HTTPConnection]:
    """A urllib3 connection class that connects only to an address `checked_address` chose."""
    plain_http = not issubclass(base, HTTPSConnection)

    class Guarded(base):  # type: ignore[misc, valid-type]  # a base chosen at run time, which mypy cannot check
        def _new_conn(self):
            name = self._dns_host
            try:
                address = checked_address(name, self.port, allowed, plain_http, resolver)
            except socket.gaierror as error:
                raise NameResolutionError(self.host, self, error) from error
            # urllib3 connects to `_dns_host`; `host`, read again for SNI, the certificate and
            # the Host header once we return, stays the name.
            self._dns_host = address
            try:
                sock = super()._new_conn()
            finally:
                self._dns_host = name
            peer = sock.getpeername()[0]
            if ipaddress.ip_address(peer.split("%")[0]) != ipaddress.ip_address(address.split("%")[0]):
                sock.close()  # cannot happen unless something below us resolved again
                raise RefusedTarget(f"connected to {peer}, not to the checked {address}")
            return sock

    return Guarded


class GuardedAdapter(BoundedAdapter):
    """A bounded requests transport whose every connection goes only where `checked_address` allows."""

    def __init__(self, allowed: Sequence[Network], resolver: Resolver = resolve):
        super().__init__(lambda base: guarded(base, allowed, resolver))


def project_networks(raw: Any, whose: str) -> tuple[Network, ...]:
    """The networks a project's settings add (for `whose` delivery); none when they cannot
    be read (written past the schema), which leaves the guard as closed as the deployment's."""
    try:
        return tuple(ipaddress.ip_network(item) for item in raw or ())
    except (TypeError, ValueError) as error:
        logger.warning("%s: its project's webhook_allowed_networks ignored: %s", whose, error)
        return ()


def unreachable(url: str, error: Exception) -> str:
    """`UNREACHABLE`, for the tenant, once the precise reason for the operator is logged."""
    logger.warning("webhook target %s not reached: %s", url, error)
    return UNREACHABLE


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


def guarded_session(allowed: Sequence[Network], resolver: Resolver = resolve) -> requests.Session:
    """A bounded session whose every connection goes through `checked_address`, and that
    ignores proxies from the environment (a proxy would hide the real target)."""
    session = requests.Session()
    session.trust_env = False
    session.mount("http://", GuardedAdapter(allowed, resolver))
    session.mount("https://", GuardedAdapter(allowed, resolver))
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
    # Every message goes to its tenant's own receiver: one tenant's failing receivers must
    # never open the channel's circuit for the others.
    endpoint_per_message: ClassVar[bool] = True
    account_settings: ClassVar[tuple[str, ...]] = ("WEBHOOK_SIGNING_SECRET",)

    def __init__(self, secret: str, allowed: Sequence[Network], timeout: float, resolver: Resolver = resolve):
        self.key = signing.secret_key(secret, "WEBHOOK_SIGNING_SECRET")
        self.allowed, self.timeout, self.resolver = tuple(allowed), timeout, resolver
        self.clients: dict[tuple[Network, ...], HttpClient] = {}

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
        client = self.client(project_networks(message.allowed_networks, f"message {message.message_id}"))
        try:
            client.request("POST", message.to, data=body.encode(), headers=self.headers(message, body))
        except (RefusedTarget, Unreachable) as error:
            # Transient, like any receiver that is down, and never provider-wide: one tenant's
            # target concerns its own messages, not the channel.
            raise TransientError(unreachable(message.to, error)) from error
        return [SendResult(message.message_id, Outcome.SENT, provider_message_id=message.message_id)]

    def client(self, added: tuple[Network, ...]) -> HttpClient:
        """A pooled client per set of networks the messages' projects add to the deployment's."""
        if added not in self.clients:
            session = guarded_session(self.allowed + added, self.resolver)
            self.clients[added] = HttpClient("", timeout=self.timeout, classify=classify, session=session)
        return self.clients[added]

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
