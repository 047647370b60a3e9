"""The delivery log's entries: one shape for `GET /v1/events`, the live streams and webhooks.

Two kinds of entry share it. Stored events are rows of `events` (`evt_<row id>`). `sent`
has no row, by design, so the happy path writes none: it is derived from the message's
`sent_at` (`sent_<message id>`). Either id is stable, so clients deduplicate on it.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from providers import simulator

STORED_PREFIX = "evt_"
SENT_PREFIX = "sent_"
TEST_NOTE = "test key: handled by the log provider, never a real provider"
SIMULATED_NOTE = "test key, simulated recipient: answered by the simulator, never a real provider"


@dataclass(frozen=True)
class LogEntry:
    id: str
    type: str
    at: datetime
    project_id: str
    message_id: str | None
    channel: str | None
    subscriber_id: str | None
    batch_id: str | None
    data: Mapping[str, Any]

    def public(self) -> dict[str, Any]:
        """The entry as clients see it, JSON-ready (the project is implied by the key)."""
        return {
            "id": self.id,
            "type": self.type,
            "at": self.at.isoformat(),
            "message_id": self.message_id,
            "channel": self.channel,
            "subscriber_id": self.subscriber_id,
            "batch_id": self.batch_id,
            "data": dict(self.data),
        }


# One projection for both kinds, so the log query, the event writer and the finalise
# statement all return rows `entry()` reads: events aliased `e`, messages aliased `m`. Ids
# come as text, which entries hold: a uuid parsed into Python only to be printed again cost
# finalise a third of its CPU.
STORED_COLUMNS = """
    'evt_' || e.id AS key, e.type, e.at, e.project_id, e.message_id::text AS message_id, m.channel,
    m.subscriber_id, m.batch_id::text AS batch_id, e.data, NULL::text AS provider,
    NULL::text AS provider_message_id, NULL::boolean AS test
"""
SENT_COLUMNS = """
    'sent_' || m.id AS key, 'sent' AS type, m.sent_at AS at, m.project_id, m.id::text AS message_id, m.channel,
    m.subscriber_id, m.batch_id::text AS batch_id, NULL::jsonb AS data, m.provider, m.provider_message_id, m.test
"""


def entry(row: Any) -> LogEntry:
    """A log entry from a row of STORED_COLUMNS or SENT_COLUMNS."""
    sent = row.key.startswith(SENT_PREFIX)
    return LogEntry(
        id=row.key,
        type=row.type,
        at=row.at,
        project_id=row.project_id,
        message_id=row.message_id,
        channel=row.channel,
        subscriber_id=row.subscriber_id,
        batch_id=row.batch_id,
        data=sent_data(row.provider, row.provider_message_id, row.test) if sent else (row.data or {}),
    )


def sent_data(provider: str | None, provider_message_id: str | None, test: bool) -> dict[str, Any]:
    data: dict[str, Any] = {"provider": provider, "provider_message_id": provider_message_id}
    if test:
        data.update(test=True, note=SIMULATED_NOTE if provider == simulator.NAME else TEST_NOTE)
    return data


def parse_id(entry_id: str) -> tuple[str, int | uuid.UUID] | None:
    """("evt", row id) or ("sent", message id) for an id this log gave out; None otherwise."""
    try:
        if entry_id.startswith(STORED_PREFIX):
            return "evt", int(entry_id.removeprefix(STORED_PREFIX))
        if entry_id.startswith(SENT_PREFIX):
            return "sent", uuid.UUID(entry_id.removeprefix(SENT_PREFIX))
    except ValueError:
        return None
    return None
