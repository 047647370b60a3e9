"""An email's extras over the API: files, sender, Reply-To, cc and bcc, headers.

Every refusal is a 422 naming the field (or a 413 for a body too large), and leaves nothing
behind: no batch, no message, no file.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest
from sqlalchemy import text

from app.enums import Channel
from app.schemas.email import CONTENT_TYPES, EXTENSIONS
from app.schemas.text import LINE_BREAK
from tests.api.test_errors import assert_error_shape
from tests.conftest import ADMIN_KEY, bearer, create_project, email, rerouted

PDF = base64.b64encode(b"%PDF-1.4\n").decode()
FILE = {"filename": "invoice.pdf", "content_type": "application/pdf", "content": PDF}
MIB = 1024 * 1024
ALLOWED = ", ".join(sorted(CONTENT_TYPES))
DIRECTION_CONTROL = "a text direction control: it can make a name show an extension it does not have."


def not_sent(extension: str) -> str:
    return f"Files named .{extension} are not sent: a name ends in one of {EXTENSIONS}."


def big_file(name: str, size: int) -> dict[str, str]:
    return {"filename": name, "content_type": "application/pdf", "content": base64.b64encode(b"\0" * size).decode()}


@pytest.fixture
def acme(client):
    return create_project(client, settings={"verified_senders": ["@acme.example", "ceo@other.example"]})


def stored(engine, project_id: str) -> dict[str, int]:
    with engine.connect() as connection:
        return {
            table: connection.execute(
                text(f"SELECT count(*) FROM {table} WHERE project_id = :p"), {"p": project_id}
            ).scalar_one()
            for table in ("batches", "messages", "attachments")
        }


NOTHING = {"batches": 0, "messages": 0, "attachments": 0}


def refused(project, engine, body: dict[str, Any], code: int = 422, key: str | None = None) -> dict[str, Any]:
    """The send's field errors (test key: files always have a provider); nothing stored."""
    answer = project.send(body, key=key or project.test_key)
    errors = assert_error_shape(answer, code).get("errors", {}).get("json")
    assert stored(engine, project.id) == NOTHING
    return errors


@pytest.mark.parametrize(
    ("attachment", "errors"),
    [
        (
            {**FILE, "content": "JVBERi0x!"},
            {"content": ["Not valid base64 (RFC 4648: A-Z, a-z, 0-9, + and /, padded with =)."]},
        ),
        (
            {**FILE, "content": "JVBERi0"},
            {"content": ["Not valid base64 (RFC 4648: A-Z, a-z, 0-9, + and /, padded with =)."]},
        ),
        ({**FILE, "content": ""}, {"content": ["A file must not be empty."]}),
        (
            {**FILE, "content_type": "application/x-msdownload"},
            {"content_type": [f"'application/x-msdownload' is not a type Tidings sends; use one of {ALLOWED}."]},
        ),
        *(
            ({**FILE, "filename": name}, {"filename": [not_sent("exe")]})
            for name in ("setup.exe", "inv.exe.", "inv.exe ")
        ),
        ({**FILE, "filename": "page.html"}, {"filename": [not_sent("html")]}),
        ({**FILE, "filename": "disk.iso"}, {"filename": [not_sent("iso")]}),
        (
            {**FILE, "filename": "invoice"},
            {"filename": [f"A file name is a name then an extension, one of {EXTENSIONS}."]},
        ),
        (
            {**FILE, "filename": ".pdf"},
            {"filename": [f"A file name is a name then an extension, one of {EXTENSIONS}."]},
        ),
        *(
            ({**FILE, "filename": name}, {"filename": [f"Contains U+{ord(control):04X}, {DIRECTION_CONTROL}"]})
            for name, control in (
                ("inv\u202efdp.exe", "\u202e"),  # shows as invexe.pdf
                ("inv\u202efdp.txt", "\u202e"),
                ("in\u2067v.pdf", "\u2067"),
                ("in\u200fv.pdf", "\u200f"),
                ("in\u061cv.pdf", "\u061c"),
            )
        ),
        (
            {**FILE, "content_type": "image/png"},
            {"content_type": ["A .pdf file is sent as application/pdf, not image/png."]},
        ),
        ({**FILE, "filename": "../etc/passwd.txt"}, {"filename": ["A file name has no folder: no / or \\."]}),
        ({**FILE, "filename": "a\r\nb.pdf"}, {"filename": [LINE_BREAK]}),
        ({"filename": "a.pdf", "content": PDF}, {"content_type": ["Missing data for required field."]}),
    ],
)
def test_a_bad_file_is_refused_naming_its_field(acme, engine, attachment, errors):
    assert refused(acme, engine, email(attachments=[FILE, attachment])) == {"attachments": {"1": errors}}


