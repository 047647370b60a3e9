"""Prepare: resolve each accepted message's address and provider, then route it to a deliver lane."""

from __future__ import annotations

from collections import defaultdict

from sqlalchemy import Row

from app.db import enqueue_after_commit, session_scope
from app.enums import Channel, EventType
from tasks import dispatch, store
from tasks.celery_app import celery_app, settings


@celery_app.task(name="tidings.prepare")
def prepare(ids: list[str]) -> None:
    """Resolve each accepted message's address and provider, then hand it to its deliver lane."""
    config = settings()
    with session_scope(config.database_url) as session:
        rows = store.load_for_prepare(session, ids)
        ready: dict[tuple[str, str], list[tuple[str, str]]] = defaultdict(list)
        unsendable: list[tuple[str, str]] = []
        for row in rows:
            address = row.to_address or subscriber_address(row)
            if address is None:
                unsendable.append((row.id, f"subscriber {row.subscriber_id!r} has no {row.channel} address"))
                continue
            provider = "log" if row.test else config.providers[Channel(row.channel)]
            ready[(provider, row.priority)].append((row.id, address))
        failed = store.fail_unsendable(session, unsendable)
        store.record_events(
            session,
            [store.NewEvent(r.id, r.project_id, EventType.FAILED, {"reason": r.error}) for r in failed],
        )
        for (provider, priority), pairs in ready.items():
            message_ids = [message_id for message_id, _ in pairs]
            store.mark_ready(session, message_ids, [provider] * len(pairs), [a for _, a in pairs])
            for signature in dispatch.deliver(provider, priority, message_ids):
                enqueue_after_commit(session, signature)


def subscriber_address(row: Row) -> str | None:
    """The address a subscriber has for the message's channel, if any."""
    if row.subscriber_id is None:
        return None
    match row.channel:
        case Channel.EMAIL:
            return row.email
        case Channel.SMS:
            return row.phone
        case Channel.PUSH:
            return row.push_tokens[0] if row.push_tokens else None
        case Channel.WEBHOOK:
            return (row.subscriber_data or {}).get("webhook_url")
    return None
