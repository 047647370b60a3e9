"""The provider interface, its error types and the HTTP plumbing adapters share."""

from __future__ import annotations

import email.utils
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar, Protocol, Self

import requests


class ProviderError(Exception):
    """A provider refused or could not take a message; `retryable` says what to do next."""

    retryable: ClassVar[bool] = False


class TransientError(ProviderError):
    """5xx, timeouts, connection resets: worth another attempt later."""

    retryable = True


class RateLimited(TransientError):
    """429: the provider asks everyone to wait; the attempt is not counted."""

    def __init__(self, detail: str, retry_after: float):
        super().__init__(detail)
        self.retry_after = retry_after


class PermanentError(ProviderError):
    """Invalid address, rejected content: another attempt would fail the same way."""


class Outcome(StrEnum):
    SENT = "sent"
    PERMANENT = "permanent"
    TRANSIENT = "transient"


@dataclass(frozen=True)
class Outbound:
    """One rendered message, as much as an adapter needs to send it."""

    message_id: str
    channel: str
    to: str
    subject: str | None = None
    text: str | None = None
    html: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SendResult:
    """What happened to one message of a batch."""

    message_id: str
    outcome: Outcome
    provider_message_id: str | None = None
    error: str | None = None


class Provider(Protocol):
    name: ClassVar[str]
    channels: ClassVar[frozenset[str]]
    max_batch: ClassVar[int]  # 1 for providers without a batch API
    # True when the provider de-duplicates on our message id (an idempotency key): a send
    # interrupted mid-call may then be retried without risk of a second delivery.
    idempotent: bool

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Self:
        """Build the adapter from its settings; raise ValueError naming a missing one."""
        ...

    def send(self, batch: Sequence[Outbound]) -> list[SendResult]:
        """Send up to max_batch messages; raise ProviderError when the whole call failed."""
        ...


def retry_after_seconds(value: str | None, default: float = 1.0) -> float:
    """Read a Retry-After header, which may be seconds or an HTTP date."""
    if not value:
        return default
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        return max(email.utils.parsedate_to_datetime(value).timestamp() - time.time(), 0.0)
    except (TypeError, ValueError):
        return default


class HttpClient:
    """A pooled session with timeouts that turns HTTP failures into provider errors.

    Adapters build payloads and read answers; this class owns everything that is the same
    for every provider: connection reuse, timeouts and the status-code → error mapping.
    """

    def __init__(self, base_url: str, headers: Mapping[str, str] | None = None, timeout: float = 10.0):
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.session = requests.Session()
        self.session.headers.update(headers or {})

    def post_json(self, path: str, payload: Any, headers: Mapping[str, str] | None = None) -> Any:
        try:
            response = self.session.post(self.base_url + path, json=payload, headers=headers, timeout=self.timeout)
        except requests.RequestException as error:
            raise TransientError(f"{type(error).__name__}: {error}") from error
        raise_for_status(response)
        return response.json() if response.content else None


def raise_for_status(response: requests.Response) -> None:
    """Map a provider's HTTP status to our error types; 2xx passes."""
    if response.status_code < 300:
        return
    detail = f"HTTP {response.status_code}: {response.text[:500]}"
    if response.status_code == 429:
        raise RateLimited(detail, retry_after_seconds(response.headers.get("Retry-After")))
    if response.status_code >= 500 or response.status_code in (408, 409):
        raise TransientError(detail)
    raise PermanentError(detail)
