"""SMTP ingress end to end: smtplib → `tidings smtp` → PostgreSQL → Celery worker → provider."""

from __future__ import annotations

import base64
import smtplib
from email.message import EmailMessage
from email.policy import SMTP as SMTP_POLICY
from typing import Any

import pytest
from sqlalchemy import text

from app.smtp.handler import SIGNED_OUT
from providers.base import Outbound
from providers.log import LogProvider
from tests.conftest import ADMIN_KEY, create_project
from tests.smtp.conftest import MAX_BYTES

PDF = b"%PDF-1.4\n" + bytes(range(256)) * 8  # binary: every byte value


def mail(subject: str = "Hello", to: str = "ada@example.com", body: str = "Hi Ada", **headers: str) -> EmailMessage:
    message = EmailMessage()
    message["From"] = "Billing <billing@app.example>"
    message["To"] = to
    message["Subject"] = subject
    for name, value in headers.items():
        message[name.replace("_", "-")] = value
    message.set_content(body)
    return message


def listed(project) -> list[dict[str, Any]]:
    """The project's messages as the API lists them, oldest first."""
    return list(reversed(project.call("GET", "/v1/messages?limit=500").get_json()["items"]))


def recorded(message_id: str) -> Outbound:
    """What the log provider was handed for a message."""
    return next(outbound for outbound in LogProvider.record if outbound.message_id == message_id)


def send(smtp, key: str, message: EmailMessage, **kwargs: Any) -> None:
    with smtp.login(key) as connection:
        connection.send_message(message, **kwargs)


@pytest.mark.usefixtures("worker")
def test_a_plain_message_goes_through_the_pipeline_to_sent(smtp, project):
    send(smtp, project.test_key, mail(Message_ID="<order-17@app.example>"))
    [listed_message] = listed(project)
    message = project.wait_for(listed_message["id"])
    assert message["status"] == "sent"
    assert [event["type"] for event in message["events"]] == ["accepted", "ready", "sending", "sent"]
    assert (message["channel"], message["to"], message["priority"]) == (
        "email",
        {"email": "ada@example.com"},
        "transactional",
    )
    outbound = recorded(message["id"])
    assert (outbound.subject, outbound.text, outbound.html) == ("Hello", "Hi Ada\n", None)
    # No Reply-To of its own: replies go to the application's From, not to our sender.
    assert outbound.reply_to == "Billing <billing@app.example>"
    assert outbound.headers == {"Message-ID": "<order-17@app.example>"}
    assert outbound.attachments == ()


@pytest.mark.usefixtures("worker")
def test_multipart_with_attachments_arrives_with_every_part(smtp, project, engine):
    message = mail("Your invoice", body="Plain words", Reply_To="Support <help@app.example>")
    message["Cc"] = "Zoë Kim <zoe@example.com>"
    message["Bcc"] = "hidden@example.com"
    message.add_alternative("<p>Rich <b>words</b></p>", subtype="html")
    message.add_attachment(PDF, maintype="application", subtype="pdf", filename="invoice.pdf")
    message.add_attachment("a;b\nä;ö\n".encode(), maintype="text", subtype="csv", filename="Übersicht.csv")
    raw = message.as_bytes(policy=SMTP_POLICY)
    with smtp.login(project.test_key) as connection:
        connection.sendmail("billing@app.example", ["ada@example.com", "zoe@example.com"], raw)
    ids = [m["id"] for m in listed(project)]
    assert len(ids) == 2
    assert {project.wait_for(i)["status"] for i in ids} == {"sent"}
    sent = [recorded(i) for i in ids]
    assert sorted(o.to for o in sent) == ["ada@example.com", "zoe@example.com"]
    first = sent[0]
    assert (first.subject, first.text, first.html) == ("Your invoice", "Plain words\n", "<p>Rich <b>words</b></p>\n")
    assert first.reply_to == "Support <help@app.example>"
    assert first.cc == "Zoë Kim <zoe@example.com>"
    assert "Bcc" not in first.headers
    sent_parts = [part for part in message.iter_attachments()]
    assert [(a.filename, a.content_type) for a in first.attachments] == [
        ("invoice.pdf", "application/pdf"),
        ("Übersicht.csv", "text/csv"),
    ]
    # The base64 is what the client wrote, only without its line breaks, and decodes to the files.
    for attachment, part in zip(first.attachments, sent_parts, strict=True):
        assert attachment.content == "".join(part.get_payload().split())
    assert base64.b64decode(first.attachments[0].content) == PDF
    assert base64.b64decode(first.attachments[1].content) == "a;b\nä;ö\n".encode()
    assert sent[1].attachments == first.attachments
    with engine.connect() as connection:
        stored = connection.scalar(text("SELECT count(*) FROM attachments WHERE project_id = :p"), {"p": project.id})
    assert stored == 2  # once for both recipients


