"""Schemas for subscribers, preferences, suppressions and templates, per ../shared/API.md."""

from __future__ import annotations

from typing import Any

from marshmallow import Schema, ValidationError, fields, pre_load, validate, validates

from app.enums import Channel, SuppressionReason
from app.pagination import PageArgsSchema, page_schema
from app.schemas.core import E164, MAX_TEXT, QuietHoursSchema, category_switches, channel_switches, locale_field
from app.schemas.email import MAX_REPLY_TO, SenderSchema, address_list
from app.schemas.nesting import Data
from app.schemas.text import HeaderEmail, HeaderText, webhook_url
from app.schemas.times import UtcDateTime, time_zone

EXTERNAL_ID = validate.Length(1, 255)
TEMPLATE_KEY = validate.Regexp(r"^[A-Za-z0-9_.-]{1,128}$", error="Use 1 to 128 of A-Z, a-z, 0-9, _ . and -.")
MAX_PUSH_TOKENS = 20
TOO_MANY_TOKENS = f"At most {MAX_PUSH_TOKENS} push tokens, one per device."
MAX_IMPORT = 10_000


def strip_strings(data: Any) -> Any:
    """Surrounding spaces are a copy-paste accident, never part of a value."""
    if isinstance(data, dict):
        return {k: v.strip() if isinstance(v, str) else v for k, v in data.items()}
    return data


class SubscriberData(Data):
    """A subscriber's own data: free, but for `webhook_url`, where its webhook messages go,
    which must be what a webhook send's `to.url` may be. Refused here, a bad one can never
    reach a prepare batch."""

    WEBHOOK_URL = webhook_url()

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> dict[str, Any]:
        loaded = super()._deserialize(value, attr, data, **kwargs)
        if "webhook_url" in loaded:
            try:
                self.WEBHOOK_URL.deserialize(loaded["webhook_url"])
            except ValidationError as error:
                raise ValidationError({"webhook_url": error.messages}) from error
        return loaded


class PushTokens(fields.List[str]):
    """A subscriber's devices, each once: a device listed twice would get every push twice."""

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> list[str | None]:
        return list(dict.fromkeys(super()._deserialize(value, attr, data, **kwargs)))


class SubscriberSchema(Schema):
    """A subscriber's profile; PUT and import replace it whole (preferences are kept apart)."""

    email = HeaderEmail(allow_none=True, load_default=None, validate=validate.Length(max=320))
    phone = HeaderText(
        allow_none=True,
        load_default=None,
        validate=validate.Regexp(E164, error="Not a valid E.164 phone number."),
    )
    push_tokens = PushTokens(
        HeaderText(validate=validate.Length(1, 4096)),
        load_default=list,
        # Each device is a provider call per push message: the bound keeps one message's work small.
        validate=validate.Length(max=MAX_PUSH_TOKENS, error=TOO_MANY_TOKENS),
        metadata={
            "description": f"One per device, at most {MAX_PUSH_TOKENS}: a push message to the subscriber goes "
            "to each. A token given twice is kept once.",
            "example": ["fcm-token-of-the-phone", "fcm-token-of-the-tablet"],
        },
    )
    locale = locale_field(allow_none=True, load_default=None)
    timezone = fields.String(
        allow_none=True, load_default=None, validate=time_zone, metadata={"example": "Europe/Berlin"}
    )
    data = SubscriberData(load_default=dict)

    @pre_load
    def strip(self, data: Any, **_: Any) -> Any:
        return strip_strings(data)


class SubscriberImportRowSchema(SubscriberSchema):
    error_messages = {"type": "Give an object."}

    external_id = fields.String(required=True, validate=EXTERNAL_ID)


class SubscriberImportSchema(Schema):
    subscribers = fields.List(
        fields.Raw(),
        required=True,
        validate=validate.Length(1, MAX_IMPORT),
        metadata={"description": "≤ 10,000"},
    )


class SubscriberOutSchema(Schema):
    external_id = fields.String()
    email = fields.String(allow_none=True)
    phone = fields.String(allow_none=True)
    push_tokens = fields.List(fields.String())
    locale = fields.String(allow_none=True)
    timezone = fields.String(allow_none=True)
    data = fields.Dict()
    created_at = fields.DateTime()
    updated_at = fields.DateTime()


class SubscriberProfileSchema(SubscriberOutSchema):
    topics = fields.List(
        fields.String(),
        metadata={"description": "Keys of the topics the subscriber follows, in order (at most 1,000)."},
    )


class ImportResultSchema(Schema):
    created = fields.Integer()
    updated = fields.Integer()
    rejected = fields.List(fields.Dict(), metadata={"description": '[{"index": i, "errors": {...}}]'})


class PreferencesSchema(Schema):
    """A subscriber's switches; PUT replaces them whole. Required categories ignore them."""

    channels = channel_switches(load_default=dict, dump_default=dict)
    categories = category_switches(load_default=dict, dump_default=dict)
    quiet_hours = fields.Nested(QuietHoursSchema, allow_none=True, load_default=None, dump_default=None)


# A preference link asked for over the API lasts 30 days unless asked otherwise, from an
# hour (enough to put it in a reply) to a year (as long as the links in a message).
PREFERENCE_LINK_LIFETIME = 30 * 24 * 3600
MIN_PREFERENCE_LINK_LIFETIME = 3600
MAX_PREFERENCE_LINK_LIFETIME = 365 * 24 * 3600


