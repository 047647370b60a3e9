"""An API email's extras reach real adapters in each provider's documented form: files, the
verified sender, Reply-To, copies for cc and bcc (a message each), and custom headers.

Real PostgreSQL, Redis and worker; the providers are local servers speaking their APIs
(pytest-httpserver for Postmark, Resend and SendGrid; aiosmtpd for SMTP). The worker
prepares; no worker listens on these providers' lanes, so each test delivers itself.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from pytest_httpserver import HTTPServer
from sqlalchemy import text
from werkzeug import Request, Response

from app.enums import Channel
from providers.log import LogProvider
from tasks.deliver import deliver
from tests.conftest import create_project, rerouted
from tests.providers.test_smtp import Mailbox, free_port

pytestmark = pytest.mark.usefixtures("worker")

PDF = b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj <<>> endobj\ntrailer <<>>\n%%EOF\n"
CSV = "order;total\nA-17;12,50 €\n".encode()
FILES = [
    {"filename": "invoice-A-17.pdf", "content_type": "application/pdf", "content": base64.b64encode(PDF).decode()},
    {"filename": "Übersicht.csv", "content_type": "text/csv", "content": base64.b64encode(CSV).decode()},
]
SENDER = {"email": "billing@acme.example", "name": "Acme Billing"}
SHOWN_SENDER = "Acme Billing <billing@acme.example>"


def invoice(**extra: Any) -> dict[str, Any]:
    """An email to Ada with two files, a sender, Reply-To, a copy each for Bo (cc) and audit (bcc), a header."""
    return {
        "channel": "email",
        "to": {"email": "ada@example.com"},
        "content": {"subject": "Your invoice", "text": "Attached.", "html": "<p>Attached.</p>"},
        "from": SENDER,
        "reply_to": ["help@acme.example"],
        "cc": ["bo@example.com"],
        "bcc": ["audit@example.com"],
        "headers": {"X-Order": "A-17"},
        "attachments": FILES,
        **extra,
    }


@pytest.fixture
def acme(client):
    return create_project(client, settings={"verified_senders": ["@acme.example"]})


def ready(project, body: dict[str, Any], key: str | None = None) -> list[str]:
    """Send; wait until the worker prepared the message and its copies; their ids, the message's first."""
    answer = project.send(body, key=key)
    assert answer.status_code == 202, answer.get_json()
    ids = [answer.get_json()["id"], *(copy["id"] for copy in answer.get_json().get("copies", []))]
    assert {project.wait_for(i, {"ready", "sent", "failed", "suppressed"})["status"] for i in ids} <= {"ready", "sent"}
    return ids


def recording(httpserver: HTTPServer, path: str, answer: Any) -> list[dict[str, Any]]:
    """Every request to `path`, its JSON body, in order; each answered by `answer(body)`."""
    ledger: list[dict[str, Any]] = []

    def handle(request: Request) -> Response:
        ledger.append(request.get_json())
        return answer(ledger[-1])

    httpserver.expect_request(path, method="POST").respond_with_handler(handle)
    return ledger


def statuses(project, ids: list[str]) -> list[str]:
    return [project.get(i).get_json()["status"] for i in ids]


def test_postmark_gets_files_sender_reply_to_and_headers_and_a_message_per_copy(acme, settings, httpserver):
    ledger = recording(
        httpserver,
        "/email",
        lambda body: Response(json.dumps({"To": body["To"], "MessageID": f"pm-{body['To']}", "ErrorCode": 0})),
    )
    with rerouted(
        settings,
        {Channel.EMAIL: ("postmark",)},
        EMAIL_FROM="hello@acme.example",
        POSTMARK_SERVER_TOKEN="server-token",
        POSTMARK_BASE_URL=httpserver.url_for(""),
    ):
        ids = ready(acme, invoice())
        deliver("postmark", ids)
    assert statuses(acme, ids) == ["sent", "sent", "sent"]
    # A message with files is a request of its own: three messages, three requests.
    assert sorted(request["To"] for request in ledger) == ["ada@example.com", "audit@example.com", "bo@example.com"]
    for request in ledger:
        assert request["From"] == SHOWN_SENDER
        assert request["ReplyTo"] == "help@acme.example"
        assert request["Headers"] == [{"Name": "X-Order", "Value": "A-17"}]
        assert request["Attachments"] == [
            {"Name": f["filename"], "Content": f["content"], "ContentType": f["content_type"]} for f in FILES
        ]
        assert "Cc" not in request and "Bcc" not in request  # copies are messages of their own