def test_a_file_name_is_stored_as_normalised_and_a_file_of_an_allowed_type_is_sent(acme, engine):
    files = [
        {**FILE, "filename": "Invoice A-17.PDF. . "},
        {"filename": "U\u0308bersicht.csv", "content_type": "Text/CSV", "content": PDF},
        {"filename": "call.ics", "content_type": "text/calendar", "content": PDF},
    ]
    answer = acme.send(email(attachments=files), key=acme.test_key)
    assert answer.status_code == 202, answer.get_json()
    with engine.connect() as connection:
        names = connection.execute(
            text("SELECT filename, content_type FROM attachments WHERE project_id = :p"), {"p": acme.id}
        ).all()
    assert sorted(tuple(row) for row in names) == [
        ("Invoice A-17.PDF", "application/pdf"),
        ("call.ics", "text/calendar"),
        ("\u00dcbersicht.csv", "text/csv"),
    ]


def test_base64_may_come_in_lines(acme):
    wrapped = base64.encodebytes(b"x" * 200).decode()  # 76 characters a line, as `base64` writes it
    assert acme.send(email(attachments=[{**FILE, "content": wrapped}]), key=acme.test_key).status_code == 202


def test_a_file_over_ten_mebibytes_is_refused_by_name(acme, engine):
    errors = refused(acme, engine, email(attachments=[FILE, big_file("scan.pdf", 10 * MIB + 1)]))
    assert errors == {"attachments": {"1": {"content": ["scan.pdf is 10.0 MiB; a file may be at most 10.0 MiB."]}}}


def test_files_over_ten_mebibytes_together_are_refused_naming_the_one_that_tips_it(acme, engine):
    files = [big_file("a.pdf", 4 * MIB), big_file("b.pdf", 4 * MIB), big_file("c.pdf", 3 * MIB)]
    errors = refused(acme, engine, email(attachments=files))
    assert errors == {
        "attachments": {"2": {"content": ["With c.pdf the files come to 11.0 MiB; together at most 10.0 MiB."]}}
    }


def test_ten_mebibytes_of_files_fit_in_one_send(acme, engine):
    answer = acme.send(email(attachments=[big_file("a.pdf", 5 * MIB), big_file("b.pdf", 5 * MIB)]), key=acme.test_key)
    assert answer.status_code == 202, answer.get_json()
    assert stored(engine, acme.id)["attachments"] == 2


def test_a_body_over_one_mebibyte_needs_attachments(acme, engine):
    padded = email(metadata={"note": "x" * MIB})
    assert_error_shape(acme.send(padded, key=acme.test_key), 413)
    answer = acme.send({**padded, "attachments": [FILE]}, key=acme.test_key)
    assert answer.status_code == 202, answer.get_json()


def test_more_than_twenty_files_are_refused(acme, engine):
    assert refused(acme, engine, email(attachments=[FILE] * 21)) == {"attachments": ["At most 20 files."]}


def test_files_are_refused_when_a_provider_of_the_chain_cannot_carry_them(acme, engine, settings):
    # Live keys: `fake`, failing over to `fake2`; neither carries files.
    errors = refused(acme, engine, email(attachments=[FILE]), key=acme.live_key)
    assert errors == {"attachments": ["Files cannot be sent: the fake, fake2 providers do not send attachments."]}
    with rerouted(settings, {Channel.EMAIL: ("postmark", "fake")}):  # one that does, failing over to one that does not
        errors = refused(acme, engine, email(attachments=[FILE]), key=acme.live_key)
    assert errors == {"attachments": ["Files cannot be sent: the fake provider does not send attachments."]}
    answer = acme.client.post(
        "/v1/messages/batch",
        json={
            "channel": "email",
            "content": {"subject": "s", "text": "t"},
            "attachments": [FILE],
            "recipients": [{"email": "a@example.com"}],
        },
        headers=bearer(acme.live_key),
    )
    assert assert_error_shape(answer, 422)["errors"]["json"]["attachments"]
    assert stored(engine, acme.id) == NOTHING


def test_a_batch_refuses_bad_files_whole(acme, engine):
    body = {
        "channel": "email",
        "content": {"subject": "s", "text": "t"},
        "attachments": [{**FILE, "content": "%%%"}],
        "recipients": [{"email": "a@example.com"}, {"email": "b@example.com"}],
    }
    answer = acme.client.post("/v1/messages/batch", json=body, headers=bearer(acme.test_key))
    assert list(assert_error_shape(answer, 422)["errors"]["json"]) == ["attachments"]
    assert stored(engine, acme.id) == NOTHING


