"""Provider names → adapter classes; configuration picks one per channel by name."""

from __future__ import annotations

from collections.abc import Mapping

from providers.base import Provider
from providers.fake import FakeProvider
from providers.fcm import FcmProvider
from providers.log import LogProvider
from providers.postmark import PostmarkProvider
from providers.resend import ResendProvider
from providers.sendgrid import SendGridProvider
from providers.ses import SesProvider
from providers.smtp import SmtpProvider
from providers.twilio import TwilioProvider
from providers.webhook import WebhookProvider

PROVIDERS: dict[str, type[Provider]] = {
    cls.name: cls
    for cls in (
        LogProvider,
        FakeProvider,
        SmtpProvider,
        ResendProvider,
        PostmarkProvider,
        SendGridProvider,
        SesProvider,
        TwilioProvider,
        FcmProvider,
        WebhookProvider,
    )
}


def names() -> list[str]:
    return sorted(PROVIDERS)


def build(name: str, env: Mapping[str, str]) -> Provider:
    """Instantiate the adapter `name` from its settings; ValueError when one is missing."""
    return PROVIDERS[name].from_env(env)


def carries_attachments(name: str) -> bool:
    """Whether adapter `name` sends `Outbound.attachments`; adapters opt in with `attachments = True`.

    Asked before accepting a message with files, so that none is ever accepted only to be
    sent without them.
    """
    return getattr(PROVIDERS[name], "attachments", False)
