"""The provider interface, its error types and the plumbing adapters share.

An adapter is mostly a table: it builds its provider's payload, reads the answer, and maps
the provider's error codes onto the error classes below. Everything that is the same for
every provider lives here: the HTTP session and its deadline, reading rate-limit headers,
turning an error into a per-message result, and sending one request per message (or group)
without reporting already-sent messages as failed.
"""

from __future__ import annotations

import email.utils
import logging
import re
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar, Protocol, Self

import requests
from urllib3.exceptions import ProtocolError

from providers.bounded import ANSWER_LIMIT, Answer, bound, exchange

logger = logging.getLogger(__name__)


# The name under which our message id travels in a provider's metadata (tags, custom args):
# the provider echoes it in its status webhooks, which is how they find the message.
MESSAGE_ID_TAG = "tidings_message_id"

# The setting that tells an adapter whose provider takes a status callback URL per message
# (Twilio) where to have each message's status reported: our inbound URL for that provider and
# account. The engine sets it (app/delivery/adapters.py), not an operator.
STATUS_CALLBACK_URL = "TIDINGS_STATUS_CALLBACK_URL"


class Outcome(StrEnum):
    """What the engine does with one message after a provider call."""

    SENT = "sent"
    PERMANENT = "permanent"  # fail the message (and apply `suppress` / `invalid_token`)
    TRANSIENT = "transient"  # retry with backoff; uses an attempt
    RATE_LIMITED = "rate_limited"  # pause the provider for `retry_after`; no attempt used
    CONFIGURATION = "configuration"  # pause the provider and alert; no attempt used


class ProviderError(Exception):
    """A provider refused or could not take a message; `outcome` says what to do next.

    The class attributes are the defaults a per-message result inherits (see
    `SendResult.from_error`); subclasses and instances override them.
    """

    retryable: ClassVar[bool] = False
    outcome: ClassVar[Outcome] = Outcome.PERMANENT
    # True when every other message would meet the same fate now: stop sending the batch.
    provider_wide: ClassVar[bool] = False
    suppress: ClassVar[bool] = False
    suppress_reason: ClassVar[str | None] = None  # bounce, complaint, unsubscribe
    invalid_token: ClassVar[bool] = False
    retry_after: float | None = None
    # The provider's answer, when there was one: kept for adapters that read more from it.
    response: Answer | None = None


class TransientError(ProviderError):
    """5xx, timeouts, connection resets: worth another attempt later.

    `ambiguous` is set when the request left and no answer came back (a read timeout, a
    dropped connection): the provider may have accepted the message, so a retry may
    duplicate it unless the provider honours our idempotency key.
    """

    retryable = True
    outcome = Outcome.TRANSIENT

    def __init__(self, detail: str, ambiguous: bool = False):
        super().__init__(detail)
        self.ambiguous = ambiguous


class RateLimited(TransientError):
    """429: the provider asks everyone to wait; the attempt is not counted."""

    outcome = Outcome.RATE_LIMITED
    provider_wide = True

    def __init__(self, detail: str, retry_after: float):
        super().__init__(detail)
        self.retry_after = retry_after


class Unreachable(TransientError):
    """The provider could not be reached at all (connection refused, connect timeout), so
    nothing was sent; trying the rest of the batch now would only wait the same way."""

    provider_wide = True


class PermanentError(ProviderError):
    """Invalid address, rejected content: another attempt would fail the same way."""


class SuppressRecipient(PermanentError):
    """The provider says this recipient must not be sent to again (inactive, bounced):
    fail the message and add the address to the project's suppression list, as a bounce
    unless the provider says more.
    """

    suppress = True
    suppress_reason = "bounce"


class Unsubscribed(SuppressRecipient):
    """The recipient asked not to be contacted (an SMS STOP): suppressed as an unsubscribe."""

    suppress_reason = "unsubscribe"


class InvalidToken(PermanentError):
    """The push token no longer exists: fail the message and remove the token from its subscriber."""

    invalid_token = True


class ConfigurationError(ProviderError):
    """Bad credentials, unverified sender, paused or suspended account.

    Not the message's fault and not retryable per message: every message would fail the
    same way until a person fixes the account, so the engine pauses the provider and alerts.
    """

    outcome = Outcome.CONFIGURATION
    provider_wide = True


@dataclass(frozen=True)
class Attachment:
    """A file carried with an email, as the providers take it: base64 text, never decoded.

    `content` is the base64 of the file without line breaks; every provider that takes
    attachments wants base64, so it is stored, loaded and sent as it arrived.
    """

    filename: str
    content_type: str
    content: str


