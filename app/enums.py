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


# Statuses an operator may send again (`requeue`): dead letters, and `unknown` messages,
# which may have been delivered already and so may arrive twice.
REQUEUABLE_STATUSES = (MessageStatus.DEAD, MessageStatus.UNKNOWN)


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
    # A transactional message above its project's transactional rate, served as bulk; its data says why.
    DEMOTED = "demoted"
    UNKNOWN = "unknown"
    # A project-level event: an outbound webhook endpoint was switched off (410, or failing for days).
    WEBHOOK_DISABLED = "webhook_disabled"
    # A project-level event: a subscriber's preferences were replaced (by the API or the
    # subscriber's own preference page); its data says by which and what they are now.
    PREFERENCES = "preferences"
    # One device of a push message to a subscriber, and where it stands (app/delivery/device_store.py).
    DEVICE = "device"
    # A workflow run's steps and its end (app/workflows/): project-level events whose data names
    # the run; a `send` step's event names the message it wrote.
    WORKFLOW_STEP = "workflow.step"
    WORKFLOW_COMPLETED = "workflow.completed"
    WORKFLOW_CANCELLED = "workflow.cancelled"


# Pipeline steps a customer never needs told: the 202 answer says accepted, and ready and
# sending are internal; a push message's devices are summed up by its own status. The
# delivery log, the live stream and webhooks carry every other type.
INTERNAL_EVENT_TYPES = (EventType.ACCEPTED, EventType.READY, EventType.SENDING, EventType.DEVICE)
PUBLIC_EVENT_TYPES = tuple(t for t in EventType if t not in INTERNAL_EVENT_TYPES)


class DeviceStatus(StrEnum):
    """Where one device of a push message stands. Pending and retrying devices are sent at
    the message's next attempt; the others are settled and never sent again."""

    PENDING = "pending"
    RETRYING = "retrying"
    SENT = "sent"
    FAILED = "failed"
    DEAD = "dead"  # still failing transiently when the message's attempts ran out
    SUPPRESSED = "suppressed"  # the token is on the project's suppression list


class RunStatus(StrEnum):
    """Where a workflow run stands: running until its last step, or ended early by a step or a cancel."""

    RUNNING = "running"
    COMPLETED = "completed"
    CANCELLED = "cancelled"
    FAILED = "failed"
    THROTTLED = "throttled"
    # Gathered into another run's digest, which goes on for it.
    DIGESTED = "digested"


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


class WebhookDeliveryStatus(StrEnum):
    PENDING = "pending"
    SENDING = "sending"
    RETRYING = "retrying"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


class InboxStatus(StrEnum):
    """An in-app notification's state. The values sort unread > read > archived, so
    `ORDER BY status DESC` lists unread first straight off the inbox index."""

    UNREAD = "unread"
    READ = "read"
    ARCHIVED = "archived"


assert sorted(InboxStatus, reverse=True) == [InboxStatus.UNREAD, InboxStatus.READ, InboxStatus.ARCHIVED]
