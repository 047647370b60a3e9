"""SMTP (email): any relay, with STARTTLS or implicit TLS and AUTH; one connection per batch.

A batch shares one connection: connecting, the TLS handshake and AUTH cost more than a
message. Replies are mapped per message: a refused recipient fails only its message (and a
"no such mailbox" one is suppressed), and so does one the email library cannot build; a
refused sender or a failed login is the account's problem. A dropped connection is
reopened for the rest of the batch.
"""

from __future__ import annotations

import email.errors
import email.policy
import smtplib
import ssl
from collections.abc import Mapping, Sequence
from email.message import EmailMessage
from email.utils import formatdate, parseaddr
from typing import ClassVar, Literal, Self

from providers.base import (
    Attachment,
    ConfigurationError,
    Outbound,
    Outcome,
    PermanentError,
    ProviderError,
    SendResult,
    SuppressRecipient,
    TransientError,
    Unreachable,
    ambiguous,
    number,
    one_by_one,
    required,
    send_groups,
)
from providers.bounded import storable

SECURITY = {"starttls": 587, "ssl": 465, "none": 25}  # mode → its usual port
AUTH_CODES = {530, 534, 535, 538}  # authentication required, too weak, failed, encryption needed
# Enhanced status codes (RFC 3463) that say the address does not exist: a hard bounce.
NO_SUCH_ADDRESS = ("5.1.1", "5.1.2", "5.1.10")

Stage = Literal["sender", "recipient", "data"]


def reply_error(code: int, reply: bytes | str, stage: Stage) -> ProviderError:
    """The error an SMTP reply means at the stage of the transaction where it came."""
    text = storable(reply.decode(errors="replace") if isinstance(reply, bytes) else str(reply))
    detail = f"SMTP {code} at {stage}: {text}"
    if code in AUTH_CODES or (stage == "sender" and code >= 500):
        return ConfigurationError(detail)
    if code < 500:
        return TransientError(detail)
    if stage == "recipient" and text.split(" ", 1)[0] in NO_SUCH_ADDRESS:
        return SuppressRecipient(detail)
    return PermanentError(detail)


def opening_error(host: str, error: smtplib.SMTPException | OSError) -> ProviderError:
    """What a failure while securing the connection or logging in means."""
    if isinstance(error, smtplib.SMTPAuthenticationError):
        return ConfigurationError(f"SMTP login refused: {error.smtp_code} {error.smtp_error!r}")
    if isinstance(error, smtplib.SMTPResponseException) and error.smtp_code < 500:
        return TransientError(f"{host} answered {error.smtp_code} {error.smtp_error!r} while opening")
    if isinstance(error, smtplib.SMTPServerDisconnected) or (
        isinstance(error, OSError) and not isinstance(error, ssl.SSLError)
    ):
        return Unreachable(f"{host} dropped the connection while opening it: {error}")
    # No STARTTLS or AUTH offered, a certificate we cannot trust, a 5xx: fix the settings.
    return ConfigurationError(f"securing or logging in to {host} failed: {error}")


