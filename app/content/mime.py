"""Reading an email as an application wrote it (RFC 5322, MIME) into what Tidings stores.

What is kept: the subject, the first text and the first html body part, every other part as
an attachment (its base64 passed through as it came, never decoded), Reply-To (else From,
so replies still reach the application's address), the Cc header to show, a few headers
that must survive the trip (Message-ID, threading, List-Unsubscribe), and our own
`X-Tidings-Priority` / `X-Tidings-Category`. Everything else (Bcc, Received, X-Mailer, …)
stays behind. Headers may use RFC 2047 encoded-words or raw UTF-8 (RFC 6532).

The structure is parsed with the compat32 policy and only the kept headers with the modern
header parser: the modern policy re-parses Content-Type whenever it is read, which made a
small multipart message with one attachment cost 3 ms to read instead of 0.25 ms.
"""

from __future__ import annotations

import base64
import codecs
import mimetypes
import re
from collections.abc import Iterator
from dataclasses import dataclass
from email import errors, policy
from email.headerregistry import AddressHeader, BaseHeader
from email.message import Message
from email.parser import BytesParser
from typing import cast

from app.enums import Priority
from app.schemas.core import CATEGORY
from providers.base import Attachment

# Headers passed on to the provider as they came: the message's identity and threading, and
# the unsubscribe links mailbox providers ask bulk senders for.
KEPT_HEADERS = ("Message-ID", "In-Reply-To", "References", "List-Unsubscribe", "List-Unsubscribe-Post")

# Defects that mean the message cannot be read as its sender meant it.
MALFORMED = {
    errors.NoBoundaryInMultipartDefect: "a multipart part names no boundary",
    errors.StartBoundaryNotFoundDefect: "a multipart boundary never occurs",
    errors.CloseBoundaryNotFoundDefect: "a multipart part is never closed (is the message cut short?)",
    errors.MultipartInvariantViolationDefect: "a multipart part has no parts",
    errors.InvalidMultipartContentTransferEncodingDefect: "a multipart part has a transfer encoding",
    errors.MissingHeaderBodySeparatorDefect: "a header line has no colon",
    errors.FirstHeaderLineIsContinuationDefect: "the first header line is a continuation line",
    errors.InvalidBase64CharactersDefect: "a base64 part has characters base64 does not use",
    errors.InvalidBase64PaddingDefect: "a base64 part is wrongly padded",
    errors.InvalidBase64LengthDefect: "a base64 part has a length base64 cannot have",
}
BASE64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")
LINE_BREAKS = re.compile(r"[\r\n]+")


class RawHeaders(policy.Compat32):
    """compat32, except that header values come back as they arrived (compat32 turns raw UTF-8
    ones into `Header` objects): the modern header parser reads them instead."""

    def header_fetch_parse(self, name: str, value: str) -> str:
        return value


RAW_HEADERS = RawHeaders()


class Malformed(ValueError):
    """The message cannot be read; the text says why (it goes back to the sender)."""


@dataclass(frozen=True)
class Mail:
    """One email as Tidings keeps it, whoever it goes to."""

    subject: str | None
    text: str | None
    html: str | None
    reply_to: str | None
    cc: str | None
    headers: dict[str, str]
    attachments: tuple[Attachment, ...]
    priority: Priority
    category: str | None


def read_mail(raw: bytes) -> Mail:
    """Read a message as received in SMTP DATA; raise Malformed naming what is wrong."""
    message = BytesParser(policy=RAW_HEADERS).parsebytes(raw)
    text = html = None
    attachments: list[Attachment] = []
    for part in leaves(message):
        kind = part.get_content_type()
        if kind == "text/plain" and text is None and is_body(part):
            text = body_text(part)
        elif kind == "text/html" and html is None and is_body(part):
            html = body_text(part)
        else:
            attachments.append(attachment(part, len(attachments) + 1))
    reply_to = address_header(message, "Reply-To")
    return Mail(
        subject=header(message, "Subject"),
        text=text,
        html=html,
        reply_to=reply_to or address_header(message, "From", strict=False),
        cc=address_header(message, "Cc"),
        headers={name: value for name in KEPT_HEADERS if (value := header(message, name))},
        attachments=tuple(attachments),
        priority=priority(message),
        category=category(message),
    )


