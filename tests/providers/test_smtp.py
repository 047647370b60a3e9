"""SMTP against a local aiosmtpd server: MIME as received, STARTTLS, implicit TLS, AUTH, replies."""

from __future__ import annotations

import base64
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

from providers.base import Attachment, ConfigurationError, Outcome, Unreachable
from providers.smtp import SmtpProvider
from tests.providers.helpers import email, emails
from tests.smtp_relay import Mailbox


def authenticate(server, session, envelope, mechanism, auth_data) -> AuthResult:
    ok = isinstance(auth_data, LoginPassword) and (auth_data.login, auth_data.password) == (
        b"mailer",
        b"s3cret",
    )
    return AuthResult(success=ok, handled=False, auth_data=auth_data.login if ok else None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def server_tls(ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    return context


@pytest.fixture
def ca_file(ca: trustme.CA, tmp_path: Path) -> str:
    path = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return str(path)


@pytest.fixture
def serve() -> Iterator[Any]:
    """Start an SMTP server with the given options; returns its mailbox and port."""
    controllers: list[Controller] = []

    def start(**options: Any) -> tuple[Mailbox, int]:
        mailbox, port = Mailbox(), free_port()
        controller = Controller(mailbox, hostname="127.0.0.1", port=port, **options)
        controller.start()
        controllers.append(controller)
        return mailbox, port

    yield start
    for controller in controllers:
        controller.stop()


def settings(port: int, **extra: str) -> dict[str, str]:
    return {
        "SMTP_HOST": "127.0.0.1",
        "SMTP_PORT": str(port),
        "SMTP_SECURITY": "none",
        "EMAIL_FROM": "Acme Café <hello@acme.test>",
        "SMTP_TIMEOUT": "5",
        **extra,
    }


def test_a_batch_shares_one_connection_and_arrives_as_proper_mime(serve):
    mailbox, port = serve()
    adapter = SmtpProvider.from_env(settings(port))
    unsubscribe = {
        "List-Unsubscribe": "<https://acme.test/u/1>",
        "List-Unsubscribe-Post": "List-Unsubscribe=One-Click",
    }
    batch = [
        email(
            1,
            subject="Grüße aus Köln 👋",
            text="Hallo, schön dich zu sehen",
            html="<p>Hallo, schön</p>",
            reply_to="help@acme.test",
            headers=unsubscribe,
        ),
        *emails(3)[1:],
    ]
    results = adapter.send(batch)
    assert [(r.message_id, r.outcome) for r in results] == [
        ("m1", Outcome.SENT),
        ("m2", Outcome.SENT),
        ("m3", Outcome.SENT),
    ]
    assert mailbox.connections == 1
    first = mailbox.received[0]
    assert (first.mail_from, first.rcpt_tos) == ("hello@acme.test", ["user1@example.com"])
    message = first.message
    assert message["Subject"] == "Grüße aus Köln 👋"
    assert b"=?utf-8?" in first.raw.split(b"\r\n\r\n")[0].lower()  # RFC 2047 on the wire
    assert message["From"] == "Acme Café <hello@acme.test>"
    assert (message["To"], message["Reply-To"]) == ("user1@example.com", "help@acme.test")
    assert message["List-Unsubscribe"] == "<https://acme.test/u/1>"
    assert message["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    assert message["Message-ID"] == "<m1@acme.test>" == results[0].provider_message_id
    assert message["Date"]
    assert message.get_content_type() == "multipart/alternative"
    text, html = message.iter_parts()
    assert (text.get_content_type(), text.get_content_charset()) == ("text/plain", "utf-8")
    assert text.get_content().strip() == "Hallo, schön dich zu sehen"
    assert (html.get_content_type(), html.get_content().strip()) == ("text/html", "<p>Hallo, schön</p>")


@pytest.mark.parametrize(
    ("text", "html", "content_type"), [("only text", None, "text/plain"), (None, "<b>only</b>", "text/html")]
)
def test_a_single_body_is_not_multipart(serve, text, html, content_type):
    mailbox, port = serve()
    SmtpProvider.from_env(settings(port)).send([email(1, text=text, html=html)])
    message = mailbox.received[0].message
    assert message.get_content_type() == content_type
    assert message.get_content().strip() == (text or html)


def test_starttls_and_auth(serve, server_tls, ca_file):
    mailbox, port = serve(
        tls_context=server_tls, require_starttls=True, authenticator=authenticate, auth_require_tls=True
    )
    adapter = SmtpProvider.from_env(
        settings(
            port,
            SMTP_SECURITY="starttls",
            SMTP_USERNAME="mailer",
            SMTP_PASSWORD="s3cret",
            SMTP_CA_FILE=ca_file,
        )
    )
    assert {r.outcome for r in adapter.send(emails(2))} == {Outcome.SENT}
    assert [(r.tls, r.login) for r in mailbox.received] == [(True, b"mailer"), (True, b"mailer")]
    assert mailbox.connections == 1


def test_implicit_tls(serve, server_tls, ca_file):
    mailbox, port = serve(ssl_context=server_tls)
    adapter = SmtpProvider.from_env(settings(port, SMTP_SECURITY="ssl", SMTP_CA_FILE=ca_file))
    assert adapter.send([email(1)])[0].outcome is Outcome.SENT
    assert len(mailbox.received) == 1


def test_a_wrong_password_is_a_configuration_error(serve, server_tls, ca_file):
    _, port = serve(tls_context=server_tls, require_starttls=True, authenticator=authenticate)
    adapter = SmtpProvider.from_env(
        settings(
            port,
            SMTP_SECURITY="starttls",
            SMTP_USERNAME="mailer",
            SMTP_PASSWORD="wrong",
            SMTP_CA_FILE=ca_file,
        )
    )
    with pytest.raises(ConfigurationError, match="login refused"):
        adapter.send(emails(2))


def test_an_untrusted_certificate_is_a_configuration_error(serve, server_tls):
    _, port = serve(tls_context=server_tls, require_starttls=True)
    adapter = SmtpProvider.from_env(settings(port, SMTP_SECURITY="starttls"))
    with pytest.raises(ConfigurationError, match="CERTIFICATE_VERIFY_FAILED"):
        adapter.send([email(1)])


def test_refused_recipients_fail_alone_on_the_same_connection(serve):
    mailbox, port = serve()
    mailbox.refuse = {
        "user2@example.com": "550 5.1.1 <user2@example.com>: Recipient address rejected: User unknown",
        "user3@example.com": "450 4.2.0 <user3@example.com>: Recipient address rejected: Greylisted",
        "user4@example.com": "550 5.7.1 <user4@example.com>: Relay access denied",
    }
    results = SmtpProvider.from_env(settings(port)).send(emails(5))
    assert [(r.message_id, r.outcome, r.suppress) for r in results] == [
        ("m1", Outcome.SENT, False),
        ("m2", Outcome.PERMANENT, True),  # no such mailbox: a hard bounce
        ("m3", Outcome.TRANSIENT, False),
        ("m4", Outcome.PERMANENT, False),
        ("m5", Outcome.SENT, False),
    ]
    assert "User unknown" in results[1].error
    assert mailbox.connections == 1


def test_a_closed_connection_is_reopened_for_the_rest_of_the_batch(serve):
    mailbox, port = serve()
    mailbox.hang_up_on = "user2@example.com"
    results = SmtpProvider.from_env(settings(port)).send(emails(3))
    assert [(r.message_id, r.outcome) for r in results] == [
        ("m1", Outcome.SENT),
        ("m2", Outcome.TRANSIENT),
        ("m3", Outcome.SENT),
    ]
    assert "421" in results[1].error and "ambiguous" not in results[1].error
    assert mailbox.connections == 2


def test_no_server_is_unreachable():
    with pytest.raises(Unreachable):
        SmtpProvider.from_env(settings(free_port())).send(emails(3))


def test_max_batch_is_per_connection():
    assert SmtpProvider.max_batch == 50


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({}, "SMTP_HOST is not set"),
        ({"SMTP_HOST": "mail.acme.test"}, "EMAIL_FROM is not set"),
        ({"SMTP_HOST": "h", "EMAIL_FROM": "a@b.c", "SMTP_SECURITY": "tls13"}, "SMTP_SECURITY must be one of"),
        ({"SMTP_HOST": "h", "EMAIL_FROM": "a@b.c", "SMTP_PORT": "smtp"}, "SMTP_PORT must be a port number"),
        ({"SMTP_HOST": "h", "EMAIL_FROM": "a@b.c", "SMTP_USERNAME": "u"}, "SMTP_PASSWORD is not set"),
    ],
)
def test_settings(env, message):
    with pytest.raises(ValueError, match=message):
        SmtpProvider.from_env(env)


def test_attachments_pass_through_as_the_base64_they_are(serve):
    mailbox, port = serve()
    pdf = bytes(range(256)) * 4
    content = base64.b64encode(pdf).decode()
    files = (Attachment("Grüße.pdf", "application/pdf", content), Attachment("a.txt", "text/plain", "aGk="))
    message = email(1, attachments=files, cc="Zoë <zoe@example.com>", headers={"Message-ID": "<app-1@app.test>"})
    [result] = SmtpProvider.from_env(settings(port)).send([message])
    assert result.provider_message_id == "<app-1@app.test>"  # the sender's own Message-ID stands
    received = mailbox.received[0]
    assert received.rcpt_tos == ["user1@example.com"]  # Cc is shown, never sent to
    parsed = received.message
    assert (parsed["Cc"], parsed["Message-ID"]) == ("Zoë <zoe@example.com>", "<app-1@app.test>")
    assert parsed.get_content_type() == "multipart/mixed"
    body, first, second = parsed.iter_parts()
    assert body.get_content_type() == "multipart/alternative"
    assert (first.get_filename(), first.get_content_type(), first.get_content()) == (
        "Grüße.pdf",
        "application/pdf",
        pdf,
    )
    assert (second.get_filename(), second.get_content()) == ("a.txt", "hi")
    # On the wire: the stored base64, cut into 76-character lines, not encoded again.
    lines = [content[i : i + 76].encode() for i in range(0, len(content), 76)]
    assert b"\r\n".join(lines) in received.raw


def test_a_message_that_cannot_be_built_fails_alone_and_the_rest_go_once_on_the_same_connection(serve):
    mailbox, port = serve()
    batch = [email(1), email(2, subject="Hi\r\nBcc: everyone@example.com"), email(3)]
    results = SmtpProvider.from_env(settings(port)).send(batch)
    assert [(r.message_id, r.outcome) for r in results] == [
        ("m1", Outcome.SENT),
        ("m2", Outcome.PERMANENT),
        ("m3", Outcome.SENT),
    ]
    assert "cannot be built" in results[1].error
    assert [r.rcpt_tos for r in mailbox.received] == [["user1@example.com"], ["user3@example.com"]]
    assert mailbox.connections == 1


def test_a_relay_reply_with_nul_bytes_is_stored_without_them(serve):
    mailbox, port = serve()
    mailbox.refuse = {"user1@example.com": "550 5.7.1 refused\x00 here"}
    [result] = SmtpProvider.from_env(settings(port)).send([email(1)])
    assert result.outcome is Outcome.PERMANENT
    assert "\x00" not in result.error and "refused\ufffd here" in result.error
