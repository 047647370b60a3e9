"""An SMTP relay for tests: an aiosmtpd handler that keeps and parses what it receives.

The SMTP adapter's own tests refuse chosen recipients or hang up with it; the fault tests
route a stack's email channel to it, to see what reached a real relay.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from email import message_from_bytes, policy
from email.message import EmailMessage
from typing import Any


@dataclass
class Received:
    mail_from: str
    rcpt_tos: list[str]
    message: EmailMessage
    raw: bytes
    connection: int  # which connection (aiosmtpd session) carried it
    tls: bool
    login: Any


@dataclass
class Mailbox:
    """An aiosmtpd handler that parses what it receives and refuses chosen recipients."""

    received: list[Received] = field(default_factory=list)
    refuse: dict[str, str] = field(default_factory=dict)
    hang_up_on: str | None = None

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        if address in self.refuse:
            return self.refuse[address]
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):
        if envelope.rcpt_tos == [self.hang_up_on]:
            return "421 4.7.0 Try again later, closing connection"
        self.received.append(
            Received(
                envelope.mail_from,
                list(envelope.rcpt_tos),
                message_from_bytes(envelope.content, policy=policy.default),
                envelope.content,
                id(session),
                session.ssl is not None,
                session.auth_data,
            )
        )
        return "250 2.0.0 Ok: queued"

    @property
    def connections(self) -> int:
        return len({r.connection for r in self.received})
