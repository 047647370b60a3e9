"""Marshmallow schemas: what the API accepts and what it answers, per ../shared/API.md."""

from __future__ import annotations

import ipaddress
from typing import Any

from marshmallow import Schema, ValidationError, fields, pre_load, validate, validates_schema

from app.delivery.retention import DEFAULT_RETENTION_DAYS
from app.enums import REQUEUABLE_STATUSES, Channel, KeyKind, MessageStatus, Priority
from app.schemas.email import (
    MAX_COPIES,
    MAX_REPLY_TO,
    SenderSchema,
    address_list,
    attachments_field,
    headers_field,
    verified_senders_field,
)
from app.schemas.nesting import Data
from app.schemas.text import HeaderEmail, HeaderText, webhook_url
from app.schemas.times import UtcDateTime, time_zone

E164 = r"^\+[1-9][0-9]{6,14}$"
PROJECT_ID = r"^[a-z0-9-]{1,64}$"
CATEGORY = r"^[a-z0-9_.-]{1,64}$"
LOCALE = r"^[A-Za-z]{2,3}(-[A-Za-z0-9]{2,8})*$"
CLOCK = r"^([01][0-9]|2[0-3]):[0-5][0-9]$"
MAX_TEXT = 256 * 1024

CHANNEL_NAMES = [c.value for c in Channel]


def category_field(**kwargs: Any) -> fields.String:
    return fields.String(validate=validate.Regexp(CATEGORY, error="Use 1 to 64 of a-z, 0-9, _ . and -."), **kwargs)


def locale_field(**kwargs: Any) -> fields.String:
    # 35 characters: what BCP 47 asks implementations to support, and the columns hold.
    shape = [validate.Regexp(LOCALE, error="Not a locale like en or pt-BR."), validate.Length(max=35)]
    return fields.String(validate=shape, **kwargs)


def channel_switches(**kwargs: Any) -> fields.Dict:
    """{"sms": false}: a channel name → on or off."""
    return fields.Dict(keys=fields.String(validate=validate.OneOf(CHANNEL_NAMES)), values=fields.Boolean(), **kwargs)


def category_switches(**kwargs: Any) -> fields.Dict:
    """{"marketing": {"email": false}}: a category → channel switches."""
    return fields.Dict(keys=category_field(), values=channel_switches(), **kwargs)


class QuietHoursSchema(Schema):
    """A daily window in the subscriber's time zone, e.g. 22:00 to 08:00 (it may wrap midnight)."""

    start = fields.String(required=True, validate=validate.Regexp(CLOCK, error="Use HH:MM, 00:00 to 23:59."))
    end = fields.String(required=True, validate=validate.Regexp(CLOCK, error="Use HH:MM, 00:00 to 23:59."))

    @validates_schema
    def not_empty(self, data: dict[str, Any], **_: Any) -> None:
        if data.get("start") == data.get("end"):
            raise ValidationError("start and end must differ.", "end")


class TrackingSettingsSchema(Schema):
    """Open and click tracking of email; templates may switch either for their messages."""

    opens = fields.Boolean(load_default=False, dump_default=False)
    clicks = fields.Boolean(load_default=False, dump_default=False)
    transactional = fields.Boolean(
        load_default=True,
        dump_default=True,
        metadata={"description": "false: transactional email is untracked unless its template says otherwise."},
    )


def network(value: str) -> None:
    """A CIDR as ipaddress reads it: host bits set are refused, they are a typo more often than not."""
    try:
        ipaddress.ip_network(value)
    except ValueError as error:
        raise ValidationError(str(error)) from None


