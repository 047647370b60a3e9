"""Provider names → adapter classes; configuration picks them per channel by name."""

from __future__ import annotations

from collections.abc import Mapping

from providers.base import Provider
from providers.fake import FakeProvider, SecondFakeProvider
from providers.fcm import FcmProvider
from providers.inbound.registry import RECEIVERS
from providers.log import LogProvider
from providers.postmark import PostmarkProvider
from providers.resend import ResendProvider
from providers.sendgrid import SendGridProvider
from providers.ses import SesProvider
from providers.simulator import SimulatorProvider
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
        SimulatorProvider,
    )
}


def names() -> list[str]:
    return sorted(PROVIDERS)


def build(name: str, env: Mapping[str, str]) -> Provider:
    """Instantiate the adapter `name` from its settings; ValueError when one is missing."""
    return PROVIDERS[name].from_env(env)


def endpoint_per_message(name: str) -> bool:
    """Whether each message of adapter `name` goes to an endpoint of its own, chosen by its
    tenant (the webhook channel): its failures then say nothing about the provider, and must
    not open the circuit for every project. Adapters opt in with `endpoint_per_message = True`."""
    return getattr(PROVIDERS[name], "endpoint_per_message", False)


def chainable(name: str) -> bool:
    """Whether adapter `name` may be named in a channel's failover chain (`EMAIL_PROVIDER`, …).
    The simulator opts out with `chainable = False`: it answers only its own recipients,
    which prepare sends it whatever the chain."""
    return getattr(PROVIDERS[name], "chainable", True)


def deduplicates_calls(name: str) -> bool:
    """Whether adapter `name`'s provider answers a request made again exactly (the same
    messages in the same call, with the same idempotency key) instead of sending it again,
    as Resend does for 24 hours: an abandoned claim may then be resent as its very calls.
    Adapters opt in with `deduplicates_calls = True`; `idempotent` says more (any call)."""
    return getattr(PROVIDERS[name], "deduplicates_calls", False)


def carries_attachments(name: str) -> bool:
    """Whether adapter `name` sends `Outbound.attachments`; adapters opt in with `attachments = True`.

    Asked before accepting a message with files, so that none is ever accepted only to be
    sent without them.
    """
    return getattr(PROVIDERS[name], "attachments", False)


def account_settings(name: str) -> tuple[str, ...]:
    """What a project may bring for its own account with `name`: the adapter's account
    settings, and those of the receiver of its status webhooks."""
    receiver = RECEIVERS.get(name)
    own = PROVIDERS[name].account_settings
    return own + tuple(s for s in (receiver.settings if receiver else ()) if s not in own)


def with_account(env: Mapping[str, str], name: str, account: Mapping[str, str]) -> dict[str, str]:
    """The settings to build `name`'s adapter or receiver from for a project's own account.

    Every account setting is the project's or absent, never the deployment's: a project's
    token must not go out with the deployment's sender, nor a missing token be filled in
    with the deployment's. Everything else (base URL, timeouts) is the deployment's.
    """
    names = account_settings(name)
    return {**{k: v for k, v in env.items() if k not in names}, **account}