@pytest.mark.usefixtures("worker")
@pytest.mark.parametrize(
    ("to", "wire"),
    [
        ("ada@example.com", b"=?utf-8?"),  # an ASCII envelope: smtplib encodes the subject as encoded-words
        ("jörg@example.com", "Grüße".encode()),  # an international address: SMTPUTF8 and raw UTF-8 headers
    ],
)
def test_utf8_subjects_arrive_decoded(smtp, project, to, wire):
    message = mail("Grüße aus Köln 👋", to=to, body="Schöne Grüße")
    assert wire in message.as_bytes(policy=SMTP_POLICY.clone(utf8=to != "ada@example.com"))
    send(smtp, project.test_key, message)
    [listed_message] = listed(project)
    assert project.wait_for(listed_message["id"])["status"] == "sent"
    outbound = recorded(listed_message["id"])
    assert (outbound.to, outbound.subject, outbound.text) == (to, "Grüße aus Köln 👋", "Schöne Grüße\n")


def test_each_recipient_is_one_message_committed_before_the_250(smtp, project, engine):
    with smtp.login(project.live_key) as connection:
        connection.ehlo()
        connection.mail("billing@app.example")
        for address in ("a@example.com", "b@example.com", "A@Example.com"):
            assert connection.rcpt(address)[0] == 250
        code, reply = connection.data(mail().as_bytes(policy=SMTP_POLICY))
        # Read the rows before anything else happens: they must be there already.
        with engine.connect() as db:
            rows = db.execute(
                text("SELECT id::text, to_address, status FROM messages WHERE project_id = :p"), {"p": project.id}
            ).all()
    assert code == 250
    assert sorted(row.to_address for row in rows) == ["a@example.com", "b@example.com"]  # one per address
    first, more = reply.decode().removeprefix("2.0.0 OK: queued as ").split(" and ")
    assert first in {row.id for row in rows}
    assert more == "1 more"


def test_auth_plain_and_login_take_a_project_key(smtp, project):
    with smtp.connect() as connection:
        assert connection.login(project.id, project.live_key)[0] == 235  # smtplib picks PLAIN
    with smtp.connect() as connection:
        connection.ehlo()
        connection.user, connection.password = "ignored", project.test_key
        assert connection.auth("LOGIN", connection.auth_login, initial_response_ok=False)[0] == 235


@pytest.mark.parametrize("key", ["tid_live_not-a-key", "revoked"])
def test_an_unknown_or_revoked_key_is_535(smtp, project, key):
    if key == "revoked":
        project.call("DELETE", f"/v1/admin/projects/{project.id}/keys/{project.live_key_id}", key=ADMIN_KEY)
        key = project.live_key
    with smtp.connect() as connection, pytest.raises(smtplib.SMTPAuthenticationError) as refused:
        connection.login("any-name", key)
    assert refused.value.smtp_code == 535


