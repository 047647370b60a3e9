"""The vocabularies of Tidings, one StrEnum each, used by the API, the models and the tasks."""

from enum import StrEnum


class Channel(StrEnum):
    EMAIL = "email"
    SMS = "sms"
    PUSH = "push"
    WEBHOOK = "webhook"
    IN_APP = "in_app"


class Priority(StrEnum):
    TRANSACTIONAL = "transactional"
    BULK = "bulk"


class KeyKind(StrEnum):
    LIVE = "live"
    TEST = "test"


class MessageStatus(StrEnum):
    SCHEDULED = "scheduled"
    ACCEPTED = "accepted"
    READY = "ready"
    SENDING = "sending"
    RETRYING = "retrying"
    SENT = "sent"
    DELIVERED = "delivered"
    BOUNCED = "bounced"
    COMPLAINED = "complained"
    FAILED = "failed"
    DEAD = "dead"
    SUPPRESSED = "suppressed"
    SKIPPED = "skipped"
    CANCELLED = "cancelled"
    UNKNOWN = "unknown"


# Statuses in which a message still has work ahead of it; the partial index covers them.
ACTIVE_STATUSES = (
    MessageStatus.SCHEDULED,
    MessageStatus.ACCEPTED,
    MessageStatus.READY,
    MessageStatus.SENDING,
    MessageStatus.RETRYING,
)


class EventType(StrEnum):
    ACCEPTED = "accepted"
    SCHEDULED = "scheduled"
    READY = "ready"
    SENDING = "sending"
    SENT = "sent"
    DELIVERED = "delivered"
    BOUNCED = "bounced"
    COMPLAINED = "complained"
    OPENED = "opened"
    CLICKED = "clicked"
    UNSUBSCRIBED = "unsubscribed"
    FAILED = "failed"
    RETRYING = "retrying"
    DEAD = "dead"
    SUPPRESSED = "suppressed"
    SKIPPED = "skipped"
    CANCELLED = "cancelled"
    REQUEUED = "requeued"
    UNKNOWN = "unknown"


class CircuitState(StrEnum):
    """A provider's circuit breaker: closed (in use), open (skipped), half-open (one probe may go)."""

    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class SuppressionReason(StrEnum):
    BOUNCE = "bounce"
    COMPLAINT = "complaint"
    UNSUBSCRIBE = "unsubscribe"
    MANUAL = "manual"