class ProjectSettingsSchema(Schema):
    """Audience rules, retention and the networks its webhooks may also reach.

    Only the admin routes write (and read) a project's settings, so a tenant cannot open
    the SSRF guard for itself.
    """

    required_categories = fields.List(
        category_field(),
        load_default=list,
        dump_default=list,
        metadata={"description": "Categories no preference can turn off, e.g. security."},
    )
    category_defaults = category_switches(
        load_default=dict,
        dump_default=dict,
        metadata={"description": "Category x channel switches for subscribers who set none."},
    )
    quiet_hours = fields.Nested(
        QuietHoursSchema,
        allow_none=True,
        load_default=None,
        dump_default=None,
        metadata={"description": "Default quiet hours for subscribers who set none."},
    )
    category_names = fields.Dict(
        keys=category_field(),
        values=fields.Dict(
            keys=locale_field(), values=fields.String(validate=validate.Length(1, 100)), validate=validate.Length(1, 50)
        ),
        load_default=dict,
        dump_default=dict,
        validate=validate.Length(max=200),
        metadata={
            "description": "What subscribers' preference pages call each category, per locale: in the "
            "subscriber's locale, else its language, else English, else the category as it is. A category "
            "named here is on the page even when no default or required list names it.",
            "example": {"marketing": {"en": "News and offers", "de": "Neuigkeiten und Angebote"}},
        },
    )
    tracking = fields.Nested(TrackingSettingsSchema, load_default=dict, dump_default=dict)
    retention_days = fields.Integer(
        load_default=DEFAULT_RETENTION_DAYS,
        dump_default=DEFAULT_RETENTION_DAYS,
        validate=validate.Range(1, 3650),
        metadata={"description": "Days a finished message is kept, with its content and events."},
    )
    webhook_allowed_networks = fields.List(
        fields.String(validate=network),
        load_default=list,
        dump_default=list,
        validate=validate.Length(max=100),
        metadata={
            "description": "CIDRs this project's webhooks (the channel and outbound webhooks) may reach besides "
            "WEBHOOK_ALLOWED_NETWORKS (plain http and private addresses), e.g. a receiver on its internal network."
        },
    )
    verified_senders = verified_senders_field()
    daily_quota = fields.Dict(
        keys=fields.String(validate=validate.OneOf(CHANNEL_NAMES)),
        values=fields.Integer(allow_none=True, validate=validate.Range(min=0)),
        load_default=dict,
        dump_default=dict,
        metadata={
            "description": "Messages per channel the project may have accepted per day (test keys' aside); "
            "null: no quota. A channel left out has the deployment's (EMAIL_DAILY_QUOTA, …).",
            "example": {"email": 250000, "sms": 10000},
        },
    )
    daily_storage_bytes = fields.Dict(
        keys=fields.String(validate=validate.OneOf(["live", "test"])),
        values=fields.Integer(allow_none=True, validate=validate.Range(min=0)),
        load_default=dict,
        dump_default=dict,
        metadata={
            "description": "Bytes of words and files the sends of the project's live keys, and of its test keys, "
            "may store per day (words and data once per message, files once per send); null: no bound. A kind "
            "left out has the deployment's (DAILY_STORAGE_BYTES, TEST_DAILY_STORAGE_BYTES).",
            "example": {"live": 10737418240, "test": 20971520},
        },
    )
    quota_timezone = fields.String(
        load_default="UTC",
        dump_default="UTC",
        validate=time_zone,
        metadata={
            "description": "Where the daily quota's day ends: it resets at midnight there.",
            "example": "Asia/Tokyo",
        },
    )
    messages_per_min = fields.Integer(
        allow_none=True,
        validate=validate.Range(min=1),
        metadata={
            "description": "Messages a minute the project's sends may carry (a batch counts each recipient); "
            "null: no limit. Left out: the deployment's (RATE_LIMIT_MESSAGES_PER_MINUTE)."
        },
    )
    transactional_per_min = fields.Integer(
        allow_none=True,
        validate=validate.Range(min=1),
        metadata={
            "description": "Transactional messages a minute the project's sends may carry; those above it are "
            "accepted and served as bulk, each with a `demoted` event. null: no limit. Left out: the "
            "deployment's (TRANSACTIONAL_PER_MINUTE)."
        },
    )


# Which kind of recipient each channel can reach; a subscriber id fits every channel.
ADDRESS_FOR_CHANNEL = {
    Channel.EMAIL: "email",
    Channel.SMS: "phone",
    Channel.PUSH: "device_token",
    Channel.WEBHOOK: "url",
}


class ProjectCreateSchema(Schema):
    id = fields.String(validate=validate.Regexp(PROJECT_ID, error="Use 1 to 64 of a-z, 0-9 and -."))
    name = fields.String(required=True, validate=validate.Length(1, 200))
    channels = fields.List(
        fields.String(validate=validate.OneOf([c.value for c in Channel])),
        validate=validate.Length(min=1),
        load_default=lambda: [c.value for c in Channel],
    )
    rate_limit_per_min = fields.Integer(allow_none=True, validate=validate.Range(min=1))
    settings = fields.Nested(ProjectSettingsSchema, metadata={"description": "Replaced whole when given."})


