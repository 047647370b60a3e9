"""What an email send may bring besides its words: files, a sender, copies and headers.

Every rule here is checked before anything is stored, so a refused send writes nothing, and
nothing reaches a provider that a provider would refuse for a reason we can see up front:

- **Files**: at most 20, each named with an extension of `ATTACHMENT_TYPES` and sent as a
  type of that extension (documents, images, text and calendars; never executables, web
  pages, disk images or archives that can hide one), its base64 valid, and each file and
  all of them together at most 10 MiB once decoded (Postmark's limit for a whole message,
  the smallest of the providers that take files).
- **Headers**: only those a send has a reason to set (`X-…` of its own, threading, list
  metadata); never one that changes who the message is from or for, what it is, how it
  is encoded, or how a provider handles it.
- **Copies** (`cc`, `bcc`): at most 49 together, so no message names more than the 50
  recipients Postmark and SES take in one message.
"""

from __future__ import annotations

import base64
import binascii
import re
import unicodedata
from typing import Any, cast

from marshmallow import Schema, ValidationError, fields, validate, validates_schema

from app.schemas.text import HeaderEmail, HeaderText

MIB = 1024 * 1024
BASE64_TEXT = re.compile(r"([A-Za-z0-9+/]*)=*")  # the alphabet, then padding: its rules are b64decode's
MAX_ATTACHMENT_BYTES = 10 * MIB
MAX_ATTACHMENTS = 20
MAX_COPIES = 49
MAX_REPLY_TO = 10
MAX_HEADERS = 20

# The files Tidings sends: each extension, and the types a file of it may be sent as.
# Documents, images, text and calendars; never a page a browser runs (.html, .svg), a disk
# image (.iso, .img), an archive that can hide either, or anything a system may execute.
# An allow-list, since a deny-list misses what nobody thought of: `inv.exe.`, `.html`, `.iso`.
ATTACHMENT_TYPES: dict[str, frozenset[str]] = {
    "pdf": frozenset({"application/pdf"}),
    "doc": frozenset({"application/msword"}),
    "docx": frozenset({"application/vnd.openxmlformats-officedocument.wordprocessingml.document"}),
    "xls": frozenset({"application/vnd.ms-excel"}),
    "xlsx": frozenset({"application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"}),
    "ppt": frozenset({"application/vnd.ms-powerpoint"}),
    "pptx": frozenset({"application/vnd.openxmlformats-officedocument.presentationml.presentation"}),
    "odt": frozenset({"application/vnd.oasis.opendocument.text"}),
    "ods": frozenset({"application/vnd.oasis.opendocument.spreadsheet"}),
    "odp": frozenset({"application/vnd.oasis.opendocument.presentation"}),
    "txt": frozenset({"text/plain"}),
    "csv": frozenset({"text/csv", "text/plain"}),
    "ics": frozenset({"text/calendar"}),
    "png": frozenset({"image/png"}),
    "jpg": frozenset({"image/jpeg"}),
    "jpeg": frozenset({"image/jpeg"}),
    "gif": frozenset({"image/gif"}),
    "webp": frozenset({"image/webp"}),
}
CONTENT_TYPES = frozenset().union(*ATTACHMENT_TYPES.values())
EXTENSIONS = ", ".join(f".{extension}" for extension in sorted(ATTACHMENT_TYPES))
# Characters that change the direction text is shown in: `inv\u202efdp.exe` shows as
# `invexe.pdf`, an executable that looks like a document.
BIDI_CONTROLS = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")

# RFC 5322 field names: printable ASCII but the colon.
HEADER_NAME = re.compile(r"^[!-9;-~]{1,76}$")
# Headers a send may set besides its own X- ones: threading, list metadata, auto-reply hints.
ALLOWED_HEADERS = frozenset(
    {
        "in-reply-to",
        "references",
        "list-id",
        "list-help",
        "list-subscribe",
        "list-post",
        "list-owner",
        "list-archive",
        "auto-submitted",
        "precedence",
        "keywords",
        "comments",
        "importance",
        "priority",
        "sensitivity",
    }
)
# X- headers that steer Tidings or a provider (a Postmark stream, a SendGrid or SES setting):
# the deployment's account, not the sender's to choose.
PROVIDER_HEADERS = ("x-tidings-", "x-pm-", "x-smtpapi", "x-sg-", "x-ses-")


def decoded_size(content: str) -> int:
    """Bytes of the file a valid, unbroken base64 text holds, without decoding it again."""
    return len(content) // 4 * 3 - content[-2:].count("=")


def mebibytes(size: int) -> str:
    return f"{size / MIB:.1f} MiB"