@dataclass(frozen=True)
class Outbound:
    """One rendered message, as much as an adapter needs to send it.

    The first seven fields keep their positional order (the engine builds them that way);
    the rest are optional extras that adapters use where their provider has the feature.
    """

    message_id: str
    channel: str
    to: str
    subject: str | None = None
    text: str | None = None
    html: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    # Overrides the adapter's configured sender (EMAIL_FROM, TWILIO_FROM).
    from_address: str | None = None
    reply_to: str | None = None
    # Extra email headers, e.g. List-Unsubscribe and List-Unsubscribe-Post (RFC 8058).
    headers: Mapping[str, str] = field(default_factory=dict)
    # The JSON payload of a push notification's data or of a webhook's body.
    data: Mapping[str, Any] | None = None
    # The Cc header as the sender wrote it, shown to the recipient but never sent to: every
    # address in it was a recipient of its own (one message per recipient).
    cc: str | None = None
    # Files, for adapters that declare `attachments = True` (see `registry.carries_attachments`).
    attachments: Sequence[Attachment] = ()
    # The keys a signing adapter (webhook) signs with instead of its configured one, each
    # giving a signature: the project's own, current first. None stands for the adapter's
    # configured key; empty: that key alone.
    signing_keys: Sequence[bytes | None] = ()
    # CIDRs a webhook's project may reach besides WEBHOOK_ALLOWED_NETWORKS (its settings, set
    # by an operator); unread by other adapters.
    allowed_networks: Sequence[str] = ()


@dataclass(frozen=True)
class Report:
    """News of a message a provider gives in its answer rather than by a later status webhook.

    Only the simulator knows at send time what will become of a message; the engine applies
    its reports once the send is written, through the code that applies status webhooks
    (and tracking, for opens and clicks), so what follows is what a real provider's news
    would cause. `kind` is an event type: delivered, bounced (a hard bounce), complained,
    opened or clicked; `url` is the link a click followed.
    """

    kind: str
    url: str = ""


@dataclass(frozen=True)
class SendResult:
    """What happened to one message of a batch, and what the engine must do about it."""

    message_id: str
    outcome: Outcome
    provider_message_id: str | None = None
    error: str | None = None
    # Add the recipient's address to the suppression list (with a PERMANENT outcome), and why.
    suppress: bool = False
    suppress_reason: str | None = None
    # Remove the push token from its subscriber (with a PERMANENT outcome).
    invalid_token: bool = False
    # How long to pause the provider (with a RATE_LIMITED outcome).
    retry_after: float | None = None
    # What the provider already says will follow, in order (with a SENT outcome; see Report).
    reports: tuple[Report, ...] = ()

    @classmethod
    def from_error(cls, message_id: str, error: ProviderError) -> SendResult:
        """The result an error means for one message; the engine can use it for whole-call errors."""
        return cls(
            message_id,
            error.outcome,
            error=str(error),
            suppress=error.suppress,
            suppress_reason=error.suppress_reason,
            invalid_token=error.invalid_token,
            retry_after=error.retry_after,
        )


class Provider(Protocol):
    name: ClassVar[str]
    channels: ClassVar[frozenset[str]]
    max_batch: ClassVar[int]  # 1 for providers without a batch API
    # Adapters that send `Outbound.attachments` also set `attachments: ClassVar[bool] = True`;
    # the others leave it out (read through `registry.carries_attachments`). Likewise
    # `endpoint_per_message` (`registry.endpoint_per_message`): each message goes to its own.
    # True when the provider de-duplicates on our message id (an idempotency key): a send
    # interrupted mid-call may then be retried without risk of a second delivery.
    idempotent: bool
    # The settings that make up an account with the provider (credentials, sender): what a
    # project may bring as its own. Addresses, timeouts and network rules stay the deployment's.
    account_settings: ClassVar[tuple[str, ...]]

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Self:
        """Build the adapter from its settings; raise ValueError naming a missing one."""
        ...

    def send(self, batch: Sequence[Outbound]) -> list[SendResult]:
        """Send up to max_batch messages; raise ProviderError when the whole call failed."""
        ...


# -- settings -------------------------------------------------------------------------------


def required(env: Mapping[str, str], name: str) -> str:
    value = env.get(name, "").strip()
    if not value:
        raise ValueError(f"{name} is not set")
    return value


def number(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name} must be a number; got {raw!r}") from None
    if value <= 0:
        raise ValueError(f"{name} must be positive; got {raw!r}")
    return value