class ProjectUpdateSchema(ProjectCreateSchema):
    class Meta:
        exclude = ("id",)

    name = fields.String(validate=validate.Length(1, 200))
    channels = fields.List(
        fields.String(validate=validate.OneOf([c.value for c in Channel])), validate=validate.Length(min=1)
    )


class ProjectSchema(Schema):
    id = fields.String()
    name = fields.String()
    channels = fields.List(fields.String())
    rate_limit_per_min = fields.Integer(allow_none=True)
    settings = fields.Nested(ProjectSettingsSchema)
    created_at = fields.DateTime()


class ProjectCreatedSchema(ProjectSchema):
    webhook_signing_secret = fields.String(
        metadata={"description": "whsec_…: signs the project's webhook-channel messages; in this answer only."}
    )


class SigningSecretSchema(Schema):
    webhook_signing_secret = fields.String(metadata={"description": "whsec_…: the new secret, in this answer only."})
    previous_secret_expires_at = fields.DateTime(
        metadata={"description": "Until when the previous secret still signs beside the new one."}
    )


class KeyCreateSchema(Schema):
    name = fields.String(required=True, validate=validate.Length(1, 200))
    kind = fields.Enum(KeyKind, by_value=True, load_default=KeyKind.LIVE)


class KeySchema(Schema):
    id = fields.String()
    name = fields.String()
    kind = fields.String()
    prefix = fields.String()
    key = fields.String(metadata={"description": "The key itself: in the answer to its creation only."})
    created_at = fields.DateTime()
    revoked_at = fields.DateTime(allow_none=True)


ADDRESS_KINDS = frozenset({"subscriber_id", "email", "phone", "device_token", "url"})
EXACTLY_ONE_ADDRESS = "Give exactly one of subscriber_id, email, phone, device_token, url."


def address_misfit(channel: Channel, kind: str) -> str | None:
    """Why a `channel` message cannot go to an address of `kind`; None when it can."""
    expected = ADDRESS_FOR_CHANNEL.get(channel)
    if kind in ("subscriber_id", expected):
        return None
    fits = f"a subscriber_id or {expected}" if expected else "a subscriber_id (its inbox)"
    return f"A {channel} message goes to {fits}, not {kind}."


class RecipientSchema(Schema):
    """Exactly one way to reach the recipient."""

    subscriber_id = fields.String(validate=validate.Length(1, 255))
    email = HeaderEmail(validate=validate.Length(max=320))
    phone = HeaderText(validate=validate.Regexp(E164, error="Not a valid E.164 phone number."))
    device_token = HeaderText(validate=validate.Length(1, 4096))
    url = webhook_url()

    @pre_load
    def strip_spaces(self, data: Any, **_: Any) -> Any:
        """Surrounding spaces are a copy-paste accident, never part of an address."""
        if isinstance(data, dict):
            return {k: v.strip() if isinstance(v, str) else v for k, v in data.items()}
        return data

    @validates_schema
    def exactly_one(self, data: dict[str, Any], **_: Any) -> None:
        if len(ADDRESS_KINDS & data.keys()) != 1:
            raise ValidationError(EXACTLY_ONE_ADDRESS, "_schema")


class ContentSchema(Schema):
    subject = HeaderText(validate=validate.Length(1, 998))
    text = fields.String(validate=validate.Length(1, MAX_TEXT))
    html = fields.String(validate=validate.Length(1, MAX_TEXT))
    title = fields.String(validate=validate.Length(1, 256))


EMAIL_ONLY = ("attachments", "sender", "reply_to", "cc", "bcc", "headers")


