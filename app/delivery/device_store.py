"""Set-based reads and writes of a push message's devices (`push_deliveries`): one statement
per step and batch, like the rest of the pipeline (app/delivery/store.py).

Prepare writes a row per token, deliver reads the rows of the messages it claimed and
settles the devices the provider answered for in its finalise transaction, and the
timeline reads one message's. These functions take a session and never commit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import text
from sqlalchemy.orm import Session

from app.db import rows_as
from app.delivery.store import storable
from app.enums import DeviceStatus

# Devices a message's next attempt sends to; every other status is settled.
WAITING = (DeviceStatus.PENDING, DeviceStatus.RETRYING)


@dataclass(frozen=True)
class NewDevice:
    message_id: str
    n: int  # the token's place in the subscriber's list
    token: str
    status: DeviceStatus = DeviceStatus.PENDING


@dataclass(frozen=True)
class Settled:
    """A device's new state after a provider call; `attempted` when the provider was asked."""

    message_id: str
    n: int
    status: DeviceStatus
    attempted: bool = True
    provider_message_id: str | None = None
    error: str | None = None
    follow_up: str | None = None


def start(session: Session, devices: Sequence[NewDevice]) -> None:
    """The devices of newly ready push messages. A message prepared again (a dead letter
    requeued) starts over with the tokens its subscriber has now."""
    if not devices:
        return
    ids = sorted({d.message_id for d in devices})
    session.execute(text("DELETE FROM push_deliveries WHERE message_id = ANY(CAST(:ids AS uuid[]))"), {"ids": ids})
    session.execute(
        text(
            """
            INSERT INTO push_deliveries (message_id, n, token, status)
            SELECT * FROM unnest(CAST(:ids AS uuid[]), CAST(:ns AS smallint[]), CAST(:tokens AS text[]),
                                 CAST(:statuses AS text[]))
            """
        ),
        {
            "ids": [d.message_id for d in devices],
            "ns": [d.n for d in devices],
            "tokens": [d.token for d in devices],
            "statuses": [d.status.value for d in devices],
        },
    )


@dataclass(frozen=True)
class Device:
    """One device of a push message as recorded: its token, state, and the provider's answer."""

    message_id: str
    n: int
    token: str
    status: str
    attempts: int
    provider_message_id: str | None
    error: str | None
    follow_up: str | None
    updated_at: datetime


def of_messages(session: Session, ids: Sequence[str]) -> list[Device]:
    """Every device of the given messages (deliver's claimed batch, or one message's
    timeline), in their subscriber's order; none for a message sent to one raw token, or
    prepared before devices were recorded."""
    if not ids:
        return []
    rows = session.execute(
        text(
            """
            SELECT message_id::text AS message_id, n, token, status, attempts, provider_message_id, error,
                   follow_up, updated_at
            FROM push_deliveries WHERE message_id = ANY(CAST(:ids AS uuid[]))
            ORDER BY message_id, n
            """
        ),
        {"ids": list(ids)},
    )
    return rows_as(Device, rows)


def settle(session: Session, settled: Sequence[Settled]) -> None:
    """Write what the provider answered for each device, in one statement. A device already
    settled stays as it is, so a repeated finalise changes nothing."""
    if not settled:
        return
    session.execute(
        text(
            """
            UPDATE push_deliveries d
            SET status = v.status, attempts = d.attempts + v.attempted,
                provider_message_id = v.provider_message_id, error = v.error, follow_up = v.follow_up,
                updated_at = now()
            FROM unnest(CAST(:ids AS uuid[]), CAST(:ns AS smallint[]), CAST(:statuses AS text[]),
                        CAST(:attempted AS smallint[]), CAST(:provider_ids AS text[]), CAST(:errors AS text[]),
                        CAST(:follow_ups AS text[]))
                 AS v(message_id, n, status, attempted, provider_message_id, error, follow_up)
            WHERE d.message_id = v.message_id AND d.n = v.n AND d.status IN ('pending', 'retrying')
            """
        ),
        {
            "ids": [s.message_id for s in settled],
            "ns": [s.n for s in settled],
            "statuses": [s.status.value for s in settled],
            "attempted": [int(s.attempted) for s in settled],
            "provider_ids": [s.provider_message_id and storable(s.provider_message_id) for s in settled],
            "errors": [s.error and storable(s.error) for s in settled],
            "follow_ups": [s.follow_up for s in settled],
        },
    )