def http_client(
    env: Mapping[str, str],
    prefix: str,
    default_url: str,
    classify: Callable[[Answer], ProviderError] | None = None,
    headers: Mapping[str, str] | None = None,
) -> HttpClient:
    """An HttpClient from the `{prefix}_BASE_URL` and `{prefix}_TIMEOUT` (a whole call's deadline) settings.

    Every adapter's base URL is configurable so tests, and the load-test fake server, can
    stand in for the real provider on 127.0.0.1.
    """
    return HttpClient(
        env.get(f"{prefix}_BASE_URL", "").strip() or default_url,
        headers=headers,
        timeout=number(env, f"{prefix}_TIMEOUT", 10.0),
        classify=classify or error_for_status,
    )


def with_message_id(url: str, message_id: str) -> str:
    """`url` with our message id added to its query, for a provider that calls back the URL it
    was given rather than echoing metadata."""
    parts = urllib.parse.urlsplit(url)
    added = urllib.parse.urlencode({MESSAGE_ID_TAG: message_id})
    return parts._replace(query=f"{parts.query}&{added}" if parts.query else added).geturl()


# -- rate-limit headers ---------------------------------------------------------------------


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


def wait_from_headers(headers: Mapping[str, str], default: float = 1.0) -> float:
    """How long a 429 asks us to wait: Retry-After, the IETF `RateLimit-Reset` (seconds), or
    `X-RateLimit-Reset` (SendGrid and others: a Unix time)."""
    if headers.get("Retry-After"):
        return retry_after_seconds(headers["Retry-After"], default)
    for name in ("RateLimit-Reset", "X-RateLimit-Reset"):
        try:
            value = float(headers.get(name, ""))
        except ValueError:
            continue
        # A value this large is a point in time, not a number of seconds.
        return max(value - time.time(), 0.0) if value > 1_000_000_000 else max(value, 0.0)
    return default


# -- HTTP -----------------------------------------------------------------------------------


def build_error(kind: type[ProviderError], detail: str, response: Answer) -> ProviderError:
    """Instantiate an error class from an adapter's table, reading the wait for RateLimited."""
    if issubclass(kind, RateLimited):
        return kind(detail, wait_from_headers(response.headers))
    return kind(detail)


def error_for_status(response: Answer, detail: str | None = None) -> ProviderError:
    """The error an HTTP status means when the provider's body says nothing more specific."""
    detail = detail or f"HTTP {response.status_code}: {response.excerpt(500)}"
    status = response.status_code
    if status == 429:
        return build_error(RateLimited, detail, response)
    if status in (401, 403):
        return ConfigurationError(detail)
    if status >= 500 or status in (408, 409):
        return TransientError(detail)
    return PermanentError(detail)


def error_from_table(
    table: Mapping[Any, type[ProviderError]], code: Any, detail: str, response: Answer
) -> ProviderError:
    """The error for a provider's own error code, falling back on the HTTP status."""
    kind = table.get(code)
    return build_error(kind, detail, response) if kind else error_for_status(response, detail)


def json_body(response: Answer) -> Any:
    """The answer's JSON, or None when it has none (an error page, an empty body, one cut off)."""
    try:
        return response.json()
    except ValueError:
        return None