class MessageFieldsSchema(Schema):
    """What a single send and a batch share: the channel, the content and how it is routed."""

    channel = fields.Enum(Channel, by_value=True, required=True)
    template = fields.String(validate=validate.Length(1, 128))
    data = Data()
    locale = locale_field()
    content = fields.Nested(ContentSchema)
    category = category_field()
    priority = fields.Enum(Priority, by_value=True, load_default=Priority.TRANSACTIONAL)
    scheduled_at = UtcDateTime(allow_none=True)
    metadata = Data()
    bypass_quiet_hours = fields.Boolean(
        load_default=False, metadata={"description": "Send at once even inside the recipient's quiet hours."}
    )
    attachments = attachments_field()
    sender = fields.Nested(
        SenderSchema,
        data_key="from",
        metadata={
            "description": "Email only. The sender, one of the project's verified senders; default: the "
            "template's, else the deployment's EMAIL_FROM."
        },
    )
    reply_to = address_list(MAX_REPLY_TO, "Email only. Where replies go; default: the template's.", "help@acme.example")
    cc = address_list(
        MAX_COPIES,
        "Email only. Each address gets a copy of its own (suppressions apply to each), and every copy shows "
        "them as Cc. cc and bcc: at most 49 together.",
        "accounts@customer.example",
    )
    bcc = address_list(
        MAX_COPIES, "Email only. Each address gets a copy of its own, shown to nobody.", "archive@acme.example"
    )
    headers = headers_field()

    @validates_schema
    def email_extras_fit(self, data: dict[str, Any], **_: Any) -> None:
        """Files, sender, copies and headers are email's; cc and bcc name at most MAX_COPIES together."""
        if data.get("channel") not in (None, Channel.EMAIL):
            given = [self.fields[name].data_key or name for name in EMAIL_ONLY if name in data]
            if given:
                raise ValidationError({name: ["Only email takes this."] for name in given})
        if len(data.get("cc", ())) + len(data.get("bcc", ())) > MAX_COPIES:
            raise ValidationError(f"cc and bcc may name at most {MAX_COPIES} addresses together.", "bcc")

    @validates_schema
    def content_fits(self, data: dict[str, Any], **_: Any) -> None:
        errors: dict[str, list[str]] = {}
        if ("template" in data) == ("content" in data):
            errors["content"] = ["Give either template or content, not both and not neither."]
        channel = data.get("channel")
        content = data.get("content") or {}
        if channel is Channel.EMAIL and "content" in data:
            if "subject" not in content:
                errors.setdefault("content", []).append("An email needs a subject.")
            if not ({"text", "html"} & content.keys()):
                errors.setdefault("content", []).append("An email needs text or html.")
        elif "content" in data and not ({"text", "title"} & content.keys()):
            errors.setdefault("content", []).append(f"A {channel} message needs text or title.")
        if errors:
            raise ValidationError(errors)


class SendSchema(MessageFieldsSchema):
    to = fields.Nested(RecipientSchema, required=True)

    @validates_schema
    def recipient_fits(self, data: dict[str, Any], **_: Any) -> None:
        kind = next(iter(data.get("to") or {}), None)
        misfit = None if kind is None or "channel" not in data else address_misfit(data["channel"], kind)
        if misfit:
            raise ValidationError([misfit], "to")


class CopySchema(Schema):
    id = fields.String()
    email = fields.String()
    kind = fields.String(metadata={"description": "cc or bcc"})


class AcceptedSchema(Schema):
    id = fields.String()
    status = fields.String()
    created_at = fields.DateTime()
    copies = fields.List(
        fields.Nested(CopySchema),
        metadata={"description": "With cc or bcc only: the message each of their addresses gets, by address."},
    )


class MessageQuerySchema(Schema):
    status = fields.Enum(MessageStatus, by_value=True)
    channel = fields.Enum(Channel, by_value=True)
    batch_id = fields.UUID()
    subscriber_id = fields.String(validate=validate.Length(1, 255))
    to = fields.String(
        validate=validate.Length(1, 4096),
        metadata={"description": "The recipient's address as sent to (email, phone, token or URL), exactly."},
    )
    template = fields.String(validate=validate.Length(1, 255), metadata={"description": "The template's key."})
    since = UtcDateTime()
    until = UtcDateTime()
    limit = fields.Integer(load_default=50, validate=validate.Range(1, 500))
    cursor = fields.String(validate=validate.Length(1, 200))


class EventSchema(Schema):
    """One step of a message's timeline."""

    type = fields.String(
        metadata={
            "description": "A step the message passed through, or `device`: one entry per device of a push "
            "message to a subscriber, where it stands now (timeline only: never in the delivery log or webhooks).",
            "example": "device",
        }
    )
    at = fields.DateTime()
    data = fields.Dict(
        metadata={
            "description": "For `device`: `token`, `status` (pending, retrying, sent, failed, dead, "
            "suppressed), `attempts`, and what the provider last said: `provider_message_id`, `error`, "
            "`follow_up` (`token_removed`). A push message's `retrying`, `failed` and `dead` add "
            "`devices`: how many of its devices stand where.",
            "example": {"token": "fcm-token-of-the-tablet", "status": "sent", "attempts": 1},
        }
    )


