"""Provider status webhooks: `POST /v1/inbound/{provider}`, and `/{provider}/{project_id}` for
a project's own account. No API key: each provider's signature (or Basic auth) is the
authentication, checked before anything is read."""

from __future__ import annotations

from flask import request

from app.api.blueprint import Blueprint
from app.api.context import context
from app.api.project import large_body, raise_body_limit
from app.errors import any_body
from app.schemas.core import InboundAnswerSchema
from app.services import inbound
from providers.inbound.base import WebhookRequest

blp = Blueprint(
    "inbound",
    __name__,
    url_prefix="/v1/inbound",
    description="Status webhooks from providers: delivered, bounced, complained, opened, clicked, unsubscribed.",
)
blp.before_request(raise_body_limit)


def webhook_request() -> WebhookRequest:
    """The request as the provider sent it, at the URL it called: TIDINGS_PUBLIC_URL in front
    of the path when set, since a proxy hides the outside address from us."""
    external_url = context().settings.external_url
    url = external_url + request.full_path.rstrip("?") if external_url else request.url
    headers = {name.lower(): value for name, value in request.headers.items()}
    return WebhookRequest(url, headers, request.get_data())


@blp.route("/<provider>", methods=["POST"])
@blp.response(200, InboundAnswerSchema)
@any_body
@large_body
def receive(provider: str):
    """Apply a provider's status events; a replayed event is a no-op. Bad signature 401, stale 400."""
    ctx = context()
    return inbound.receive(ctx.db, ctx.settings, ctx.redis, provider, None, webhook_request())


@blp.route("/<provider>/<project_id>", methods=["POST"])
@blp.response(200, InboundAnswerSchema)
@any_body
@large_body
def receive_for_project(provider: str, project_id: str):
    """The same, for a project that sends through its own account (verified with its settings)."""
    ctx = context()
    return inbound.receive(ctx.db, ctx.settings, ctx.redis, provider, project_id, webhook_request())
