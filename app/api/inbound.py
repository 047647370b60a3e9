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
from app.errors import abort, any_body
from app.schemas.core import InboundAnswerSchema
from app.services import inbound
from providers.inbound.base import WebhookRequest

blp = Blueprint(
    "inbound",
    __name__,
    url_prefix="/v1/inbound",
    description="Status webhooks from providers: delivered, bounced, complained, opened, clicked, unsubscribed.",
)

MAX_BODY_BYTES = 1024 * 1024


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
@blp.response(200, InboundAnswerSchema)
@any_body
def receive(provider: str):
    """Apply a provider's status events; a replayed event is a no-op. Bad signature 401, stale 400."""
    ctx = context()
    return inbound.receive(ctx.db, ctx.settings, ctx.redis, provider, None, webhook_request())


@blp.route("/<provider>/<project_id>", methods=["POST"])
@blp.response(200, InboundAnswerSchema)
@any_body
def receive_for_project(provider: str, project_id: str):
    """The same, for a project that sends through its own account (verified with its settings)."""
    ctx = context()
    return inbound.receive(ctx.db, ctx.settings, ctx.redis, provider, project_id, webhook_request())