class LinkClicksSchema(Schema):
    url = fields.String()
    clicks = fields.Integer()


class EngagementSchema(Schema):
    """Email tracking: every open and click counted, the first of each also an event."""

    opens = fields.Integer()
    clicks = fields.Integer()
    links = fields.List(fields.Nested(LinkClicksSchema))


class MessageSchema(Schema):
    id = fields.String()
    channel = fields.String()
    to = fields.Dict(metadata={"description": "A push message to a subscriber names its first device here."})
    subscriber_id = fields.String(allow_none=True)
    status = fields.String(
        metadata={
            "description": "A push message to a subscriber sums up its devices: `retrying` while any device "
            "waits for a retry (even when another took it), then `sent` if any device took it, `failed` if "
            "every device was refused, `dead` if none took it when the attempts ran out."
        }
    )
    priority = fields.String()
    category = fields.String(allow_none=True)
    template = fields.String(allow_none=True)
    template_version = fields.Integer(allow_none=True)
    batch_id = fields.String(allow_none=True)
    attempts = fields.Integer()
    provider = fields.String(allow_none=True)
    provider_message_id = fields.String(allow_none=True)
    error = fields.String(allow_none=True)
    scheduled_at = fields.DateTime(allow_none=True)
    created_at = fields.DateTime()
    updated_at = fields.DateTime()
    sent_at = fields.DateTime(allow_none=True)
    metadata = fields.Dict()
    events = fields.List(fields.Nested(EventSchema))
    engagement = fields.Nested(EngagementSchema)


class MessageItemSchema(MessageSchema):
    """A message in a list: without its timeline and engagement, which cost queries per message."""

    class Meta:
        exclude = ("events", "engagement")


class MessagePageSchema(Schema):
    items = fields.List(fields.Nested(MessageItemSchema))
    next_cursor = fields.String(allow_none=True)


class RequeueSchema(Schema):
    """Which messages to send again: dead letters (by default) or `unknown` ones, by ids or
    by any mix of the filters."""

    status = fields.String(
        load_default="dead",
        validate=validate.OneOf([status.value for status in REQUEUABLE_STATUSES]),
        metadata={"description": "`dead`, or `unknown`: those may have been delivered and may arrive twice."},
    )
    ids = fields.List(fields.UUID(), validate=validate.Length(1, 10_000))
    project = fields.String(validate=validate.Regexp(PROJECT_ID))
    channel = fields.Enum(Channel, by_value=True)
    provider = fields.String(validate=validate.Length(1, 32))
    since = UtcDateTime()
    until = UtcDateTime()
    requested_by = fields.String(load_default="admin", validate=validate.Length(1, 200))

    @validates_schema
    def narrowed(self, data: dict[str, Any], **_: Any) -> None:
        if not ({"ids", "project", "channel", "provider", "since", "until"} & data.keys()):
            raise ValidationError(
                "Name the messages: ids, or at least one of project, channel, provider, since, until.",
                "_schema",
            )


class RequeuedSchema(Schema):
    requeued = fields.Integer()
    warning = fields.String(metadata={"description": "Set when the messages requeued may be delivered twice."})


class PauseSchema(Schema):
    seconds = fields.Integer(allow_none=True, load_default=None, validate=validate.Range(1, 7 * 24 * 3600))
    reason = fields.String(load_default="paused by an operator", validate=validate.Length(1, 200))


class ProviderAccountInputSchema(Schema):
    settings = fields.Dict(
        keys=fields.String(validate=validate.Length(1, 64)),
        values=fields.String(validate=validate.Length(1, 16 * 1024)),
        required=True,
        validate=validate.Length(min=1, error="Give at least one setting."),
        metadata={
            "description": "The provider's settings under their environment variable names, "
            'e.g. {"POSTMARK_SERVER_TOKEN": "…", "EMAIL_FROM": "…"}. Replaced whole; never answered.'
        },
    )