def leaves(part: Message) -> Iterator[Message]:
    """The parts that hold content, in order; a forwarded message (message/rfc822) is one."""
    check_defects(part)
    if part.get_content_maintype() != "multipart":
        yield part
        return
    # check_defects refused a multipart part whose body was not split into parts.
    for child in cast(list[Message], part.get_payload()):
        yield from leaves(child)


def check_defects(part: Message) -> None:
    for defect in part.defects:
        reason = MALFORMED.get(type(defect))
        if reason is not None:
            raise Malformed(reason)


def is_body(part: Message) -> bool:
    """A text part is the message's body unless it is marked or named as a file."""
    disposition = (part.get("Content-Disposition") or "").split(";", 1)[0].strip().lower()
    return disposition != "attachment" and part.get_filename() is None


def body_text(part: Message) -> str:
    # Base64 and quoted-printable undone, defects noted; a part that is not multipart decodes to bytes.
    payload = cast(bytes, part.get_payload(decode=True))
    check_defects(part)
    charset = part.get_content_charset() or "utf-8"  # undeclared 8-bit text is usually UTF-8
    try:
        codecs.lookup(charset)
    except LookupError:
        raise Malformed(f"a text part names the unknown charset {charset!r}") from None
    text = payload.decode(charset, errors="replace").replace("\r\n", "\n")
    if "\0" in text:  # RFC 5322 has no NUL, and PostgreSQL text cannot hold one
        raise Malformed("a text part contains a NUL character")
    return text


def attachment(part: Message, number: int) -> Attachment:
    """A part as a file: base64 as it came (line breaks dropped), anything else encoded once."""
    kind = part.get_content_type()
    name = part.get_filename()
    filename = decoded(name) if name else f"attachment-{number}{mimetypes.guess_extension(kind) or '.bin'}"
    if (part.get("Content-Transfer-Encoding") or "").strip().lower() == "base64":
        payload = part.get_payload()
        if not isinstance(payload, str):  # a message part, read as the message it holds
            raise Malformed(
                f"the message part {filename!r} is base64-encoded; message parts are read only as 7bit, 8bit or binary"
            )
        content = "".join(payload.split())
        if len(content) % 4 or not BASE64.fullmatch(content):
            raise Malformed(f"the attachment {filename!r} is not valid base64")
        return Attachment(filename, kind, content)
    if part.get_content_maintype() == "message":  # a forwarded message: its parsed parts, written back
        data = b"".join(inner.as_bytes() for inner in cast(list[Message], part.get_payload()))
    else:
        data = cast(bytes, part.get_payload(decode=True))  # a part that is not multipart decodes to bytes
    return Attachment(filename, kind, base64.b64encode(data).decode("ascii"))


def parsed_header(name: str, value: str) -> BaseHeader:
    """The modern parser's view of one header: encoded-words and raw UTF-8 decoded."""
    return policy.default.header_fetch_parse(name, value)


def decoded(value: str) -> str:
    """Header text as the reader should see it."""
    return one_line(str(parsed_header("x-text", value)))


def one_line(text: str) -> str:
    """Decoded header text on one line (a decoded CR or LF could forge headers), without NUL."""
    if "\0" in text:
        raise Malformed("a header contains a NUL character")
    return LINE_BREAKS.sub(" ", text).strip()


def header(message: Message, name: str) -> str | None:
    value = message.get(name)
    if value is None:
        return None
    return decoded(value) or None


def address_header(message: Message, name: str, strict: bool = True) -> str | None:
    """An address header, decoded; one that holds no address is malformed, or ignored when not `strict`."""
    value = message.get(name)
    if value is None or not value.strip():
        return None
    parsed = cast(AddressHeader, parsed_header(name, value))  # the policy parses an address header as one
    if not parsed.groups or any(not address.domain for address in parsed.addresses):
        if strict:
            raise Malformed(f"{name} is not a list of addresses")
        return None
    return one_line(str(parsed))


def priority(message: Message) -> Priority:
    value = header(message, "X-Tidings-Priority")
    if value is None:
        return Priority.TRANSACTIONAL
    try:
        return Priority(value.lower())
    except ValueError:
        raise Malformed(f"X-Tidings-Priority must be transactional or bulk, not {value!r}") from None


def category(message: Message) -> str | None:
    value = header(message, "X-Tidings-Category")
    if value is None:
        return None
    if not re.fullmatch(CATEGORY, value.lower()):
        raise Malformed("X-Tidings-Category must be 1 to 64 of a-z, 0-9, _ . and -")
    return value.lower()