def test_a_key_revoked_mid_session_has_its_next_message_refused_and_nothing_written(smtp, project, engine):
    """As an event stream ends at its next heartbeat, a login ends at its next message; the
    client may log in again on the same connection with a key that holds."""
    other = project.call("POST", f"/v1/admin/projects/{project.id}/keys", {"name": "spare"}, key=ADMIN_KEY)
    with smtp.login(project.live_key) as connection:
        assert connection.sendmail("billing@app.example", ["a@example.com"], mail().as_bytes()) == {}
        revoked = project.call("DELETE", f"/v1/admin/projects/{project.id}/keys/{project.live_key_id}", key=ADMIN_KEY)
        assert revoked.status_code == 204
        with pytest.raises(smtplib.SMTPSenderRefused) as refused:
            connection.sendmail("billing@app.example", ["b@example.com"], mail().as_bytes())
        assert (refused.value.smtp_code, refused.value.smtp_error) == (530, SIGNED_OUT.encode()[4:])
        connection.rset()
        assert connection.login("any-name", other.get_json()["key"])[0] == 235
        assert connection.sendmail("billing@app.example", ["c@example.com"], mail().as_bytes()) == {}
    with engine.connect() as db:
        found = db.execute(text("SELECT to_address FROM messages WHERE project_id = :p"), {"p": project.id})
        assert sorted(row.to_address for row in found) == ["a@example.com", "c@example.com"]


def test_a_key_revoked_between_mail_and_data_stores_nothing(smtp, project, engine):
    with smtp.login(project.live_key) as connection:
        connection.ehlo()
        assert connection.mail("billing@app.example")[0] == 250
        assert connection.rcpt("a@example.com")[0] == 250
        project.call("DELETE", f"/v1/admin/projects/{project.id}/keys/{project.live_key_id}", key=ADMIN_KEY)
        assert connection.data(mail().as_bytes(policy=SMTP_POLICY))[0] == 530
    with engine.connect() as db:
        assert db.scalar(text("SELECT count(*) FROM messages WHERE project_id = :p"), {"p": project.id}) == 0


def test_nothing_before_tls_and_nothing_before_auth(smtp, project):
    with smtplib.SMTP("127.0.0.1", smtp.port, timeout=10) as connection:
        connection.ehlo()
        assert connection.has_extn("starttls")
        assert not connection.has_extn("auth")  # no AUTH offered in clear
        plain = base64.b64encode(f"\0user\0{project.live_key}".encode()).decode()
        assert connection.docmd("AUTH", f"PLAIN {plain}")[0] == 530
        assert connection.docmd("MAIL", "FROM:<billing@app.example>")[0] == 530
    with smtp.connect() as connection:
        connection.ehlo()
        assert connection.has_extn("auth")
        assert connection.docmd("MAIL", "FROM:<billing@app.example>") == (530, b"5.7.0 Authentication required")


def test_implicit_tls_takes_the_same_logins(smtp, project):
    with smtplib.SMTP_SSL("127.0.0.1", smtp.tls_port, timeout=10, context=smtp.client_tls) as connection:
        connection.login("any-name", project.live_key)
        connection.send_message(mail())
    assert len(listed(project)) == 1


def test_a_message_over_the_size_limit_is_552(smtp, project):
    big = mail(body="x" * MAX_BYTES)
    with smtp.login(project.live_key) as connection:
        with pytest.raises(smtplib.SMTPSenderRefused) as declared:  # smtplib announces SIZE: refused at MAIL
            connection.send_message(big)
        assert declared.value.smtp_code == 552
        connection.rset()
        connection.mail("billing@app.example")  # no SIZE: refused at the end of DATA
        connection.rcpt("ada@example.com")
        assert connection.data(big.as_bytes(policy=SMTP_POLICY))[0] == 552
    assert listed(project) == []


