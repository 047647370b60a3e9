"""Reports: the news a provider gave in its answer, applied once the send is written.

Only the simulator knows at send time what will follow (providers/simulator.py), and its
news must do exactly what a real provider's would, so nothing is written here: delivered,
bounced and complained go through the code that applies status webhooks
(`app.services.inbound.record`: receipts, statuses only forward, suppressions, events,
webhooks), opens and clicks through the tracker's (`app.services.engagement.record`). The
task leaves after the commit that wrote the messages sent, on the provider's own lane, and
applies each message's reports in their order, one round a transaction, so the timeline
reads sent, then each report after the one before.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from functools import partial
from itertools import zip_longest
from typing import NamedTuple

import redis
from sqlalchemy.orm import Session, sessionmaker

from app.config import Settings, current_settings
from app.db import enqueue_after_commit, session_factory
from app.delivery import dispatch, store
from app.delivery.broker import celery_app
from app.enums import EventType
from app.redis_client import redis_for
from app.services import engagement, inbound
from providers.base import Outcome, SendResult
from providers.inbound.base import HARD, InboundEvent, Kind
from tasks import isolation

# What the tracker records rather than a status webhook: a reader's open and click.
TRACKED = {EventType.OPENED.value, EventType.CLICKED.value}


class Item(NamedTuple):
    """One report as the task carries it (JSON: a list of strings)."""

    message_id: str
    project_id: str
    provider_message_id: str
    kind: str
    url: str


def follow(
    session: Session, provider: str, priority: str, results: Sequence[SendResult], rows: Mapping[str, store.Claimed]
) -> None:
    """Publish the reports of the messages sent, once the transaction that writes them sent commits."""
    items = [
        Item(result.message_id, rows[result.message_id].project_id, result.provider_message_id or "", r.kind, r.url)
        for result in results
        if result.outcome is Outcome.SENT and result.message_id in rows
        for r in result.reports
    ]
    for signature in dispatch.reports(provider, priority, items):
        enqueue_after_commit(session, signature)


@celery_app.task(name="tidings.reports")
def apply_reports(provider: str, items: list[list[str]]) -> None:
    """Apply a batch's reports as the provider's status webhooks and the tracker would."""
    apply_all(current_settings(), provider, [Item(*item) for item in items])


def apply_all(config: Settings, provider: str, items: Sequence[Item]) -> None:
    """Round by round: every message's first report, then every second one, and so on. Each
    round goes through the door (tasks/isolation.py): a message whose report cannot be
    applied is left out alone, with the reason in the log, and so are its later reports."""
    by_message: dict[str, list[Item]] = defaultdict(list)
    for item in items:
        by_message[item.message_id].append(item)
    db = session_factory(config.database_url)
    client = redis_for(config.redis_url)
    with isolation.batch("reports", list(by_message), config=config, fail_alone=lambda *_: True) as run:
        for round_ in zip_longest(*by_message.values()):
            due = [item for item in round_ if item is not None and item.message_id not in run.failed]
            news = {item.message_id: item for item in due if item.kind not in TRACKED}
            run.in_halves(partial(record_news, db, client, provider, news), among=list(news))
            for item in due:
                if item.kind in TRACKED:  # counted where it lands: one at a time, never again in halves
                    track = partial(engagement.record, db, item.project_id, item.message_id, EventType(item.kind))
                    run.alone(item.message_id, partial(track, item.url))


def record_news(
    db: sessionmaker[Session], client: redis.Redis, provider: str, due: Mapping[str, Item], part: Sequence[str]
) -> None:
    """Apply the status reports of the messages in `part` in one transaction, as their
    provider's status webhooks would: a report applied before is a replay, a no-op."""
    inbound.record(db, client, provider, provider, None, [inbound_event(due[message_id]) for message_id in part])


def inbound_event(item: Item) -> InboundEvent:
    """The report as a status webhook's event; its key makes a repeated task a replay."""
    kind = Kind(item.kind)
    return InboundEvent(
        key=f"{item.message_id}:{item.kind}",
        kind=kind,
        name=item.kind,
        raw={"report": item.kind},
        provider_message_id=item.provider_message_id or None,
        message_id=item.message_id,
        bounce=HARD if kind is Kind.BOUNCED else None,
    )
