"""Reading mail as applications write it: bodies, files, kept headers, and what is malformed."""

from __future__ import annotations

import base64
from email.message import EmailMessage
from email.policy import SMTP, SMTPUTF8

import pytest

from app.content.mime import Malformed, read_mail
from app.enums import Priority
from providers.base import Attachment


def message(**headers: str) -> EmailMessage:
    mail = EmailMessage()
    mail["From"] = "App <app@app.example>"
    mail["To"] = "ada@example.com"
    mail["Subject"] = headers.pop("Subject", "Hello")
    for name, value in headers.items():
        mail[name.replace("_", "-")] = value
    mail.set_content("Hi")
    return mail


def test_a_plain_message():
    mail = read_mail(message().as_bytes(policy=SMTP))
    assert (mail.subject, mail.text, mail.html, mail.attachments) == ("Hello", "Hi\n", None, ())
    assert (mail.priority, mail.category, mail.cc, mail.headers) == (Priority.TRANSACTIONAL, None, None, {})
    assert mail.reply_to == "App <app@app.example>"  # no Reply-To: replies go where the app's From says


def test_kept_headers_and_the_rest_left_behind():
    raw = message(
        Reply_To="=?utf-8?q?Z=C3=BCrich_Desk?= <desk@app.example>",
        Cc="Zoë <zoe@example.com>, bo@example.com",
        Bcc="secret@example.com",
        Message_ID="<42@app.example>",
        In_Reply_To="<41@app.example>",
        References="<40@app.example> <41@app.example>",
        List_Unsubscribe="<https://app.example/u/1>",
        X_Mailer="Legacy 1.0",
    ).as_bytes(policy=SMTP)
    mail = read_mail(raw)
    assert mail.reply_to == "Zürich Desk <desk@app.example>"
    assert mail.cc == "Zoë <zoe@example.com>, bo@example.com"
    assert mail.headers == {
        "Message-ID": "<42@app.example>",
        "In-Reply-To": "<41@app.example>",
        "References": "<40@app.example> <41@app.example>",
        "List-Unsubscribe": "<https://app.example/u/1>",
    }


@pytest.mark.parametrize("policy", [SMTP, SMTPUTF8], ids=["encoded-words", "raw-utf8"])
def test_utf8_headers_either_way(policy):
    mail = read_mail(message(Subject="Ünïcödé ✓ 日本").as_bytes(policy=policy))
    assert mail.subject == "Ünïcödé ✓ 日本"


def test_a_decoded_line_break_cannot_forge_a_header():
    mail = read_mail(b"Subject: =?utf-8?q?Hi=0D=0ABcc=3A_x=40evil=2Eexample?=\r\n\r\nbody\r\n")
    assert mail.subject == "Hi Bcc: x@evil.example"


def test_alternatives_related_images_and_files():
    mail = message()
    mail.add_alternative("<p>Hi <img src='cid:logo'></p>", subtype="html")
    mail.get_payload()[1].add_related(b"\x89PNG...", maintype="image", subtype="png", cid="<logo>")
    mail.add_attachment(b"%PDF-1.4", maintype="application", subtype="pdf", filename="Grüße.pdf")
    mail.add_attachment("a,b\n", subtype="csv", filename="=?utf-8?q?=C3=BCbersicht.csv?=")
    read = read_mail(mail.as_bytes(policy=SMTP))
    assert (read.text, read.html) == ("Hi\n", "<p>Hi <img src='cid:logo'></p>\n")
    assert [(a.filename, a.content_type) for a in read.attachments] == [
        ("attachment-1.png", "image/png"),  # an inline image is carried as a file, not dropped
        ("Grüße.pdf", "application/pdf"),
        ("übersicht.csv", "text/csv"),
    ]
    # A text file sent as text (not base64) travels as lines: CRLF is its canonical form.
    assert [base64.b64decode(a.content) for a in read.attachments] == [b"\x89PNG...", b"%PDF-1.4", b"a,b\r\n"]


