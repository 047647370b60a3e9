"""Tell everyone who listens about new log entries: live streams and webhook endpoints.

Called inside the transaction that wrote the entries (or, for `sent`, the message rows
they derive from). Webhook deliveries are inserted in that same transaction, so an entry
and its deliveries commit together; the Redis publish and the webhook task leave after
the commit. Per batch: one Redis round trip (and the encoding and publish only where a
stream listens), one index probe for endpoints (none where the statement that wrote the
entries already said which projects have one: deliver's finalise), and a delivery insert
plus a task only for projects that have an endpoint.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Sequence

from sqlalchemy.orm import Session

from app.db import enqueue_after_commit
from app.delivery import dispatch, webhook_store
from app.delivery.event_log import LogEntry
from app.enums import Channel, EventType
from app.observability import live


def announce(session: Session, entries: Sequence[LogEntry], listening: Collection[str] | None = None) -> None:
    """`listening`: the entries' projects with an enabled webhook endpoint, when the caller
    already knows them (None: look them up)."""
    if not entries:
        return
    by_project: dict[str, list[LogEntry]] = defaultdict(list)
    for entry in entries:
        by_project[entry.project_id].append(entry)
        if entry.type == EventType.SENT and entry.channel == Channel.IN_APP and entry.subscriber_id:
            channel = live.inbox_channel(entry.project_id, entry.subscriber_id)
            live.publish_after_commit(session, channel, {"kind": "item", "id": entry.message_id})
    for project_id, items in by_project.items():
        live.publish_after_commit(session, live.project_channel(project_id), items)
    deliveries = webhook_store.enqueue(session, entries, listening)
    for signature in dispatch.webhooks(deliveries):
        enqueue_after_commit(session, signature)