def test_resend_gets_files_in_its_form(acme, settings, httpserver):
    ledger = recording(httpserver, "/emails", lambda body: Response(json.dumps({"id": f"re-{body['to'][0]}"})))
    with rerouted(
        settings,
        {Channel.EMAIL: ("resend",)},
        EMAIL_FROM="hello@acme.example",
        RESEND_API_KEY="re_test",
        RESEND_BASE_URL=httpserver.url_for(""),
    ):
        ids = ready(acme, invoice(cc=[], bcc=["audit@example.com"]))
        deliver("resend", ids)
    assert statuses(acme, ids) == ["sent", "sent"]
    # A message with files is a request of its own, in whichever order the claim returned them.
    assert sorted(request["to"] for request in ledger) == [["ada@example.com"], ["audit@example.com"]]
    for request in ledger:
        assert (request["from"], request["reply_to"], request["headers"]) == (
            SHOWN_SENDER,
            ["help@acme.example"],
            {"X-Order": "A-17"},
        )
        assert request["attachments"] == [
            {"filename": f["filename"], "content": f["content"], "content_type": f["content_type"]} for f in FILES
        ]
        assert "cc" not in request and "bcc" not in request


def test_sendgrid_shares_one_request_for_the_files_of_a_message_and_its_copies(acme, settings, httpserver):
    ledger = recording(httpserver, "/v3/mail/send", lambda body: Response("", 202, {"X-Message-Id": "sg-1"}))
    with rerouted(
        settings,
        {Channel.EMAIL: ("sendgrid",)},
        EMAIL_FROM="hello@acme.example",
        SENDGRID_API_KEY="SG.test",
        SENDGRID_BASE_URL=httpserver.url_for(""),
    ):
        ids = ready(acme, invoice())
        deliver("sendgrid", ids)
    assert statuses(acme, ids) == ["sent", "sent", "sent"]
    [request] = ledger  # the same content and files: one request, a personalization per message
    assert request["from"] == {"email": "billing@acme.example", "name": "Acme Billing"}
    assert request["reply_to"] == {"email": "help@acme.example"}
    assert request["attachments"] == [
        {"content": f["content"], "type": f["content_type"], "filename": f["filename"], "disposition": "attachment"}
        for f in FILES
    ]
    people = request["personalizations"]
    assert sorted(p["to"][0]["email"] for p in people) == ["ada@example.com", "audit@example.com", "bo@example.com"]
    assert {json.dumps(p["headers"]) for p in people} == {json.dumps({"X-Order": "A-17"})}
    assert all("cc" not in p and "bcc" not in p for p in people)


@pytest.fixture
def mailbox() -> Iterator[tuple[Mailbox, int]]:
    """A plain SMTP relay on 127.0.0.1 (aiosmtpd) that keeps what it receives."""
    box, port = Mailbox(), free_port()
    controller = Controller(box, hostname="127.0.0.1", port=port)
    controller.start()
    yield box, port
    controller.stop()


def smtp_route(settings, port: int):
    return rerouted(
        settings,
        {Channel.EMAIL: ("smtp",)},
        EMAIL_FROM="hello@acme.example",
        SMTP_HOST="127.0.0.1",
        SMTP_PORT=str(port),
        SMTP_SECURITY="none",
        SMTP_TIMEOUT="5",
    )


def test_smtp_gets_the_files_as_mime_parts_and_shows_cc_but_never_bcc(acme, settings, mailbox):
    box, port = mailbox
    with smtp_route(settings, port):
        ids = ready(acme, invoice())
        deliver("smtp", ids)
    assert statuses(acme, ids) == ["sent", "sent", "sent"]
    # One RCPT per message: Bo and audit got copies of their own, from the verified sender.
    assert sorted(r.rcpt_tos[0] for r in box.received) == ["ada@example.com", "audit@example.com", "bo@example.com"]
    assert {(r.mail_from, len(r.rcpt_tos)) for r in box.received} == {("billing@acme.example", 1)}
    for received in box.received:
        message = received.message
        assert message["From"] == SHOWN_SENDER
        assert (message["Reply-To"], message["Cc"], message["X-Order"]) == (
            "help@acme.example",
            "bo@example.com",
            "A-17",
        )
        assert message["Bcc"] is None
        headers = received.raw.split(b"\r\n\r\n")[0]
        assert (b"audit@example.com" in headers) == (received.rcpt_tos == ["audit@example.com"])  # To: audit alone
        files = [
            (part.get_filename(), part.get_content_type(), part.get_payload(decode=True))
            for part in message.iter_attachments()
        ]
        assert files == [("invoice-A-17.pdf", "application/pdf", PDF), ("Übersicht.csv", "text/csv", CSV)]


