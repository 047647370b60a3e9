"""Resend: an abandoned claim of a provider that de-duplicates a repeated call, sent again as that call.

A worker that died mid-call may or may not have reached the provider. Where the provider
recognises a repeated request (an idempotency key over the request, as Resend's), the
same messages sent again as the same calls are answered, not delivered twice; a message
alone, or in another grouping, would be a new request. So the sweeper hands a dead
worker's claim back whole (tasks/maintenance.py) and this task takes it over and sends it
through the same path as the first run: the same rows in the same order (the claim's ids,
sorted) make the same calls with the same keys. No pace is asked for it: the provider has
most likely counted these calls already.

What the repeat leaves unsettled (a timeout, a 5xx, a 429) becomes `unknown`: only the
same call is safe to repeat, and a retry would make another. A claim whose resends died
too is not sent a third time: its messages become `unknown` and wait for the provider's word.
"""

from __future__ import annotations

from collections.abc import Sequence

from app.config import MAX_COUNTDOWN, Settings, current_settings
from app.db import publish, session_scope
from app.delivery import dispatch, store
from app.delivery.broker import celery_app
from app.delivery.pauses import ProviderPauses
from app.enums import MessageStatus
from app.redis_client import redis_for
from tasks import isolation
from tasks.deliver import in_order, materials, send_claimed
from tasks.heartbeat import current_worker
from tasks.outcomes import events_for

# Deaths of one claim's runs (its first run and a resend) after which it is not sent again.
RUNS_DIED = 2
GAVE_UP = "its worker died during the provider call, and again when the same call was made again"


@celery_app.task(name="tidings.resend")
def resend(provider: str, claim_id: str, priority: str) -> None:
    config = current_settings()
    client = redis_for(config.redis_url)
    paused_for = ProviderPauses(client).seconds_left(provider)
    if paused_for is not None:  # a repeat refused for a 429 would leave it unknown for nothing
        publish(dispatch.resend(provider, priority, claim_id).set(countdown=min(paused_for, MAX_COUNTDOWN)))
        return
    with session_scope(config.database_url) as session:
        claimed = in_order(store.take_over(session, claim_id, current_worker()))
        files, known = materials(session, claimed)
    if not claimed:
        return  # taken over by a resend before this one, or not yet handed back whole
    ids = [row.id for row in claimed]
    deaths = isolation.UnfinishedRuns(client, "deliver")  # the first run's death is counted there
    try:
        if deaths.start(ids) >= RUNS_DIED:
            give_up(config, claimed)
        else:
            send_claimed(config, client, provider, priority, claimed, files, known, repeat=True)
    finally:
        deaths.finish(ids)


def give_up(config: Settings, claimed: Sequence[store.Claimed]) -> None:
    """The claim's messages as `unknown`, each with the event that says why."""
    outcomes = [store.Finalised(row.id, MessageStatus.UNKNOWN, error=GAVE_UP) for row in claimed]
    with session_scope(config.database_url) as session:
        store.finalise(session, outcomes, current_worker())
        store.record_events(session, events_for(outcomes, {row.id: row for row in claimed}, {}))
