"""Provider status webhooks: `POST /v1/inbound/{provider}`, and `/{provider}/{project_id}` for
a project's own account. No API key: each provider's signature (or Basic auth) is the
authentication, checked before anything is read.

Anyone may call these routes, so bodies are capped at MAX_BODY_BYTES, not the 16 MiB of
bulk routes: far more than a provider posts (SendGrid batches events up to about 768 KB, an
SNS message carries at most 256 KiB), and refused with 413 before anything is verified or
parsed. A larger Content-Length is refused before a byte is read; a chunked body is read up
to the cap only (Werkzeug stops there, silently), and one that fills it is refused too.
"""

from __future__ import annotations

from typing import NoReturn

from flask import request

from app.api.blueprint import Blueprint
from app.api.context import context
from app.api.contract import PUBLIC, STATUS_WEBHOOKS
from app.errors import abort, any_body
from app.schemas.core import InboundAnswerSchema
from app.services import inbound
from providers.inbound.base import WebhookRequest

blp = Blueprint(
    "inbound",
    __name__,
    access=PUBLIC,
    tag=STATUS_WEBHOOKS,
    url_prefix="/v1/inbound",
    description="Status webhooks from providers: delivered, bounced, complained, opened, clicked, unsubscribed.",
)

MAX_BODY_BYTES = 1024 * 1024

# How the spec shows a status webhook's body: each provider's own, as it signs it.
BODY = {
    "required": True,
    "description": "The provider's own body, as it posts and signs it: JSON (Postmark, SendGrid, Resend), a form "
    "(Twilio) or an SNS message as text/plain (SES).",
    "content": {
        "application/json": {
            "schema": {
                "anyOf": [
                    {"type": "object", "additionalProperties": True},
                    {"type": "array", "items": {"type": "object", "additionalProperties": True}},
                ]
            },
            "example": {
                "RecordType": "Delivery",
                "MessageID": "0100018c-5f2a-7b3e-a1c4-postmark",
                "Recipient": "ada@example.com",
                "DeliveredAt": "2030-01-02T09:30:06Z",
                "Metadata": {"tidings_message_id": "5b1f0e6c-8a43-4c2e-9f7d-2d6a8e1c4b90"},
            },
        },
        "application/x-www-form-urlencoded": {
            "schema": {"type": "object", "additionalProperties": {"type": "string"}},
            "example": {"MessageSid": "SM1f0e6c8a434c2e9f7d2d6a8e1c4b90", "MessageStatus": "delivered"},
        },
        "text/plain": {"schema": {"type": "string"}},
    },
}


@blp.before_request
def refuse_large_bodies() -> None:
    """Werkzeug reads no further than `max_content_length`; a body that says it is larger goes unread."""
    request.max_content_length = MAX_BODY_BYTES
    if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
        too_large()


def too_large() -> NoReturn:
    abort(413, f"A status webhook's body may be {MAX_BODY_BYTES // 1024} KiB at most.")


def body() -> bytes:
    """The raw body. A chunked one has no length to check first: Werkzeug cuts it off at the
    cap without a word, so one that reaches the cap is taken as larger than it."""
    data = request.get_data()
    if request.content_length is None and len(data) >= MAX_BODY_BYTES:
        too_large()
    return data


def webhook_request() -> WebhookRequest:
    """The request as the provider sent it, at the URL it called: TIDINGS_PUBLIC_URL in front
    of the path when set, since a proxy hides the outside address from us."""
    external_url = context().settings.external_url
    url = external_url + request.full_path.rstrip("?") if external_url else request.url
    headers = {name.lower(): value for name, value in request.headers.items()}
    return WebhookRequest(url, headers, body())


@blp.route("/<provider>", methods=["POST"])
@blp.doc(requestBody=BODY)
@blp.response(200, InboundAnswerSchema)
@blp.alt_response(401, description="The provider's signature (or Basic auth) does not verify; nothing was read.")
@blp.alt_response(404, description="No such provider in this deployment.")
@blp.alt_response(413, description="The body is over 1 MiB.")
@any_body
def receive(provider: str):
    """Receive a provider's status webhook.

    Apply a provider's status events (delivered, bounced, complained, opened, clicked, unsubscribed); a replayed
    event is a no-op. No API key: the provider's signature (or Basic auth) authenticates the request, checked
    before anything is read; a bad one is a 401, a stale one a 400.
    """
    ctx = context()
    return inbound.receive(ctx.db, ctx.settings, ctx.redis, provider, None, webhook_request())


@blp.route("/<provider>/<project_id>", methods=["POST"])
@blp.doc(requestBody=BODY)
@blp.response(200, InboundAnswerSchema)
@blp.alt_response(401, description="The provider's signature (or Basic auth) does not verify; nothing was read.")
@blp.alt_response(404, description="No such provider, or the project has no account with it.")
@blp.alt_response(413, description="The body is over 1 MiB.")
@any_body
def receive_for_project(provider: str, project_id: str):
    """Receive a status webhook for a project's own account.

    The same, for a project that sends through its own account: verified with that account's settings.
    """
    ctx = context()
    return inbound.receive(ctx.db, ctx.settings, ctx.redis, provider, project_id, webhook_request())