def test_base64_is_passed_through_and_other_encodings_are_encoded_once():
    content = base64.encodebytes(bytes(range(256))).decode()  # 76-character lines
    raw = (
        "Subject: Files\r\nContent-Type: multipart/mixed; boundary=b\r\n\r\n"
        "--b\r\nContent-Type: text/plain\r\n\r\nsee files\r\n"
        "--b\r\nContent-Type: application/octet-stream; name=raw.bin\r\nContent-Transfer-Encoding: base64\r\n\r\n"
        f"{content.replace(chr(10), chr(13) + chr(10))}"
        "--b\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Disposition: attachment; filename=notes.txt\r\n"
        "Content-Transfer-Encoding: quoted-printable\r\n\r\nsch=C3=B6n\r\n"
        "--b\r\nContent-Type: message/rfc822\r\n\r\nSubject: inner\r\n\r\nforwarded\r\n--b--\r\n"
    ).encode()
    mail = read_mail(raw)
    assert mail.text == "see files"  # the line break before a boundary belongs to the boundary
    raw_bin, notes, forwarded = mail.attachments
    assert raw_bin == Attachment("raw.bin", "application/octet-stream", "".join(content.split()))
    assert (notes.filename, base64.b64decode(notes.content)) == ("notes.txt", "schön".encode())
    assert forwarded.filename == "attachment-3.eml"
    assert b"forwarded" in base64.b64decode(forwarded.content)


def test_charsets_are_honoured_and_undeclared_8bit_is_read_as_utf8():
    latin = b"Subject: x\r\nContent-Type: text/plain; charset=iso-8859-1\r\n\r\ncaf\xe9\r\n"
    bare = "Subject: x\r\n\r\ncafé\r\n".encode()
    assert read_mail(latin).text == read_mail(bare).text == "café\n"


def test_priority_and_category():
    mail = read_mail(message(X_Tidings_Priority=" BULK ", X_Tidings_Category="News.Letter").as_bytes(policy=SMTP))
    assert (mail.priority, mail.category) == (Priority.BULK, "news.letter")


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"Subject: x\r\nContent-Type: multipart/mixed\r\n\r\nhi\r\n", "a multipart part names no boundary"),
        (
            b"Subject: x\r\nContent-Type: multipart/mixed; boundary=b\r\n\r\nno parts here\r\n",
            "a multipart boundary never occurs",
        ),
        (
            b"Subject: x\r\nContent-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\n\r\ncut short\r\n",
            "a multipart part is never closed (is the message cut short?)",
        ),
        (b"just some words\r\n", "a header line has no colon"),
        (b"Subject: x\r\nContent-Transfer-Encoding: base64\r\n\r\nYWJ\r\n", "a base64 part is wrongly padded"),
        (  # RFC 2046 allows message/rfc822 only 7bit, 8bit or binary; it came to 451, try again, for ever
            b"Subject: x\r\nContent-Type: message/rfc822\r\nContent-Transfer-Encoding: base64\r\n\r\n"
            b"U3ViamVjdDogaGkNCg0KYm9keQ==\r\n",
            "the message part 'attachment-1.eml' is base64-encoded; "
            "message parts are read only as 7bit, 8bit or binary",
        ),
        (
            b"Subject: x\r\nContent-Type: text/plain; charset=nope\r\n\r\nhi\r\n",
            "a text part names the unknown charset 'nope'",
        ),
        (b"Subject: x\r\nReply-To: not an address\r\n\r\nhi\r\n", "Reply-To is not a list of addresses"),
        (b"Subject: x\r\n\r\nnul \0 byte\r\n", "a text part contains a NUL character"),
        (b"Subject: =?utf-8?q?nul_=00?=\r\n\r\nhi\r\n", "a header contains a NUL character"),
        (
            b"Subject: x\r\nX-Tidings-Category: no spaces\r\n\r\nhi\r\n",
            "X-Tidings-Category must be 1 to 64 of a-z, 0-9, _ . and -",
        ),
    ],
)
def test_malformed(raw, reason):
    with pytest.raises(Malformed) as raised:
        read_mail(raw)
    assert str(raised.value) == reason


def test_a_from_that_is_no_address_is_ignored_not_refused():
    assert read_mail(b"From: nobody\r\nSubject: x\r\n\r\nhi\r\n").reply_to is None
