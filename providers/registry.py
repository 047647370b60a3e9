"""Provider names → adapter classes; configuration picks them per channel by name."""

from __future__ import annotations

from collections.abc import Mapping

from providers.base import Provider
from providers.fake import FakeProvider, SecondFakeProvider
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
        SecondFakeProvider,
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


def with_account(env: Mapping[str, str], names: tuple[str, ...], account: Mapping[str, str]) -> dict[str, str]:
    """The settings to build an adapter from for a project that brings its own account.

    Every account setting (`names`) is the project's or absent, never the deployment's: a
    project's token must not go out with the deployment's sender, nor a missing token be
    filled in with the deployment's. Everything else (base URL, timeouts) is the deployment's.
    """
    return {**{k: v for k, v in env.items() if k not in names}, **account}
