"""Beat work: release what has come due, and re-dispatch what stopped moving.

PostgreSQL is the truth and a broker message may be lost (a Redis restart, a publish that
failed after commit); these two tasks are what guarantees every committed row moves on.
Both lock with SKIP LOCKED, so two beat processes never release the same row twice.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Sequence
from functools import partial

import redis
from sqlalchemy import Row, text
from sqlalchemy.orm import Session

from app.changed_rows import changed_rows
from app.config import Settings, current_settings
from app.db import enqueue_after_commit, publish, session_scope
from app.delivery import dispatch, heartbeats, store
from app.delivery.adapters import provider_instance
from app.delivery.broker import celery_app
from app.delivery.queues import active_providers
from app.enums import EventType
from app.observability.counters import increment
from app.redis_client import redis_for
from providers import registry
from tasks import isolation, kept_answers, workflows
from tasks.heartbeat import current_worker

logger = logging.getLogger(__name__)

BATCH = 5000
# Providers retry a webhook for a few days at most (SendGrid up to 72 hours); a receipt kept
# twice as long as the longest still turns any replay into a no-op.
RECEIPT_DAYS = 14
# `retrying` rows are normally picked up by their countdown task; this grace keeps
# release_due from racing it and only catches parked or lost ones.
RETRY_GRACE_SECONDS = 10
ABANDONED = "the worker stopped during the provider call"


@celery_app.task(name="tidings.release_due")
def release_due() -> dict[str, int]:
    """Scheduled messages whose time has come → prepare; parked retries → deliver.

    A scheduled message is due at its quiet-hours release (`next_attempt_at`) when it was
    held, else at the time the client asked for.
    """
    with session_scope(current_settings().database_url) as session:
        scheduled = session.execute(
            text(
                """
                UPDATE messages SET status = 'accepted', next_attempt_at = NULL, updated_at = now()
                WHERE id IN (SELECT id FROM messages
                             WHERE status = 'scheduled' AND COALESCE(next_attempt_at, scheduled_at) <= now()
                             ORDER BY COALESCE(next_attempt_at, scheduled_at) LIMIT :batch
                             FOR UPDATE SKIP LOCKED)
                RETURNING id::text, project_id, priority
                """
            ),
            {"batch": BATCH},
        ).all()
        enqueue_prepare(session, scheduled)
        retries = session.execute(
            text(
                """
                UPDATE messages SET status = 'ready', next_attempt_at = NULL, updated_at = now()
                WHERE id IN (SELECT id FROM messages
                             WHERE status = 'retrying'
                               AND next_attempt_at <= now() - make_interval(secs => :grace)
                             ORDER BY next_attempt_at LIMIT :batch FOR UPDATE SKIP LOCKED)
                RETURNING id::text, project_id, provider, priority
                """
            ),
            {"batch": BATCH, "grace": RETRY_GRACE_SECONDS},
        ).all()
        enqueue_deliver(session, retries)
        runs = workflows.release_parked(session)
    return {"scheduled": len(scheduled), "retries": len(retries), "workflow_runs": runs}


@celery_app.task(name="tidings.sweep")
def sweep() -> dict[str, int]:
    """Settle the claims of workers that died, re-dispatch rows whose task was lost, and
    forget webhook receipts too old to be replayed.

    A worker is dead when its heartbeat stopped (app/delivery/heartbeats.py), so its claims
    are settled within seconds; a claim older than CLAIM_TIMEOUT_SECONDS is settled whoever
    holds it, should heartbeats be unavailable. Such a claim may or may not have reached
    the provider. Where the provider de-duplicates our message id, it is sent again in any
    call; where it de-duplicates a repeated request, as the very same calls (tasks/resend.py);
    elsewhere it becomes `unknown` rather than risk a second delivery. The rows a dead
    worker had taken but not yet claimed have not moved since it died: those are dispatched
    again at once, not after STALLED_AFTER_SECONDS, and every chunk waiting in a lane gets a
    token, for the tokens it held took none of their own. Before any of that, the provider's
    answers a worker kept while the database was away are written (tasks/kept_answers.py):
    a claim whose answers are known is never abandoned.
    """
    config = current_settings()
    client = redis_for(config.redis_url)
    dead = silent_workers(config, client)
    written, held = write_kept_answers(config, client, [d.worker for d in dead])
    with session_scope(config.database_url) as session:
        stalled = redispatch_stalled(session, stalled_for(config, dead))
        fanouts = redispatch_stalled_fanouts(session, config.stalled_after)
        runs = workflows.redispatch_stalled(session, config.stalled_after)
        abandoned = settle_abandoned(session, config, [d.worker for d in dead], held)
        prune_receipts(session)
    if dead:
        restart_lanes(config, client)
    if len(abandoned) < BATCH:  # else the dead may hold more claims, for the next sweep
        heartbeats.forget(client, [d.worker for d in dead])
    counts = {
        "answers_written": written,
        "redispatched": len(stalled),
        "retried": sum(r.status == "ready" for r in abandoned),
        "resent": sum(r.status == "sending" for r in abandoned),
        "unknown": sum(r.status == "unknown" for r in abandoned),
    }
    for outcome, count in counts.items():
        increment(client, "sweeper_recovered", count, outcome=outcome)
    if any(counts.values()) or dead:
        logger.warning("sweep: %s; silent workers: %s", counts, [d.worker for d in dead])
    return {**counts, "silent_workers": len(dead), "fanouts": len(fanouts), "workflow_runs": runs}


# Rows moved this recently are left out of a reconnect's dispatch: another worker's reconnect
# just dispatched them, or their task was published since the broker came back.
JUST_MOVED_SECONDS = 1.0
# A reconnect dispatches at most this many batches of rows; what is left is the sweeper's.
RECONNECT_BATCHES = 20


@celery_app.task(name="tidings.redispatch_waiting")
def redispatch_waiting() -> int:
    """Every accepted and ready row not put off to later → its next task again: what a
    worker asks for when its broker came back (tasks/reconnect.py), since the broker may
    have lost their tasks. How many rows."""
    config = current_settings()
    total = 0
    for _ in range(RECONNECT_BATCHES):
        with session_scope(config.database_url) as session:
            moved = len(redispatch_stalled(session, JUST_MOVED_SECONDS))
        total += moved
        if moved < BATCH:
            break
    restart_lanes(config, redis_for(config.redis_url))
    logger.warning("dispatched %d waiting rows again after a reconnect", total)
    return total


def silent_workers(config: Settings, client: redis.Redis) -> list[heartbeats.Silent]:
    """The worker processes that stopped beating; none while Redis cannot say, which leaves
    their claims to the claim timeout. This process beats too, so that its own heartbeat is
    among those the silent are measured against."""
    try:
        current_worker()
        return heartbeats.silent(client, config.worker_dead_after)
    except redis.RedisError as error:
        logger.warning("heartbeats unavailable, claims wait for the claim timeout: %s", error)
        return []


def write_kept_run(config: Settings, run: kept_answers.Kept) -> int:
    with session_scope(config.database_url) as session:
        return kept_answers.write(session, run)


def write_kept_answers(config: Settings, client: redis.Redis, dead: Sequence[str]) -> tuple[int, list[str]]:
    """Write the answers kept by `dead` workers, or by live ones that gave up trying
    (tasks/kept_answers.py), each run in its own transaction: how many messages they
    settled, and the messages whose answers a live worker still holds, which are not
    abandoned. None of either while Redis cannot say."""
    try:
        kept = kept_answers.all_kept(client)
    except redis.RedisError as error:
        logger.warning("kept answers unavailable: %s", error)
        return 0, []
    now = time.time()
    due = [k for k in kept if k.worker in dead or k.until < now]
    written = 0
    # Through the door: a run whose answers the database refuses on their own account fails
    # alone (its messages are left to the claim timeout), not every sweep after it.
    with isolation.batch("kept_answers", [k.key for k in due], config=config, fail_alone=lambda *_: True) as door:
        for run in due:
            written += door.alone(run.key, partial(write_kept_run, config, run)) or 0
    kept_answers.forget(client, [k.key for k in due])
    return written, [i for k in kept if k.worker not in dead and k.until >= now for i in k.message_ids()]


def stalled_for(config: Settings, dead: Sequence[heartbeats.Silent]) -> float:
    """Seconds a row must have stood still to be dispatched again: STALLED_AFTER_SECONDS, or
    less when a worker died, so that its rows go again now: those still since one beat after
    the last beat of the most recent of the dead (it was alive then)."""
    if not dead:
        return config.stalled_after
    since_death = min(d.seconds for d in dead) - config.worker_heartbeat
    return max(min(since_death, config.stalled_after), config.worker_heartbeat)


def restart_lanes(config: Settings, client: redis.Redis) -> None:
    """A token for every chunk waiting in a lane, after a worker died or the broker was lost
    with the tokens they held (app/delivery/dispatch.py `tokens_for_waiting`)."""
    for token in dispatch.tokens_for_waiting(client, active_providers(config)):
        publish(token)


def redispatch_stalled(session: Session, seconds: float) -> Sequence[Row]:
    """Accepted and ready rows untouched for `seconds` (their task was lost) → their next task."""
    stalled = session.execute(
        text(
            """
            UPDATE messages SET updated_at = now(), next_attempt_at = NULL
            WHERE id IN (SELECT id FROM messages
                         WHERE status IN ('accepted', 'ready')
                           AND COALESCE(next_attempt_at, updated_at) < now() - make_interval(secs => :stalled)
                         LIMIT :batch FOR UPDATE SKIP LOCKED)
            RETURNING id::text, project_id, status, provider, priority
            """
        ),
        {"batch": BATCH, "stalled": seconds},
    ).all()
    enqueue_prepare(session, [r for r in stalled if r.status == "accepted"])
    enqueue_deliver(session, [r for r in stalled if r.status == "ready"])
    return stalled


def redispatch_stalled_fanouts(session: Session, seconds: float) -> list[Row]:
    """Topic sends and topic triggers whose fan-out made no progress for `seconds` (its task
    was lost) → their next task."""
    batches = stalled_fanouts(session, "batches", seconds)
    for row in batches:
        enqueue_after_commit(session, dispatch.fan_out(str(row.id), row.priority))
    triggers = stalled_fanouts(session, "workflow_triggers", seconds)
    for row in triggers:
        enqueue_after_commit(session, dispatch.workflow_fan_out(str(row.id)))
    return [*batches, *triggers]


def stalled_fanouts(session: Session, table: str, seconds: float) -> Sequence[Row]:
    """The rows of `table` (batches, workflow_triggers) whose fan-out stalled, marked as moving again."""
    return session.execute(
        text(
            f"""
            UPDATE {table} SET fanout_at = now()
            WHERE id IN (SELECT id FROM {table}
                         WHERE topic IS NOT NULL AND fanout_done_at IS NULL
                           AND fanout_at < now() - make_interval(secs => :stalled)
                         LIMIT :batch FOR UPDATE SKIP LOCKED)
            RETURNING *
            """
        ),
        {"batch": BATCH, "stalled": seconds},
    ).all()


def settle_abandoned(
    session: Session, config: Settings, dead: Sequence[str], held: Sequence[str] = ()
) -> Sequence[Row]:
    """Claims of the `dead` workers, claims older than the claim timeout, and claims handed
    back for a resend that no resend took up; never the `held` messages, whose answers a
    live worker keeps (tasks/kept_answers.py). Where the provider de-duplicates a message
    sent again in any call, it goes back to `ready`; where it de-duplicates a call made
    again exactly, the claim is handed back whole, still `sending`, to tasks/resend.py;
    elsewhere it becomes `unknown`. A claim whose run is forgotten (store.break_claim)
    cannot be made again as its calls, so there it becomes `unknown` too.
    """
    abandoned = session.execute(
        text(
            """
            WITH taken AS (
                SELECT id, CASE WHEN provider = ANY(:idempotent) THEN 'ready'
                                WHEN provider = ANY(:repeatable) AND claim_id IS NOT NULL THEN 'sending'
                                ELSE 'unknown' END AS next
                FROM messages
                WHERE status = 'sending' AND id <> ALL(CAST(:held AS uuid[]))
                  AND (claimed_by = ANY(:dead)
                       OR claimed_at < now() - make_interval(secs => :timeout)
                       OR (claimed_by = :handed_back AND claimed_at < now() - make_interval(secs => :stalled)))
                LIMIT :batch FOR UPDATE SKIP LOCKED
            )
            UPDATE messages m
            SET status = taken.next,
                claimed_by = CASE WHEN taken.next = 'sending' THEN :handed_back ELSE m.claimed_by END,
                claimed_at = CASE WHEN taken.next = 'sending' THEN now() ELSE m.claimed_at END,
                error = :reason, updated_at = now()
            FROM taken WHERE m.id = taken.id
            RETURNING m.id::text, m.project_id, m.status, m.provider, m.priority, m.attempts, m.claim_id::text
            """
        ),
        {
            "batch": BATCH,
            "dead": list(dead),
            "held": list(held),
            "timeout": config.claim_timeout,
            "stalled": config.stalled_after,
            "handed_back": store.HANDED_BACK,
            "idempotent": idempotent_providers(config),
            "repeatable": [p for p in active_providers(config) if registry.deduplicates_calls(p)],
            "reason": ABANDONED,
        },
    ).all()
    store.record_events(session, [abandoned_event(row) for row in abandoned])
    enqueue_deliver(session, [r for r in abandoned if r.status == "ready"])
    for provider, priority, claim_id in sorted(
        {(r.provider, r.priority, r.claim_id) for r in abandoned if r.status == "sending"}
    ):
        enqueue_after_commit(session, dispatch.resend(provider, priority, claim_id))
    return abandoned


def prune_receipts(session: Session) -> int:
    """Forget the keys of provider events older than any retry of them could be."""
    return changed_rows(
        session,
        text(
            """
            DELETE FROM inbound_receipts WHERE ctid IN (
                SELECT ctid FROM inbound_receipts
                WHERE received_at < now() - make_interval(days => :days) LIMIT :batch)
            """
        ),
        {"days": RECEIPT_DAYS, "batch": BATCH},
    )


def idempotent_providers(config: Settings) -> list[str]:
    return [name for name in active_providers(config) if provider_instance(name).idempotent]


# What an abandoned message's event says, by the status the sweeper gave it.
ABANDONED_EVENTS = {
    "ready": (EventType.RETRYING, ABANDONED),
    "sending": (EventType.RETRYING, f"{ABANDONED}; it is sent again as the same call"),
    "unknown": (EventType.UNKNOWN, ABANDONED),
}


def abandoned_event(row: Row) -> store.NewEvent:
    kind, reason = ABANDONED_EVENTS[row.status]
    return store.NewEvent(row.id, row.project_id, kind, {"attempt": row.attempts, "reason": reason})


def enqueue_prepare(session: Session, rows: Sequence[Row]) -> None:
    """Per priority and project: bulk work goes back to its project's turn (app/delivery/fairness.py)."""
    by_lane: dict[tuple[str, str], list[str]] = defaultdict(list)
    for row in rows:
        by_lane[(row.priority, row.project_id)].append(row.id)
    for (priority, project), ids in by_lane.items():
        for signature in dispatch.prepare(ids, priority, project=project):
            enqueue_after_commit(session, signature)


def enqueue_deliver(session: Session, rows: Sequence[Row]) -> None:
    """Per lane and project: one project's poison never shares a deliver task with another's
    rows, so it can neither roll them back nor hold them up; bulk work goes back to its
    project's turn."""
    by_lane: dict[tuple[str, str, str], list[str]] = defaultdict(list)
    for row in rows:
        by_lane[(row.provider, row.priority, row.project_id)].append(row.id)
    for (provider, priority, project), ids in by_lane.items():
        for signature in dispatch.deliver(provider, priority, ids, project=project):
            enqueue_after_commit(session, signature)