def test_a_batch_stores_its_files_once_and_every_recipient_gets_them(acme, settings, mailbox, engine):
    box, port = mailbox
    body = {
        "channel": "email",
        "priority": "transactional",
        "content": {"subject": "Price list", "text": "Attached."},
        "attachments": FILES[:1],
        "recipients": [{"email": f"reader{n}@example.com"} for n in range(4)],
    }
    with smtp_route(settings, port):
        answer = acme.call("POST", "/v1/messages/batch", body)
        assert answer.status_code == 202, answer.get_json()
        batch_id = answer.get_json()["batch_id"]
        with engine.connect() as connection:
            ids = list(
                connection.execute(
                    text("SELECT id::text FROM messages WHERE batch_id = :b ORDER BY to_address"), {"b": batch_id}
                ).scalars()
            )
            files = connection.execute(
                text("SELECT count(*) FROM attachments WHERE project_id = :p"), {"p": acme.id}
            ).scalar_one()
            named = connection.execute(
                text(
                    "SELECT count(DISTINCT attachment_ids) FROM message_contents "
                    "WHERE message_id = ANY(CAST(:ids AS uuid[]))"
                ),
                {"ids": ids},
            ).scalar_one()
        assert (len(ids), files, named) == (4, 1, 1)
        assert {acme.wait_for(i, {"ready"})["status"] for i in ids} == {"ready"}
        deliver("smtp", ids)
    assert statuses(acme, ids) == ["sent"] * 4
    assert sorted(r.rcpt_tos[0] for r in box.received) == [f"reader{n}@example.com" for n in range(4)]
    for received in box.received:
        [part] = received.message.iter_attachments()
        assert (part.get_filename(), part.get_payload(decode=True)) == ("invoice-A-17.pdf", PDF)


def test_a_suppressed_copy_is_dropped_and_the_others_go(acme):
    added = acme.call("POST", "/v1/suppressions", {"channel": "email", "address": "bo@example.com", "reason": "manual"})
    assert added.status_code in (200, 201), added.get_json()
    LogProvider.record.clear()
    body = invoice(attachments=[], cc=["Bo@Example.com", "cy@example.com"])
    answer = acme.send(body, key=acme.test_key).get_json()
    copies = {copy["email"]: copy["id"] for copy in answer["copies"]}
    assert [(c["email"], c["kind"]) for c in answer["copies"]] == [
        ("bo@example.com", "cc"),
        ("cy@example.com", "cc"),
        ("audit@example.com", "bcc"),
    ]
    assert acme.wait_for(copies["bo@example.com"])["status"] == "suppressed"
    assert {
        acme.wait_for(i)["status"] for i in (answer["id"], copies["cy@example.com"], copies["audit@example.com"])
    } == {"sent"}
    sent = sorted((o.to, o.cc) for o in LogProvider.record if o.message_id in {answer["id"], *copies.values()})
    shown = "Bo@Example.com, cy@example.com"  # the Cc header as given, on every message of the send
    assert sent == [("ada@example.com", shown), ("audit@example.com", shown), ("cy@example.com", shown)]


def test_a_templates_sender_defaults_apply_unless_the_send_gives_its_own(acme):
    template = {
        "key": "receipt",
        "channel": "email",
        "subject": "Receipt {{ n }}",
        "text": "Thanks.",
        "from": {"email": "shop@acme.example", "name": "Acme Shop"},
        "reply_to": ["orders@acme.example"],
    }
    created = acme.call("POST", "/v1/templates", template)
    assert created.status_code == 201, created.get_json()
    assert (created.get_json()["from"], created.get_json()["reply_to"]) == (template["from"], template["reply_to"])
    LogProvider.record.clear()
    body = {"channel": "email", "to": {"email": "ada@example.com"}, "template": "receipt", "data": {"n": 1}}
    defaults = acme.send(body, key=acme.test_key).get_json()["id"]
    own = acme.send({**body, "from": SENDER, "reply_to": ["help@acme.example"]}, key=acme.test_key).get_json()["id"]
    assert {acme.wait_for(i)["status"] for i in (defaults, own)} == {"sent"}
    sent = {o.message_id: (o.from_address, o.reply_to) for o in LogProvider.record}
    assert sent[defaults] == ("Acme Shop <shop@acme.example>", "orders@acme.example")
    assert sent[own] == (SHOWN_SENDER, "help@acme.example")


def test_a_bulk_emails_own_headers_travel_beside_its_unsubscribe_headers(acme):
    LogProvider.record.clear()
    body = invoice(attachments=[], cc=[], bcc=[], priority="bulk", headers={"X-Order": "A-17", "Precedence": "bulk"})
    message_id = acme.send(body, key=acme.test_key).get_json()["id"]
    assert acme.wait_for(message_id)["status"] == "sent"
    [sent] = [o for o in LogProvider.record if o.message_id == message_id]
    assert set(sent.headers) == {"X-Order", "Precedence", "List-Unsubscribe", "List-Unsubscribe-Post"}
    assert (sent.headers["X-Order"], sent.headers["List-Unsubscribe-Post"]) == ("A-17", "List-Unsubscribe=One-Click")
