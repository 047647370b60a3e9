"""Messages for adapter tests."""

from __future__ import annotations

from typing import Any

from providers.base import Attachment, Outbound


def email(n: int = 1, **fields: Any) -> Outbound:
    """The n-th test email: its own id and address, a text and an html body."""
    values: dict[str, Any] = {
        "message_id": f"m{n}",
        "channel": "email",
        "to": f"user{n}@example.com",
        "subject": f"Hello {n}",
        "text": "Hi there",
        "html": "<p>Hi there</p>",
        **fields,
    }
    return Outbound(**values)


def emails(count: int, **fields: Any) -> list[Outbound]:
    return [email(n, **fields) for n in range(1, count + 1)]


FILES = (Attachment("invoice.pdf", "application/pdf", "JVBERi0xLjQK"),)  # base64 of "%PDF-1.4\n"