@pytest.mark.parametrize(
    "extra",
    [
        {"attachments": [FILE]},
        {"from": {"email": "billing@acme.example"}},
        {"reply_to": ["help@acme.example"]},
        {"cc": ["bo@example.com"]},
        {"bcc": ["bo@example.com"]},
        {"headers": {"X-Order": "1"}},
    ],
)
def test_extras_are_for_email_only(acme, engine, extra):
    body = {"channel": "sms", "to": {"phone": "+4915112345678"}, "content": {"text": "t"}, **extra}
    assert refused(acme, engine, body) == {next(iter(extra)): ["Only email takes this."]}


@pytest.mark.parametrize(
    "sender",
    [
        {"email": "billing@acme.example", "name": "Acme, Billing"},
        {"email": "Anyone@ACME.example"},
        {"email": "ceo@other.example", "name": "Zoë"},
    ],
)
def test_a_verified_sender_is_accepted(acme, sender):
    assert acme.send(email(**{"from": sender})).status_code == 202


@pytest.mark.parametrize(
    "address", ["billing@mail.acme.example", "billing@acme.example.evil", "cfo@other.example", "x@example.com"]
)
def test_a_sender_outside_the_verified_senders_is_refused(acme, engine, address):
    errors = refused(acme, engine, email(**{"from": {"email": address}}), key=acme.live_key)
    assert errors == {"from": [f"{address} is not one of this project's verified senders."]}


def test_without_verified_senders_no_send_may_choose_its_sender(project, engine):
    errors = refused(project, engine, email(**{"from": {"email": "me@example.com"}}))
    assert errors == {
        "from": ["This project has no verified senders: an operator adds them to its settings.verified_senders."]
    }


def test_verified_senders_are_an_operators_setting(client, acme):
    shown = client.get(f"/v1/admin/projects/{acme.id}", headers=bearer(ADMIN_KEY)).get_json()["settings"]
    assert shown["verified_senders"] == ["@acme.example", "ceo@other.example"]
    for entry in ("@", "@acme", "not an address", "@acme..example"):
        answer = client.patch(
            f"/v1/admin/projects/{acme.id}", json={"settings": {"verified_senders": [entry]}}, headers=bearer(ADMIN_KEY)
        )
        assert set(assert_error_shape(answer, 422)["errors"]["json"]["settings"]["verified_senders"]) == {"0"}


@pytest.mark.parametrize(
    "name",
    [
        "From",
        "to",
        "Subject",
        "Cc",
        "BCC",
        "Reply-To",
        "Sender",
        "Message-ID",
        "Date",
        "List-Unsubscribe",
        "List-Unsubscribe-Post",
        "Content-Type",
        "Content-Transfer-Encoding",
        "MIME-Version",
        "Return-Path",
        "DKIM-Signature",
        "Received",
    ],
)
def test_headers_that_would_override_the_message_are_refused(acme, engine, name):
    errors = refused(acme, engine, email(headers={"X-Fine": "1", name: "x"}))
    assert list(errors) == ["headers"] and list(errors["headers"]) == [name]
    assert errors["headers"][name][0].startswith(f"{name} is not a header a send may set")


@pytest.mark.parametrize(
    ("headers", "problem"),
    [
        ({"X-Tidings-Priority": "bulk"}, "Headers that steer Tidings or a provider cannot be set."),
        ({"X-PM-Message-Stream": "broadcast"}, "Headers that steer Tidings or a provider cannot be set."),
        ({"X-SMTPAPI": "{}"}, "Headers that steer Tidings or a provider cannot be set."),
        ({"X Bad": "1"}, "Not a header name: 1 to 76 printable ASCII characters, no colon or space."),
        ({"X-Bad:": "1"}, "Not a header name: 1 to 76 printable ASCII characters, no colon or space."),
    ],
)
def test_headers_that_steer_a_provider_or_are_malformed_are_refused(acme, engine, headers, problem):
    assert refused(acme, engine, email(headers=headers)) == {"headers": {next(iter(headers)): [problem]}}


def test_a_header_value_is_one_line(acme, engine):
    errors = refused(acme, engine, email(headers={"X-Order": "1\r\nBcc: victim@example.com"}))
    assert errors == {"headers": {"X-Order": {"value": [LINE_BREAK]}}}


def test_a_header_given_twice_is_refused(acme, engine):
    errors = refused(acme, engine, email(headers={"X-Order": "1", "x-order": "2"}))
    assert errors == {"headers": {"x-order": ["Given twice (header names ignore case)."]}}


def test_cc_and_bcc_name_at_most_49_together(acme, engine):
    many = [f"c{n}@example.com" for n in range(25)]
    errors = refused(acme, engine, email(cc=many, bcc=[f"b{n}@example.com" for n in range(25)]))
    assert errors == {"bcc": ["cc and bcc may name at most 49 addresses together."]}