class PreferenceLinkRequestSchema(Schema):
    expires_in = fields.Integer(
        load_default=PREFERENCE_LINK_LIFETIME,
        validate=validate.Range(MIN_PREFERENCE_LINK_LIFETIME, MAX_PREFERENCE_LINK_LIFETIME),
        metadata={
            "description": "Seconds the link works for: 3600 to 31536000, 30 days if absent.",
            "example": 604800,
        },
    )


class PreferenceLinkSchema(Schema):
    url = fields.String(
        metadata={
            "description": "The subscriber's preference page: anyone holding the link can change their "
            "preferences, so send it to the subscriber only.",
            "example": "https://tidings.example/p/eyJwIjoiYWNtZSIsInMiOiJ1c2VyLTQyIiwieCI6MTc5NjE2MDAwMH0.sig",
        }
    )
    expires_at = fields.DateTime()


class SuppressionCreateSchema(Schema):
    channel = fields.Enum(Channel, by_value=True, required=True)
    address = fields.String(required=True, validate=validate.Length(1, 4096))
    reason = fields.Enum(SuppressionReason, by_value=True, load_default=SuppressionReason.MANUAL)
    expires_at = UtcDateTime(allow_none=True, load_default=None)

    @pre_load
    def strip(self, data: Any, **_: Any) -> Any:
        return strip_strings(data)


class SuppressionSchema(Schema):
    channel = fields.String()
    address = fields.String()
    reason = fields.String()
    expires_at = fields.DateTime(allow_none=True)
    created_at = fields.DateTime()
    updated_at = fields.DateTime()


class SuppressionListArgsSchema(PageArgsSchema):
    channel = fields.Enum(Channel, by_value=True)


class TemplateContentSchema(Schema):
    """The words of one locale. Which fields a channel takes: email subject, text, html;
    sms text; push title, body, data (string templates); webhook payload (JSON whose string
    leaves are templates)."""

    locale = locale_field(metadata={"description": "The variant this body sets; the default locale if absent."})
    subject = HeaderText(validate=validate.Length(1, 998))
    text = fields.String(validate=validate.Length(1, MAX_TEXT))
    html = fields.String(validate=validate.Length(1, MAX_TEXT))
    title = fields.String(validate=validate.Length(1, 1024))
    body = fields.String(validate=validate.Length(1, MAX_TEXT))
    data = fields.Dict(keys=fields.String(), values=fields.String())
    payload = fields.Raw(metadata={"description": "A JSON object or array (webhook)."})

    @validates("payload")
    def json_document(self, value: Any, **_: Any) -> None:
        if not isinstance(value, dict | list):
            raise ValidationError("Give a JSON object or array.")


class TemplateTrackingSchema(Schema):
    """Email only: turn the project's open or click tracking on or off for this template (null: as the project)."""

    opens = fields.Boolean(allow_none=True)
    clicks = fields.Boolean(allow_none=True)


class TemplateSenderSchema(Schema):
    """Email only: who its messages are from and where replies go, unless a send says otherwise."""

    sender = fields.Nested(
        SenderSchema,
        data_key="from",
        allow_none=True,
        metadata={
            "description": "One of the project's verified senders; null: none. Kept from the last version if absent."
        },
    )
    reply_to = address_list(
        MAX_REPLY_TO, "null: none. Kept from the last version if absent.", "help@acme.example", allow_none=True
    )


class TemplateCreateSchema(TemplateContentSchema, TemplateSenderSchema):
    key = fields.String(required=True, validate=TEMPLATE_KEY)
    channel = fields.Enum(Channel, by_value=True, required=True)
    tracking = fields.Nested(TemplateTrackingSchema)


class TemplateUpdateSchema(TemplateContentSchema, TemplateSenderSchema):
    channel = fields.Enum(Channel, by_value=True, metadata={"description": "Optional; must not change."})
    tracking = fields.Nested(TemplateTrackingSchema, metadata={"description": "Kept from the last version if absent."})


class TemplateFieldsSchema(Schema):
    """One locale's fields as stored (a template) or rendered (a preview); a channel uses some."""

    locale = fields.String()
    subject = fields.String()
    text = fields.String()
    html = fields.String()
    title = fields.String()
    body = fields.String()
    data = fields.Dict()
    payload = fields.Raw()


class TemplateSchema(TemplateFieldsSchema):
    tracking = fields.Nested(TemplateTrackingSchema, allow_none=True)
    sender = fields.Nested(SenderSchema, data_key="from", allow_none=True)
    reply_to = fields.List(fields.String(), allow_none=True)
    key = fields.String()
    channel = fields.String()
    version = fields.Integer()
    default_locale = fields.String()
    locales = fields.List(fields.String())
    created_at = fields.DateTime()


class TemplateGetArgsSchema(Schema):
    version = fields.Integer(validate=validate.Range(min=1))
    locale = locale_field()


class PreviewSchema(Schema):
    data = Data(load_default=dict)
    locale = locale_field()
    version = fields.Integer(validate=validate.Range(min=1), metadata={"description": "Latest if absent."})


class PreviewOutSchema(TemplateFieldsSchema):
    length = fields.Integer(metadata={"description": "SMS: units in its encoding (septets or UTF-16)."})
    segments = fields.Integer(metadata={"description": "SMS: parts it is sent as."})
    encoding = fields.String(metadata={"description": "SMS: GSM-7 or UCS-2."})


SubscriberPageSchema = page_schema(SubscriberOutSchema, "SubscriberPage")
SuppressionPageSchema = page_schema(SuppressionSchema, "SuppressionPage")
TemplatePageSchema = page_schema(TemplateSchema, "TemplatePage")