class SmtpProvider:
    name: ClassVar[str] = "smtp"
    channels: ClassVar[frozenset[str]] = frozenset({"email"})
    # How many messages one connection carries; relays often cap messages per connection.
    max_batch: ClassVar[int] = 50
    idempotent: bool = False  # SMTP has no idempotency key
    attachments: ClassVar[bool] = True
    # A project's own relay; the CA file stays the deployment's (a path on the worker).
    account_settings: ClassVar[tuple[str, ...]] = (
        "SMTP_HOST",
        "SMTP_PORT",
        "SMTP_SECURITY",
        "SMTP_USERNAME",
        "SMTP_PASSWORD",
        "EMAIL_FROM",
    )

    def __init__(
        self,
        host: str,
        port: int,
        security: str,
        credentials: tuple[str, str] | None,
        sender: str,
        timeout: float,
        ca_file: str | None = None,
    ):
        self.host, self.port, self.security = host, port, security
        self.credentials = credentials
        self.sender = sender
        self.timeout = timeout
        # SMTP_CA_FILE trusts a private CA (an internal relay, tests) instead of the system's.
        self.tls = ssl.create_default_context(cafile=ca_file)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Self:
        security = env.get("SMTP_SECURITY", "").strip().lower() or "starttls"
        if security not in SECURITY:
            raise ValueError(f"SMTP_SECURITY must be one of {', '.join(SECURITY)}; got {security!r}")
        raw_port = env.get("SMTP_PORT", "").strip() or str(SECURITY[security])
        if not raw_port.isdigit():
            raise ValueError(f"SMTP_PORT must be a port number; got {raw_port!r}")
        username = env.get("SMTP_USERNAME", "").strip()
        credentials = (username, required(env, "SMTP_PASSWORD")) if username else None
        return cls(
            required(env, "SMTP_HOST"),
            int(raw_port),
            security,
            credentials,
            required(env, "EMAIL_FROM"),
            number(env, "SMTP_TIMEOUT", 30.0),
            env.get("SMTP_CA_FILE", "").strip() or None,
        )

    def send(self, batch: Sequence[Outbound]) -> list[SendResult]:
        connection = Connection(self)
        try:
            return send_groups(one_by_one(batch), connection.send)
        finally:
            connection.close()

    def connect(self) -> smtplib.SMTP:
        """Open, secure and log in; raise what a failure means for every message."""
        try:
            smtp: smtplib.SMTP
            if self.security == "ssl":
                smtp = smtplib.SMTP_SSL(self.host, self.port, timeout=self.timeout, context=self.tls)
            else:
                smtp = smtplib.SMTP(self.host, self.port, timeout=self.timeout)
        except ssl.SSLError as error:
            raise ConfigurationError(f"TLS with {self.host}:{self.port} failed: {error}") from error
        except (OSError, smtplib.SMTPException) as error:
            raise Unreachable(f"could not connect to {self.host}:{self.port}: {error}") from error
        try:
            if self.security == "starttls":
                smtp.starttls(context=self.tls)
            if self.credentials:
                smtp.login(*self.credentials)
        except (smtplib.SMTPException, OSError) as error:
            smtp.close()
            raise opening_error(self.host, error) from error
        return smtp

    def mime(self, message: Outbound) -> EmailMessage:
        """A MIME message: text and html as alternatives, UTF-8 bodies, RFC 2047 headers, and
        attachments in a multipart/mixed around them."""
        sender = message.from_address or self.sender
        mime = EmailMessage(policy=email.policy.SMTP)
        mime["From"] = sender
        mime["To"] = message.to
        mime["Subject"] = message.subject or ""
        mime["Date"] = formatdate(usegmt=True)
        # Our id in the Message-ID lets bounces and replies name the message they concern,
        # unless the message brought its own (mail relayed from SMTP): then that one stands.
        mime["Message-ID"] = f"<{message.message_id}@{parseaddr(sender)[1].rpartition('@')[2] or 'tidings'}>"
        if message.reply_to:
            mime["Reply-To"] = message.reply_to
        if message.cc:
            mime["Cc"] = message.cc
        for name, value in message.headers.items():
            del mime[name]
            mime[name] = value
        if message.text is not None and message.html is not None:
            mime.set_content(message.text)
            mime.add_alternative(message.html, subtype="html")
        elif message.html is not None:
            mime.set_content(message.html, subtype="html")
        else:
            mime.set_content(message.text or "")
        if message.attachments:
            mime.make_mixed()
            for attachment in message.attachments:
                mime.attach(attachment_part(attachment))
        return mime


BASE64_LINE = 76  # RFC 2045: encoded lines of at most 76 characters


def attachment_part(attachment: Attachment) -> EmailMessage:
    """A MIME part whose body is the stored base64, only cut into lines: never decoded."""
    part = EmailMessage(policy=email.policy.SMTP)
    part["Content-Type"] = attachment.content_type
    part.add_header("Content-Disposition", "attachment", filename=attachment.filename)
    part["Content-Transfer-Encoding"] = "base64"
    content = attachment.content
    part.set_payload("\r\n".join(content[i : i + BASE64_LINE] for i in range(0, len(content), BASE64_LINE)))
    return part


class Connection:
    """One batch's connection, opened on first use and reopened after a drop."""

    def __init__(self, provider: SmtpProvider):
        self.provider = provider
        self.smtp: smtplib.SMTP | None = None

    def send(self, group: Sequence[Outbound]) -> list[SendResult]:
        message = group[0]
        mime = self.build(message)
        if self.smtp is None or self.smtp.sock is None:  # smtplib closes it itself after a 421
            self.smtp = self.provider.connect()
        envelope_from = parseaddr(message.from_address or self.provider.sender)[1]
        try:
            self.smtp.send_message(mime, from_addr=envelope_from, to_addrs=[message.to])
        except smtplib.SMTPRecipientsRefused as error:
            code, reply = next(iter(error.recipients.values()))
            raise reply_error(code, reply, "recipient") from error
        except smtplib.SMTPSenderRefused as error:
            raise reply_error(error.smtp_code, error.smtp_error, "sender") from error
        except smtplib.SMTPDataError as error:
            raise reply_error(error.smtp_code, error.smtp_error, "data") from error
        except smtplib.SMTPNotSupportedError as error:
            # An internationalised address the relay cannot carry (no SMTPUTF8).
            raise PermanentError(f"the relay cannot send this message: {error}") from error
        except (smtplib.SMTPServerDisconnected, OSError) as error:
            self.smtp.close()
            self.smtp = None
            raise ambiguous(f"smtp://{self.provider.host}:{self.provider.port}", str(error)) from error
        return [SendResult(message.message_id, Outcome.SENT, provider_message_id=mime["Message-ID"])]

    def build(self, message: Outbound) -> EmailMessage:
        """The message's MIME, before anything of it reaches the relay.

        What the email library refuses (a header value with CR or LF, say) fails this
        message alone: the connection stays open for the rest of the batch.
        """
        try:
            return self.provider.mime(message)
        except (ValueError, email.errors.MessageError) as error:
            raise PermanentError(f"the message cannot be built: {error}") from error

    def close(self) -> None:
        if self.smtp is None:
            return
        try:
            self.smtp.quit()
        except (smtplib.SMTPException, OSError):
            self.smtp.close()
