"""Suppressions: addresses a project must not contact on a channel.

`add_suppressions` (and `suppress_all`, the same statement for entries of many projects)
is the one way entries are written: by the API here, by deliver when a provider refuses a
recipient, and by the inbound webhooks that report hard bounces, complaints and
unsubscribes. It takes the caller's session and never commits, so the entry lands in the
same transaction as whatever caused it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from marshmallow import ValidationError, validate
from sqlalchemy import Row, delete, select, text, tuple_
from sqlalchemy.orm import Session, sessionmaker

from app.changed_rows import changed_rows
from app.content.addresses import normalise_address
from app.enums import Channel, SuppressionReason
from app.errors import abort, field_error
from app.models import Suppression
from app.pagination import decode_cursor, page
from app.schemas.core import E164

ADDRESS_CHECKS = {
    Channel.EMAIL: validate.Email(),
    Channel.SMS: validate.Regexp(E164, error="Not a valid E.164 phone number."),
    Channel.WEBHOOK: validate.URL(schemes={"http", "https"}, require_tld=False),
}


@dataclass(frozen=True)
class NewSuppression:
    project_id: str
    channel: Channel
    address: str
    reason: SuppressionReason


def add_suppressions(
    session: Session,
    project_id: str,
    channel: Channel,
    addresses: Iterable[str],
    reason: SuppressionReason,
    expires_at: datetime | None = None,
) -> Sequence[Row]:
    """Suppress `addresses` on `channel` in one statement; an existing entry takes the new
    reason and expiry (the latest event about an address is the one that counts)."""
    return suppress_all(session, [NewSuppression(project_id, channel, a, reason) for a in addresses], expires_at)


def suppress_all(
    session: Session, entries: Iterable[NewSuppression], expires_at: datetime | None = None
) -> Sequence[Row]:
    """`add_suppressions` for entries of any projects and channels (a delivery batch, a
    provider's webhook): still one statement; of two entries for one address the last wins."""
    latest = {(e.project_id, e.channel.value, normalise_address(e.channel, e.address)): e.reason for e in entries}
    if not latest:
        return []
    keys = sorted(latest)
    return session.execute(
        text(
            """
            INSERT INTO suppressions AS s (project_id, channel, address, reason, expires_at)
            SELECT project_id, channel, address, reason, :expires_at
            FROM unnest(CAST(:projects AS text[]), CAST(:channels AS text[]), CAST(:addresses AS text[]),
                        CAST(:reasons AS text[])) AS v(project_id, channel, address, reason)
            ON CONFLICT (project_id, channel, address) DO UPDATE
            SET reason = excluded.reason, expires_at = excluded.expires_at, updated_at = now()
            RETURNING s.*, (s.xmax = 0) AS created
            """
        ),
        {
            "projects": [k[0] for k in keys],
            "channels": [k[1] for k in keys],
            "addresses": [k[2] for k in keys],
            "reasons": [latest[k].value for k in keys],
            "expires_at": expires_at,
        },
    ).all()


def create(db: sessionmaker[Session], project_id: str, data: dict[str, Any]) -> tuple[Row, bool]:
    """Suppress one address from the API; True when the entry is new."""
    channel: Channel = data["channel"]
    check = ADDRESS_CHECKS.get(channel)
    try:
        if check is not None:
            check(data["address"])
    except ValidationError as error:
        field_error(422, "Invalid request.", "json", "address", str(error.messages[0]))
    with db.begin() as session:
        (row,) = add_suppressions(session, project_id, channel, [data["address"]], data["reason"], data["expires_at"])
    return row, row.created


def list_page(
    db: sessionmaker[Session], project_id: str, channel: Channel | None, cursor: str | None, limit: int
) -> dict[str, Any]:
    after = decode_cursor(cursor, Channel, str)
    query = select(Suppression).where(Suppression.project_id == project_id)
    if channel is not None:
        query = query.where(Suppression.channel == channel)
    if after is not None:
        query = query.where(tuple_(Suppression.channel, Suppression.address) > tuple(after))
    with db() as session:
        rows = session.scalars(query.order_by(Suppression.channel, Suppression.address).limit(limit + 1)).all()
    return page(rows, limit, lambda s: [s.channel.value, s.address])


def remove(db: sessionmaker[Session], project_id: str, channel: str, address: str) -> None:
    if channel not in {c.value for c in Channel}:
        abort(404, f"No suppression of {address!r} on {channel!r}.")
    with db.begin() as session:
        removed = changed_rows(
            session,
            delete(Suppression).where(
                Suppression.project_id == project_id,
                Suppression.channel == Channel(channel),
                Suppression.address == normalise_address(channel, address),
            ),
        )
    if removed == 0:
        abort(404, f"No suppression of {address!r} on {channel}.")


def of_subscriber(db: sessionmaker[Session], project_id: str, subscriber: Any) -> list[Suppression]:
    """The entries that hold back a subscriber's email, phone or devices, for whoever looks
    them up (the console's profile page)."""
    addresses = [(Channel.EMAIL, subscriber.email), (Channel.SMS, subscriber.phone)]
    addresses += [(Channel.PUSH, token) for token in subscriber.push_tokens or []]
    wanted = [(channel, normalise_address(channel, a)) for channel, a in addresses if a]
    if not wanted:
        return []
    with db() as session:
        return list(
            session.scalars(
                select(Suppression).where(
                    Suppression.project_id == project_id, tuple_(Suppression.channel, Suppression.address).in_(wanted)
                )
            )
        )