def test_each_copy_is_a_message_of_its_own_listed_in_the_answer(acme, engine):
    answer = acme.send(
        email(to="ada@example.com", cc=["Bo@example.com", "ada@example.com"], bcc=["bo@example.com", "cy@example.com"])
    )
    body = answer.get_json()
    assert set(body) == {"id", "status", "created_at", "copies"}
    # Ada is the recipient and Bo is named twice: each address gets one message.
    assert [(c["email"], c["kind"]) for c in body["copies"]] == [("bo@example.com", "cc"), ("cy@example.com", "bcc")]
    assert [acme.get(c["id"]).get_json()["to"] for c in body["copies"]] == [
        {"email": "bo@example.com"},
        {"email": "cy@example.com"},
    ]
    assert stored(engine, acme.id)["messages"] == 3


def test_a_replay_answers_the_copies_again_and_writes_nothing(acme, engine):
    body = email(cc=["bo@example.com"], bcc=["cy@example.com"])
    first = acme.send(body, **{"Idempotency-Key": "invoice-17"})
    again = acme.send(body, **{"Idempotency-Key": "invoice-17"})
    assert again.get_json() == first.get_json()
    assert again.headers["Idempotent-Replayed"] == "true"
    other = acme.send({**body, "cc": ["dee@example.com"]}, **{"Idempotency-Key": "invoice-17"})
    assert_error_shape(other, 409)
    assert stored(engine, acme.id)["messages"] == 3


def test_a_batch_makes_copies_per_recipient_within_the_batch_limit(acme, engine):
    rows = [{"email": f"r{n}@example.com"} for n in range(3)]
    body = {
        "channel": "email",
        "content": {"subject": "s", "text": "t"},
        "bcc": ["archive@acme.example"],
        "recipients": rows,
    }
    answer = acme.client.post("/v1/messages/batch", json=body, headers=bearer(acme.test_key)).get_json()
    assert (answer["accepted"], answer["copies"]) == (3, 3)
    assert stored(engine, acme.id)["messages"] == 6
    too_many = {**body, "recipients": [{"email": f"r{n}@example.com"} for n in range(5001)]}
    answer = acme.client.post("/v1/messages/batch", json=too_many, headers=bearer(acme.test_key))
    assert assert_error_shape(answer, 422)["errors"]["json"] == {
        "recipients": ["With 1 copy each, a batch takes at most 5,000 recipients."]
    }
    assert stored(engine, acme.id)["messages"] == 6


def test_a_templates_sender_must_be_verified_and_is_for_email(acme, engine):
    template = {"key": "t", "channel": "email", "subject": "s", "text": "t", "from": {"email": "x@example.com"}}
    answer = acme.call("POST", "/v1/templates", template)
    assert assert_error_shape(answer, 422)["errors"]["json"] == {
        "from": ["x@example.com is not one of this project's verified senders."]
    }
    sms = {"key": "s", "channel": "sms", "text": "t", "reply_to": ["help@acme.example"]}
    assert assert_error_shape(acme.call("POST", "/v1/templates", sms), 422)["errors"]["json"] == {
        "reply_to": ["Only email templates have a sender, not sms."]
    }


def test_a_template_keeps_its_sender_defaults_until_changed(acme):
    created = acme.call(
        "POST",
        "/v1/templates",
        {"key": "r", "channel": "email", "subject": "s", "text": "t", "from": {"email": "shop@acme.example"}},
    ).get_json()
    assert (created["from"], created["reply_to"]) == ({"email": "shop@acme.example"}, None)
    kept = acme.call(
        "PUT", "/v1/templates/r", {"subject": "s2", "text": "t", "reply_to": ["help@acme.example"]}
    ).get_json()
    assert (kept["version"], kept["from"], kept["reply_to"]) == (
        2,
        {"email": "shop@acme.example"},
        ["help@acme.example"],
    )
    cleared = acme.call("PUT", "/v1/templates/r", {"subject": "s2", "text": "t", "from": None}).get_json()
    assert (cleared["version"], cleared["from"], cleared["reply_to"]) == (3, None, ["help@acme.example"])
    same = acme.call("PUT", "/v1/templates/r", {"subject": "s2", "text": "t"}).get_json()
    assert same["version"] == 3


def test_a_templates_sender_is_checked_again_at_every_send(client, acme, engine):
    acme.call(
        "POST",
        "/v1/templates",
        {"key": "r", "channel": "email", "subject": "s", "text": "t", "from": {"email": "shop@acme.example"}},
    )
    client.patch(
        f"/v1/admin/projects/{acme.id}",
        json={"settings": {"verified_senders": ["ceo@other.example"]}},
        headers=bearer(ADMIN_KEY),
    )
    body = {"channel": "email", "to": {"email": "ada@example.com"}, "template": "r"}
    assert refused(acme, engine, body) == {
        "template": ["shop@acme.example is not one of this project's verified senders."]
    }