class HttpClient:
    """A pooled session with a deadline per call that turns HTTP failures into provider errors.

    Adapters build payloads and read answers; this class owns what is the same for every
    provider: connection reuse, the deadline and the cap on answers (providers/bounded.py),
    redirects (never followed: a provider API does not redirect a POST, and a webhook
    target must not bounce us elsewhere), and the status → error mapping, refined per
    provider by `classify`.
    """

    def __init__(
        self,
        base_url: str,
        headers: Mapping[str, str] | None = None,
        timeout: float = 10.0,
        classify: Callable[[Answer], ProviderError] = error_for_status,
        session: requests.Session | None = None,
    ):
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout  # for the whole call: connect, send and the answer
        self.classify = classify
        self.session = bound(session or requests.Session())
        self.session.headers.update(headers or {})

    def request(self, method: str, path: str, limit: int = ANSWER_LIMIT, **kwargs: Any) -> Answer:
        """Send one request and read at most `limit` bytes of its answer; raise the provider
        error its failure means.

        `path` is appended to the base URL unless it is a whole URL (webhook targets).
        """
        url = path if path.startswith(("https://", "http://")) else self.base_url + path
        try:
            response = exchange(self.session, method, url, self.timeout, limit, **kwargs)
        except requests.ReadTimeout as error:  # the deadline passed after the request left
            raise ambiguous(url, str(error)) from error
        except requests.ConnectionError as error:
            if never_connected(error):
                raise Unreachable(f"could not connect to {url}: {error}") from error
            raise ambiguous(url, f"connection dropped: {error}") from error
        except requests.RequestException as error:
            raise TransientError(f"{type(error).__name__}: {error}") from error
        if response.status_code >= 300:
            failure = self.classify(response)
            failure.response = response
            raise failure
        return response

    def post_json(self, path: str, payload: Any = None, headers: Mapping[str, str] | None = None, **kwargs: Any) -> Any:
        """POST `payload` as JSON (or `data=` as given) and return the answer's JSON, None if empty.

        A 2xx answer that cannot be read is ambiguous: the provider took the request.
        """
        if payload is not None:
            kwargs["json"] = payload
        response = self.request("POST", path, headers=headers, **kwargs)
        return self.success_json(response, path) if response.content else None

    def success_json(self, response: Answer, path: str) -> Any:
        """The JSON of a 2xx answer; one too long or unreadable is ambiguous: the provider took the request."""
        if response.oversize:
            raise ambiguous(self.base_url + path, f"answer over {response.limit // 1024} KiB")
        answer = json_body(response)
        if answer is None:
            raise ambiguous(self.base_url + path, f"unreadable answer: {response.excerpt(200)!r}")
        return answer


def never_connected(error: requests.RequestException) -> bool:
    """Whether the request failed before it left: no connection (refused, timed out, no such
    name, TLS refused), rather than one dropped after the request was sent, which is ambiguous."""
    return isinstance(error, requests.ConnectionError) and not any(isinstance(arg, ProtocolError) for arg in error.args)


def ambiguous(url: str, detail: str) -> TransientError:
    """A transient error for a request that may have been taken; logged, because a retry may
    duplicate the message where the provider has no idempotency key."""
    logger.warning("ambiguous provider call to %s: %s; the message may have been accepted", url, detail)
    return TransientError(f"ambiguous: {detail}", ambiguous=True)


# -- sending one request per message or group -----------------------------------------------


def send_groups(
    groups: Sequence[Sequence[Outbound]],
    send: Callable[[Sequence[Outbound]], list[SendResult]],
) -> list[SendResult]:
    """Send each group with one provider call, turning each call's error into its messages' results.

    For providers that take one message (or one group of alike messages) per request. An
    error that concerns the provider as a whole (rate limited, misconfigured, unreachable)
    stops the loop: raised when nothing has been tried yet, so the engine pauses the provider exactly
    as for a batch call; otherwise recorded for the messages not yet tried, because raising
    would report the messages already sent as failed.
    """
    results: list[SendResult] = []
    for index, group in enumerate(groups):
        try:
            results.extend(send(group))
        except ProviderError as error:
            if not error.provider_wide:
                results.extend(SendResult.from_error(m.message_id, error) for m in group)
                continue
            if not results:
                raise
            untried = [m for rest in groups[index:] for m in rest]
            results.extend(SendResult.from_error(m.message_id, error) for m in untried)
            break
    return results


# What a display name must be quoted for (RFC 5322 specials), as email.utils has it.
SPECIALS = re.compile(r'[][\\()<>@,:;".]')


def display_address(name: str | None, address: str) -> str:
    """`Name <address>`, the name quoted where RFC 5322 needs it (as `email.utils.formataddr`
    does) but never encoded: JSON APIs take UTF-8, and the SMTP adapter's email library
    encodes the header itself."""
    if not name:
        return address
    if SPECIALS.search(name):
        name = '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return f"{name} <{address}>"


def addresses(header: str) -> list[str]:
    """Each address of an address header (`a@x.example, Bo <b@y.example>`), for the APIs that
    take a list where SMTP takes one header."""
    return [display_address(name, address) for name, address in email.utils.getaddresses([header]) if address]


def one_by_one(batch: Sequence[Outbound]) -> list[list[Outbound]]:
    return [[message] for message in batch]


def attachments_alone(batch: Sequence[Outbound]) -> list[list[Outbound]]:
    """Each message with attachments in a group of its own, the others in one group.

    For batch APIs that cannot carry attachments (Resend) or cap a whole request's size
    (Postmark: 50 MB for a batch, 10 MB for one message).
    """
    rest = [m for m in batch if not m.attachments]
    return [[m] for m in batch if m.attachments] + ([rest] if rest else [])