def test_more_recipients_than_the_limit_are_452_and_the_rest_go(smtp, project):
    addresses = [f"user{n}@example.com" for n in range(51)]
    with smtp.login(project.live_key) as connection:
        refused = connection.sendmail("billing@app.example", addresses, mail().as_bytes(policy=SMTP_POLICY))
    assert list(refused) == ["user50@example.com"]
    assert refused["user50@example.com"][0] == 452
    assert len(listed(project)) == 50


def test_an_invalid_recipient_is_553(smtp, project):
    with smtp.login(project.live_key) as connection:
        connection.mail("billing@app.example")
        assert connection.rcpt("not-an-address@")[0] == 553


@pytest.mark.usefixtures("worker")
def test_a_suppressed_recipient_is_accepted_and_ends_suppressed(smtp, project):
    project.call("POST", "/v1/suppressions", {"channel": "email", "address": "gone@example.com", "reason": "bounce"})
    with smtp.login(project.test_key) as connection:
        refused = connection.sendmail(
            "billing@app.example", ["Gone@Example.com", "ada@example.com"], mail().as_bytes(policy=SMTP_POLICY)
        )
    assert refused == {}  # 250 for both: no bounce back to the application
    final = {m["to"]["email"]: project.wait_for(m["id"]) for m in listed(project)}
    assert final["gone@example.com"]["status"] == "suppressed"
    assert final["gone@example.com"]["events"][-1] == {
        "type": "suppressed",
        "at": final["gone@example.com"]["events"][-1]["at"],
        "data": {"reason": "bounce"},
    }
    assert final["ada@example.com"]["status"] == "sent"
    ids = {m["id"] for m in final.values()}
    assert [o.to for o in LogProvider.record if o.message_id in ids] == ["ada@example.com"]


NO_BOUNDARY = b"Subject: x\r\nContent-Type: multipart/mixed\r\n\r\n--b\r\n\r\nhi\r\n--b--\r\n"
BAD_BASE64 = (
    b"Subject: x\r\nContent-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\nContent-Type: text/plain\r\n\r\nhi\r\n"
    b"--b\r\nContent-Type: application/pdf\r\nContent-Disposition: attachment; filename=a.pdf\r\n"
    b"Content-Transfer-Encoding: base64\r\n\r\nnot*base64!\r\n--b--\r\n"
)
UNKNOWN_CHARSET = b"Subject: x\r\nContent-Type: text/plain; charset=klingon\r\n\r\nhi\r\n"
BAD_PRIORITY = b"Subject: x\r\nX-Tidings-Priority: urgent\r\n\r\nhi\r\n"


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (NO_BOUNDARY, "a multipart part names no boundary"),
        (BAD_BASE64, "the attachment 'a.pdf' is not valid base64"),
        (UNKNOWN_CHARSET, "a text part names the unknown charset 'klingon'"),
        (BAD_PRIORITY, "X-Tidings-Priority must be transactional or bulk, not 'urgent'"),
    ],
)
def test_a_malformed_message_is_554_with_the_reason(smtp, project, raw, reason):
    with smtp.login(project.live_key) as connection, pytest.raises(smtplib.SMTPDataError) as refused:
        connection.sendmail("billing@app.example", ["ada@example.com"], raw)
    assert refused.value.smtp_code == 554
    assert refused.value.smtp_error.decode() == f"5.6.0 Malformed message: {reason}"
    assert listed(project) == []


def test_attachments_for_a_provider_that_cannot_send_them_are_554(smtp, project):
    message = mail()
    message.add_attachment(PDF, maintype="application", subtype="pdf", filename="invoice.pdf")
    # The session's live keys go to the `fake` provider, failing over to `fake2`: neither has attachments.
    with smtp.login(project.live_key) as connection, pytest.raises(smtplib.SMTPDataError) as refused:
        connection.send_message(message)
    assert refused.value.smtp_code == 554
    assert (
        refused.value.smtp_error.decode()
        == "5.6.1 Attachments cannot be sent: the fake, fake2 providers do not send attachments"
    )
    assert listed(project) == []


