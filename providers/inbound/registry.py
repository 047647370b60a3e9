"""Provider names → status webhook receivers, as in /v1/inbound/{provider}."""

from __future__ import annotations

from collections.abc import Mapping

from providers.inbound.base import Receiver
from providers.inbound.postmark import PostmarkReceiver
from providers.inbound.resend import ResendReceiver
from providers.inbound.sendgrid import SendGridReceiver
from providers.inbound.ses import SesReceiver
from providers.inbound.twilio import TwilioReceiver

RECEIVERS: dict[str, type[Receiver]] = {
    cls.name: cls for cls in (ResendReceiver, PostmarkReceiver, SendGridReceiver, TwilioReceiver, SesReceiver)
}


def build(name: str, env: Mapping[str, str]) -> Receiver | None:
    """The receiver for `name` from its settings; None when it has none or they are absent."""
    cls = RECEIVERS.get(name)
    return cls.from_env(env) if cls is not None else None
