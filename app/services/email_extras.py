"""What an email sent over the API brings besides its words: a sender, where replies go,
copies, headers and files.

They travel the path mail relayed over SMTP already takes (app/services/mail.py): the same
`message_contents` columns, one message per recipient with the Cc header to show, and the
files stored once. So every copy is a message of its own, with its own timeline, its own
suppression check and its own unsubscribe link; bounces and opens name the address they
concern; no code downstream of the insert knows where a message came from.

The checks that need the database or the configuration live here, before anything is
written: the sender must be one of the project's verified senders (an operator's setting),
and files go only where every provider the email may reach can carry them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.config import current_settings
from app.content.addresses import normalise_address
from app.enums import Channel
from app.errors import abort
from app.models import Project
from providers import registry
from providers.base import Attachment, display_address

INVALID = "Invalid request."


def providers_for_email(chains: Mapping[Channel, Sequence[str]], test: bool) -> tuple[str, ...]:
    """Every provider an email may go out through: `log` for a test key, else the whole
    failover chain (an open circuit moves a message to any of them)."""
    return ("log",) if test else tuple(chains.get(Channel.EMAIL, ()))


def without_files(providers: Sequence[str]) -> list[str]:
    """Those of `providers` that cannot carry attachments: a message with files must reach none
    of them, or it would be sent without what its sender was told was accepted."""
    return [name for name in providers if not registry.carries_attachments(name)]


def files_refusal(refusing: Sequence[str]) -> str:
    many = len(refusing) > 1
    return f"the {', '.join(refusing)} provider{'s' if many else ''} {'do' if many else 'does'} not send attachments"


def for_send(
    session: Session, project_id: str, data: Mapping[str, Any], defaults: Mapping[str, Any] | None, test: bool
) -> dict[str, Any]:
    """The `intake.Common` fields of an email's extras, from a send's validated body and its
    template's sender `defaults`; 422 for a sender that is not verified, or files the
    project's providers cannot carry. Empty for other channels."""
    if data["channel"] is not Channel.EMAIL:
        return {}
    defaults = defaults or {}
    sender = data.get("sender") or defaults.get("from")
    if sender is not None:
        where = "from" if "sender" in data else "template"
        check_sender(session, project_id, sender["email"], where)
    files = data.get("attachments") or ()
    if files and (refusing := without_files(providers_for_email(current_settings().chains, test))):
        refuse("attachments", f"Files cannot be sent: {files_refusal(refusing)}.")
    reply_to = data.get("reply_to") or defaults.get("reply_to")
    return {
        "from_address": shown(sender) if sender else None,
        "reply_to": ", ".join(reply_to) if reply_to else None,
        "cc": ", ".join(data["cc"]) if data.get("cc") else None,
        "headers": data.get("headers") or None,
        "attachments": tuple(Attachment(f["filename"], f["content_type"].lower(), f["content"]) for f in files),
    }


def shown(sender: Mapping[str, str]) -> str:
    """How the sender is shown: `Acme Billing <billing@acme.example>`."""
    return display_address(sender.get("name"), sender["email"])


def copies(data: Mapping[str, Any], to_address: str | None) -> list[tuple[str, str]]:
    """(address, "cc" | "bcc") of every copy a send asks for, each address once and never the
    recipient's own: a message of its own per address, as SMTP ingress makes one per RCPT."""
    seen = {to_address} if to_address else set()
    found = []
    for kind in ("cc", "bcc"):
        for address in data.get(kind) or ():
            normal = normalise_address("email", address)
            if normal not in seen:
                seen.add(normal)
                found.append((normal, kind))
    return found


def check_sender(session: Session, project_id: str, address: str, where: str) -> None:
    """422 at `where` unless `address` is one of the project's verified senders."""
    settings = session.scalar(select(Project.settings).where(Project.id == project_id)) or {}
    entries = {entry.lower() for entry in settings.get("verified_senders") or ()}
    if not entries:
        refuse(where, "This project has no verified senders: an operator adds them to its settings.verified_senders.")
    if not is_verified(address, entries):
        refuse(where, f"{address} is not one of this project's verified senders.")


def is_verified(address: str, entries: set[str]) -> bool:
    """An address is verified when listed itself, or when its domain is (`@acme.example`)."""
    address = address.strip().lower()
    return address in entries or "@" + address.rpartition("@")[2] in entries


def refuse(field: str, problem: str) -> NoReturn:
    abort(422, INVALID, errors={"json": {field: [problem]}})