class ProviderAccountSchema(Schema):
    provider = fields.String()
    keys = fields.List(fields.String(), metadata={"description": "Which settings are set (never their values)."})
    readable = fields.Boolean(
        metadata={"description": "false: sealed under another TIDINGS_SECRET_KEY; set them again."}
    )
    created_at = fields.DateTime()
    updated_at = fields.DateTime()
    paused = fields.Boolean(metadata={"description": "Paused for this project's account alone."})
    paused_reason = fields.String(allow_none=True)
    paused_seconds_left = fields.Float(allow_none=True)


class InboundAnswerSchema(Schema):
    received = fields.Integer(metadata={"description": "Events in the request."})
    applied = fields.Integer(metadata={"description": "Events recorded on their message."})
    duplicates = fields.Integer(metadata={"description": "Events received before: no-ops."})
    unmatched = fields.Integer(metadata={"description": "Events naming no message this provider sent for us."})


class ProviderStateSchema(Schema):
    name = fields.String()
    channels = fields.List(fields.String(), metadata={"description": "Channels whose failover order lists it."})
    primary_for = fields.List(fields.String(), metadata={"description": "Channels it is the first choice of."})
    rate_per_sec = fields.Float(allow_none=True)
    paused = fields.Boolean()
    paused_reason = fields.String(allow_none=True)
    paused_seconds_left = fields.Float(allow_none=True, metadata={"description": "null: until resumed"})
    breaker = fields.String(
        metadata={
            "description": "closed: in use; open: skipped for the next of the channel; half_open: one probe may go"
        }
    )
    breaker_failures = fields.Integer(metadata={"description": "Batches in a row that failed, while closed."})
    breaker_seconds_left = fields.Float(allow_none=True, metadata={"description": "Until a probe may go, while open."})
    recent_answered = fields.Integer(
        metadata={
            "description": "Messages it answered on their merits (sent or refused) in the last BREAKER_WINDOW_SECONDS."
        }
    )
    recent_failed = fields.Integer(
        metadata={"description": "Messages that failed transiently in the same window: the breaker's error rate."}
    )


class DigestQuerySchema(Schema):
    since = UtcDateTime(
        metadata={
            "description": "Count messages created from this time, cut to the hour (to the day when older "
            "than two days). Default: 24 hours ago."
        }
    )
    project = fields.String(validate=validate.Regexp(PROJECT_ID, error="Use 1 to 64 of a-z, 0-9 and -."))


class StatusCountSchema(Schema):
    project = fields.String()
    channel = fields.String()
    status = fields.String()
    count = fields.Integer()


class ThroughputSchema(Schema):
    last_minute = fields.Integer(metadata={"description": "Messages providers took in the last 60-70 s."})
    last_hour = fields.Integer(metadata={"description": "Messages providers took in the last hour."})


class QueueDepthSchema(Schema):
    name = fields.String()
    depth = fields.Integer(
        metadata={"description": "Tasks waiting: up to 500 message ids each, or in a bulk lane one chunk's token."}
    )


class LaneSchema(Schema):
    name = fields.String(metadata={"description": "The queue the waiting messages are bound for."})
    status = fields.String()
    count = fields.Integer()
    oldest_age_seconds = fields.Float()


class ProjectCountSchema(Schema):
    project = fields.String()
    count = fields.Integer()


class DeadLettersSchema(Schema):
    total = fields.Integer()
    by_project = fields.List(fields.Nested(ProjectCountSchema))


class QuotaUseSchema(Schema):
    project = fields.String()
    channel = fields.String()
    used = fields.Integer(metadata={"description": "Messages counted against the quota today."})
    limit = fields.Integer(metadata={"description": "The quota, as of the last send."})
    remaining = fields.Integer()
    resets_at = fields.DateTime(metadata={"description": "Midnight in the project's quota_timezone."})


class DigestSchema(Schema):
    generated_at = fields.DateTime()
    since = fields.DateTime()
    project = fields.String(allow_none=True)
    counts = fields.List(fields.Nested(StatusCountSchema))
    totals = fields.Dict(keys=fields.String(), values=fields.Integer())
    throughput = fields.Nested(ThroughputSchema)
    queues = fields.List(fields.Nested(QueueDepthSchema))
    lanes = fields.List(fields.Nested(LaneSchema))
    providers = fields.List(fields.Nested(ProviderStateSchema))
    dead_letters = fields.Nested(DeadLettersSchema, metadata={"description": "Dead letters of all time."})
    quotas = fields.List(
        fields.Nested(QuotaUseSchema),
        metadata={"description": "Daily quota use of each project's channels that sent today."},
    )