def test_priority_and_category_come_from_our_headers(smtp, project):
    send(smtp, project.live_key, mail(X_Tidings_Priority="Bulk", X_Tidings_Category="Newsletter"))
    [message] = listed(project)
    assert (message["priority"], message["category"]) == ("bulk", "newsletter")


def test_a_project_over_its_rate_limit_is_451(smtp, client, engine):
    limited = create_project(client, rate_limit_per_min=2)  # one budget for API calls and SMTP messages
    with smtp.login(limited.live_key) as connection:
        for _ in range(2):
            connection.send_message(mail())
        with pytest.raises(smtplib.SMTPSenderRefused) as refused:
            connection.send_message(mail())
    assert refused.value.smtp_code == 451
    assert refused.value.smtp_error.decode().startswith("4.7.1 Rate limit exceeded; try again in ")
    with engine.connect() as db:
        assert db.scalar(text("SELECT count(*) FROM messages WHERE project_id = :p"), {"p": limited.id}) == 2


def test_a_message_over_the_daily_quota_is_451_for_every_recipient(smtp, client, engine):
    limited = create_project(client, settings={"daily_quota": {"email": 3}})
    with smtp.login(limited.live_key) as connection:
        connection.sendmail("billing@app.example", ["a@example.com", "b@example.com"], mail().as_bytes())
        with pytest.raises(smtplib.SMTPDataError) as refused:
            connection.sendmail("billing@app.example", ["c@example.com", "d@example.com"], mail().as_bytes())
    assert refused.value.smtp_code == 451
    reply = refused.value.smtp_error.decode()
    assert reply.startswith("4.7.1 The project's daily email quota has 1 of 3 left until ")
    assert reply.endswith(" seconds")
    with engine.connect() as db:
        assert db.scalar(text("SELECT count(*) FROM messages WHERE project_id = :p"), {"p": limited.id}) == 2


def test_a_test_keys_storage_is_451_once_full_and_552_for_a_message_larger_than_a_day(smtp, client, engine):
    """PDF's base64 is about 2,750 bytes: one such message fits 4,000 a day, a second does
    not today, and one with two PDFs never does."""
    bounded = create_project(client, settings={"daily_storage_bytes": {"test": 4000}})
    message = mail()
    message.add_attachment(PDF, maintype="application", subtype="pdf", filename="invoice.pdf")
    twice = mail()
    for name in ("a.pdf", "b.pdf"):
        twice.add_attachment(PDF, maintype="application", subtype="pdf", filename=name)
    with smtp.login(bounded.test_key) as connection:
        connection.sendmail("billing@app.example", ["a@example.com"], message.as_bytes(policy=SMTP_POLICY))
        with pytest.raises(smtplib.SMTPDataError) as full:
            connection.sendmail("billing@app.example", ["b@example.com"], message.as_bytes(policy=SMTP_POLICY))
        with pytest.raises(smtplib.SMTPDataError) as too_large:
            connection.sendmail("billing@app.example", ["c@example.com"], twice.as_bytes(policy=SMTP_POLICY))
    assert full.value.smtp_code == 451
    assert full.value.smtp_error.decode().startswith("4.7.1 The project's test keys may store 4000 bytes")
    assert too_large.value.smtp_code == 552
    assert too_large.value.smtp_error.decode().startswith("5.3.4 This send stores ")
    with engine.connect() as db:
        assert db.scalar(text("SELECT count(*) FROM messages WHERE project_id = :p"), {"p": bounded.id}) == 1


def test_a_project_without_email_is_550(smtp, client):
    sms_only = create_project(client, channels=["sms"])
    with smtp.login(sms_only.live_key) as connection, pytest.raises(smtplib.SMTPSenderRefused) as refused:
        connection.send_message(mail())
    assert refused.value.smtp_code == 550