class Base64Content(fields.String):
    """A file's bytes as base64 (RFC 4648, `+/` and padding), stored and sent as given.

    Line breaks (what `base64` and MIME writers put every 76 characters) are dropped; any
    other character outside the alphabet, or a wrong padding, is refused.
    """

    default_error_messages = {
        "base64": "Not valid base64 (RFC 4648: A-Z, a-z, 0-9, + and /, padded with =).",
        "empty": "A file must not be empty.",
    }

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> str:
        content = "".join(super()._deserialize(value, attr, data, **kwargs).split())
        # Check the alphabet on the text itself, then decode only its last quanta: every quantum
        # before them is four letters of the alphabet, which always decode. Decoding all of a
        # 10 MiB file held two more copies of it (14 MB of ASCII bytes, 10 MB decoded) per send.
        letters = BASE64_TEXT.fullmatch(content)
        if letters is None:
            raise self.make_error("base64")
        start = max(0, (letters.end(1) - 8) // 4 * 4)
        try:
            decoded = base64.b64decode(content[start:], validate=True)
        except binascii.Error:
            raise self.make_error("base64") from None
        if not decoded and not start:
            raise self.make_error("empty")
        return content


class FileName(HeaderText):
    """A file's name as the recipient's system will read it, or a clear refusal.

    Normalised first (NFC, and without the trailing dots and spaces Windows drops, so
    `inv.exe.` is `inv.exe`), then it must hold no folder and no direction control, and end
    in an extension of `ATTACHMENT_TYPES`. The name stored and sent is the normalised one.
    """

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> str:
        name = unicodedata.normalize("NFC", super()._deserialize(value, attr, data, **kwargs)).rstrip(". ")
        if "/" in name or "\\" in name:
            raise ValidationError("A file name has no folder: no / or \\.")
        if control := BIDI_CONTROLS.search(name):
            raise ValidationError(
                f"Contains U+{ord(control.group()):04X}, a text direction control: it can make a name show "
                "an extension it does not have."
            )
        stem, _, extension = name.rpartition(".")
        if not stem:
            raise ValidationError(f"A file name is a name then an extension, one of {EXTENSIONS}.")
        if extension.lower() not in ATTACHMENT_TYPES:
            raise ValidationError(f"Files named .{extension} are not sent: a name ends in one of {EXTENSIONS}.")
        return name


def allowed_type(value: str) -> None:
    if value.lower() not in CONTENT_TYPES:
        raise ValidationError(f"{value!r} is not a type Tidings sends; use one of {', '.join(sorted(CONTENT_TYPES))}.")


class AttachmentSchema(Schema):
    """One file: its name as the recipient sees it, its type, and its bytes as base64."""

    filename = FileName(
        required=True,
        validate=validate.Length(1, 255),
        metadata={
            "description": "As the recipient sees it, trailing dots and spaces dropped: no folder, no text direction "
            f"control, and ending in one of {EXTENSIONS}, the extension of its `content_type`.",
            "example": "invoice-A-17.pdf",
        },
    )
    content_type = HeaderText(
        required=True,
        validate=allowed_type,
        metadata={
            "description": f"One of (case ignored): {', '.join(sorted(CONTENT_TYPES))}; a type of the "
            "`filename`'s extension (`.csv`: text/csv or text/plain, `.jpg`: image/jpeg, …).",
            "example": "application/pdf",
        },
    )
    content = Base64Content(
        required=True,
        metadata={"description": "The file's bytes, base64 (line breaks allowed).", "example": "JVBERi0xLjQK"},
    )

    @validates_schema
    def type_fits_name(self, data: dict[str, Any], **kwargs: Any) -> None:
        """Refuse a type its name's extension is not: a name is what a mail client opens a file by."""
        extension = data["filename"].rpartition(".")[2].lower()  # FileName made sure it has one
        types = ATTACHMENT_TYPES[extension]
        if data["content_type"].lower() not in types:
            problem = f"A .{extension} file is sent as {' or '.join(sorted(types))}, not {data['content_type']}."
            raise ValidationError(problem, "content_type")


def within_size(files: list[dict[str, Any]]) -> None:
    """Each file, and all of them together, at most MAX_ATTACHMENT_BYTES decoded; the error names the file."""
    total = 0
    for index, file in enumerate(files):
        size = decoded_size(file["content"])
        total += size
        most = mebibytes(MAX_ATTACHMENT_BYTES)
        if size > MAX_ATTACHMENT_BYTES:
            problem = f"{file['filename']} is {mebibytes(size)}; a file may be at most {most}."
        elif total > MAX_ATTACHMENT_BYTES:
            problem = f"With {file['filename']} the files come to {mebibytes(total)}; together at most {most}."
        else:
            continue
        raise ValidationError({index: {"content": [problem]}})


class Attachments(fields.List[dict[str, Any]]):
    """The files, then their sizes: a size error names its file where the file's other errors go
    (`attachments.2.content`), which a validator's error, always a list, could not."""

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> list[dict[str, Any] | None]:
        files = super()._deserialize(value, attr, data, **kwargs)
        within_size(cast(list[dict[str, Any]], files))  # None is a file only where Nested allows it; ours does not
        return files


def attachments_field() -> fields.List:
    return Attachments(
        fields.Nested(AttachmentSchema),
        validate=validate.Length(max=MAX_ATTACHMENTS, error=f"At most {MAX_ATTACHMENTS} files."),
        metadata={
            "description": "Email only. Files sent with the message (a batch stores them once for every "
            f"recipient): at most {MAX_ATTACHMENTS}, each and all together at most 10 MiB decoded, of the types "
            "in the README. Refused (422) when the project's email providers cannot carry files."
        },
    )


class SenderSchema(Schema):
    """Who the email is from: an address among the project's verified senders, and a name to show."""

    email = HeaderEmail(required=True, validate=validate.Length(max=320), metadata={"example": "billing@acme.example"})
    name = HeaderText(validate=validate.Length(1, 200), metadata={"example": "Acme Billing"})


def address_list(most: int, description: str, example: str, **kwargs: Any) -> fields.List:
    """A list of email addresses, each one line; an empty one is as none."""
    return fields.List(
        HeaderEmail(validate=validate.Length(max=320)),
        validate=validate.Length(max=most, error=f"At most {most} addresses."),
        metadata={"description": description, "example": [example]},
        **kwargs,
    )


def safe_headers(headers: dict[str, str]) -> None:
    """Only headers a send may set, each once whatever its case; the error names the header."""
    seen: set[str] = set()
    errors: dict[str, list[str]] = {}
    for name in headers:
        lower = name.lower()
        if not HEADER_NAME.match(name):
            errors[name] = ["Not a header name: 1 to 76 printable ASCII characters, no colon or space."]
        elif lower in seen:
            errors[name] = ["Given twice (header names ignore case)."]
        elif lower.startswith(PROVIDER_HEADERS):
            errors[name] = ["Headers that steer Tidings or a provider cannot be set."]
        elif not (lower.startswith("x-") or lower in ALLOWED_HEADERS):
            errors[name] = [
                f"{name} is not a header a send may set: X-… headers of your own, or one of "
                f"{', '.join(sorted(ALLOWED_HEADERS))}."
            ]
        seen.add(lower)
    if len(headers) > MAX_HEADERS:
        errors["_schema"] = [f"At most {MAX_HEADERS} headers."]
    if errors:
        raise ValidationError(errors)


class EmailHeaders(fields.Dict):
    """Header name → value, each name checked by `safe_headers`; an error names its header."""

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> dict[str, str]:
        headers = super()._deserialize(value, attr, data, **kwargs)
        safe_headers(headers)
        return headers


def headers_field() -> fields.Dict:
    return EmailHeaders(
        keys=fields.String(),
        values=HeaderText(validate=validate.Length(1, 998)),
        metadata={
            "description": "Email only. Extra headers: X-… of your own (not X-Tidings-, X-PM-, X-SES-, X-SG-, "
            "X-SMTPAPI), In-Reply-To, References, List-Id and the other List- headers but List-Unsubscribe, "
            "Auto-Submitted, Precedence, Importance, Priority, Sensitivity, Keywords, Comments. Never From, To, "
            "Cc, Subject, Content-… and the like.",
            "example": {"X-Order": "A-17", "In-Reply-To": "<order-A-17@acme.example>"},
        },
    )


DOMAIN = re.compile(r"^@(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z][a-z0-9-]{0,62}$", re.IGNORECASE)
VALID_EMAIL = validate.Email()


def sender_entry(value: str) -> None:
    """A verified sender: one address, or `@domain` for every address of that domain (not its subdomains)."""
    if value.startswith("@"):
        if len(value) > 254 or not DOMAIN.match(value):
            raise ValidationError("Not a domain like @acme.example.")
        return
    try:
        VALID_EMAIL(value)
    except ValidationError:
        raise ValidationError("Give an address like billing@acme.example, or @acme.example for a domain.") from None


def verified_senders_field() -> fields.List:
    return fields.List(
        HeaderText(validate=[validate.Length(max=320), sender_entry]),
        load_default=list,
        dump_default=list,
        validate=validate.Length(max=100),
        metadata={
            "description": "Addresses (billing@acme.example) and whole domains (@acme.example) a send's or a "
            "template's `from` may use; none: every send goes from the deployment's EMAIL_FROM. Each must also be "
            "a sender the email provider accepts.",
            "example": ["@acme.example", "billing@acme.example"],
        },
    )
