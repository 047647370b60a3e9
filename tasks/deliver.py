"""Deliver: wait out pauses and the provider's pace, let its circuit breaker decide, claim,
send in the adapter's batch size (per account; a push message to each of its devices,
tasks/devices.py), and finalise the batch in one statement."""

from __future__ import annotations

import logging
import random
import time
import uuid
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import redis
from celery import Task
from sqlalchemy.orm import Session

from app.config import MAX_COUNTDOWN, Settings, current_settings
from app.crypto import signing_key
from app.db import enqueue_after_commit, publish, session_scope
from app.delivery import adapters, device_store, dispatch, fairness, store, waiting_room
from app.delivery.breaker import CircuitBreakers
from app.delivery.broker import celery_app
from app.delivery.pacing import SLICES, WINDOW_MS, Held, ProviderPacer
from app.delivery.pauses import ProviderPauses
from app.delivery.queues import deliver_queue
from app.enums import Channel, MessageStatus, Priority
from app.observability.counters import increment
from app.redis_client import redis_for
from providers import registry
from providers.base import Attachment, Outbound, Outcome, Provider, ProviderError, SendResult
from tasks import attachments, devices, failover, follow_ups, instrument, isolation, kept_answers, reconnect, reports
from tasks.heartbeat import current_worker
from tasks.outcomes import PROVIDER_WIDE, SendRun, decide_all, events_for, settle_repeat, waiting_groups
from tasks.shutdown import stopping

logger = logging.getLogger(__name__)

# A misconfigured account needs a person; meanwhile the provider is retried this often.
CONFIGURATION_PAUSE_SECONDS = 300


@celery_app.task(name="tidings.deliver", bind=True)
def deliver(self: Task, provider: str, ids: list[str], priority: str = Priority.TRANSACTIONAL) -> None:
    """Send the ready messages among `ids` through `provider`.

    A paused provider or an exhausted pace sends the messages back to the broker with a
    countdown; neither uses an attempt. An open circuit hands them to the next provider of
    their channel. The database session is closed during the provider call, so a slow
    provider holds no connection and no row lock. A lost connection runs the task again
    within seconds (tasks/reconnect.py).
    """
    with reconnect.again_on_lost_connection(self):
        deliver_batch(current_settings(), provider, ids, priority)


@celery_app.task(name="tidings.deliver_next", bind=True)
def deliver_next(self: Task, provider: str, priority: str = Priority.BULK) -> None:
    """Deliver the ids whose projects' turn it is (app/delivery/fairness.py).

    On a paced provider the pace is asked first and only what it grants is taken, in turn,
    so projects waiting on it share its grants in turn; a token granted too little tries
    again later (`spread`): a campaign's thousand tokens do not all wake every second.
    Only rows still to send keep the pace's room: the sweeper dispatches rows that wait
    their turn long again, and a repeat must not spend the provider's rate on rows already sent.
    Ids taken whose run loses a connection go again as a deliver task of their own; a token
    that took none runs again itself (tasks/reconnect.py).
    """
    config = current_settings()
    client = redis_for(config.redis_url)
    taken: dict[str, str] = {}

    def again(wait: float) -> bool:
        return redeliver(provider, priority, list(taken), wait)

    with reconnect.again_on_lost_connection(self, again):
        rate = config.rates.get(provider)
        if rate is None:
            taken.update(
                fairness.owners(
                    fairness.withdraw(client, deliver_queue(provider, priority), dispatch.deliver_chunk(provider))
                )
            )
            owners, held = dict(taken), None
        else:
            owners, held = paced_turn(config, client, provider, priority, rate, taken=taken)
        if owners:
            deliver_batch(config, provider, list(owners), priority, owners, held)


def paced_turn(
    config: Settings,
    client: redis.Redis,
    provider: str,
    priority: str,
    rate: float,
    *,
    taken: dict[str, str] | None = None,
) -> tuple[dict[str, str], Held]:
    """The ids (→ project) the pace grants this token, taken in turn only once granted, so a
    project whose turn comes is never passed over for the pace, and the grant they hold;
    what a grant does not use goes back to the pace. A token granted less than a chunk comes back when the pace has
    room while its lane holds more. What it takes is in `taken` as soon as it has it, for a
    run that loses its connection to send again."""
    lane, size, grant_id = deliver_queue(provider, priority), dispatch.deliver_chunk(provider), uuid.uuid4().hex
    pacer = ProviderPacer(client)
    grant = pacer.acquire(provider, rate, size, grant_id)
    taken = {} if taken is None else taken
    taken.update(fairness.owners(fairness.withdraw(client, lane, grant.granted)) if grant.granted else {})
    owners = dict(taken)
    if owners:
        with session_scope(config.database_url) as session:
            kept = set(store.claimable(session, list(owners)))  # no grant for what a repeat finds done
        owners = {i: project for i, project in owners.items() if i in kept}
    pacer.give_back(provider, grant_id, granted=grant.granted, used=len(owners))
    if grant.granted < size and (waiting := fairness.waiting(client, lane)):
        publish(dispatch.deliver_token(provider, priority, grant.wait_seconds + spread(waiting, rate, size)))
        increment(client, "pacing_postponed", size - grant.granted, provider=provider)  # what it asked for and waits
    return owners, Held(provider, rate, grant_id, len(owners))


@celery_app.task(name="tidings.deliver_waiting", bind=True)
def deliver_waiting(self: Task, provider: str, priority: str) -> None:
    """Deliver a provider-sized batch of what waited out a pause or the pace together
    (app/delivery/waiting_room.py), at the provider's pace."""
    config = current_settings()
    client = redis_for(config.redis_url)
    with reconnect.again_on_lost_connection(self):
        ids = waiting_room.take(client, provider, priority, dispatch.deliver_chunk(provider))
    try:
        if ids:
            with reconnect.again_on_lost_connection(self, lambda wait: redeliver(provider, priority, ids, wait)):
                deliver_batch(config, provider, ids, priority)
    finally:
        waiting_room.release_more(client, provider, priority)


def redeliver(provider: str, priority: str, ids: Sequence[str], wait: float) -> bool:
    """Deliver tasks of their own, after `wait`, for `ids` that a run took from a list in
    Redis (a project's turn, a waiting room) and could not send for a lost connection;
    whether there were any."""
    for signature in dispatch.deliver(provider, priority, ids, wait):
        publish(signature)
    return bool(ids)


def spread(waiting: int, rate: float, chunk: int) -> float:
    """Seconds at random beyond the pace's wait for a token of a lane where `waiting` chunks
    wait: none while they are few enough for the pace to take at its next grants, else
    spread so that they wake about twice as often as the pace has room for a grant (a
    chunk, or a slice of the pace where a slice is less)."""
    room = 2 * max(rate / chunk, SLICES / (WINDOW_MS / 1000))
    return 0.0 if waiting <= room else random.uniform(0, waiting / room)


def deliver_batch(
    config: Settings,
    provider: str,
    ids: list[str],
    priority: str,
    owners: Mapping[str, str] | None = None,
    held: Held | None = None,
) -> None:
    """One batch, however it came, at the provider's pace: the grant it `held` if one was
    taken for it, else one taken here. A pause puts it off, back to its projects' turn where
    it has `owners` (id → project)."""
    client = redis_for(config.redis_url)
    paused_for = ProviderPauses(client).seconds_left(provider)
    if paused_for is not None:
        postpone(config, provider, priority, ids, paused_for, owners)
        increment(client, "pause_postponed", len(ids), provider=provider)
        return
    admitted = failover.admit(config, client, provider, priority, ids)
    runs: list[tuple[Sequence[store.Claimed], SendRun]] = []
    try:
        runs = send(config, client, provider, priority, admitted.ids, held)
    finally:
        # Once per batch, and always for a probe: it must give its place back whatever happened.
        if runs or admitted.probe:
            tallies = [run.tally() for _, run in runs]
            ok, failed = sum(t[0] for t in tallies), sum(t[1] for t in tallies)
            if registry.endpoint_per_message(provider):  # its receivers' failures are their own
                failed = 0
            entered = CircuitBreakers(client, config.breaker).record(provider, ok, failed, admitted.probe)
            if entered is not None:
                logger.warning("circuit of provider %s is now %s", provider, entered.value)
                increment(client, "breaker_transitions", provider=provider, state=entered.value)


def send(
    config: Settings, client: redis.Redis, provider: str, priority: str, ids: list[str], held: Held | None
) -> list[tuple[Sequence[store.Claimed], SendRun]]:
    """Pace (unless a grant is `held`), claim, stamp the grant, send and finalise; what each
    account of the provider said. The grant is stamped once the rows are claimed, so the
    pace counts it from about when its request reaches the provider (app/delivery/pacing.py)."""
    rate = config.rates.get(provider)
    if held is None and rate is not None and ids:
        grant_id = uuid.uuid4().hex
        grant = ProviderPacer(client).acquire(provider, rate, len(ids), grant_id)
        if grant.granted < len(ids):
            postpone(config, provider, priority, ids[grant.granted :], grant.wait_seconds)
            increment(client, "pacing_postponed", len(ids) - grant.granted, provider=provider)
        ids = ids[: grant.granted]
        held = Held(provider, rate, grant_id, grant.granted) if ids else None
    if not ids:
        return []
    fail = isolation.fail_message(config, "deliver", MessageStatus.READY)
    with isolation.batch(
        "deliver", ids, config=config, redispatch=lambda part: one_per_task(provider, priority, part), fail_alone=fail
    ) as run:
        if not run.ids:
            return []
        with session_scope(config.database_url) as session:
            claimed = in_order(store.claim(session, provider, run.ids, current_worker(), str(uuid.uuid4())))
            files, known = materials(session, claimed)
        if held is not None and claimed:  # the claim committed: the call is next
            ProviderPacer(client).stamp(held)
        run.took(row.id for row in claimed)  # the rest are not this run's to count: another run's, or done
        return send_claimed(config, client, provider, priority, claimed, files, known)


def in_order(claimed: Sequence[store.Claimed]) -> list[store.Claimed]:
    """Claimed rows by id: a claim sent again (tasks/resend.py) then makes the very same
    provider calls, which is what lets a provider's idempotency key recognise them."""
    return sorted(claimed, key=lambda row: row.id)


def materials(
    session: Session, claimed: Sequence[store.Claimed]
) -> tuple[dict[str, Attachment], Sequence[device_store.Device]]:
    """What sending the claimed rows needs besides them: their files, and their push devices."""
    files = attachments.load(session, claimed)
    return files, device_store.of_messages(session, [row.id for row in claimed if row.channel == Channel.PUSH])


def send_claimed(
    config: Settings,
    client: redis.Redis,
    provider: str,
    priority: str,
    claimed: Sequence[store.Claimed],
    files: Mapping[str, Attachment],
    known: Sequence[device_store.Device],
    repeat: bool = False,
) -> list[tuple[Sequence[store.Claimed], SendRun]]:
    """Send what this run claimed (`known`: the devices of its push messages), and write
    each message's fate and each device's. Returns what the provider said, per device. A
    `repeat` of an abandoned claim's calls settles what was neither sent nor refused as
    `unknown` (tasks/outcomes.py), never as a retry in some other call."""
    if not claimed:
        return []
    units = devices.expand(claimed, known)
    runs = send_by_account(config, client, provider, units, files)
    folded = devices.fold(runs, claimed, known, config.max_attempts)
    outcomes = decide_all(config, folded.runs)
    if repeat:
        outcomes = settle_repeat(outcomes)
    rows = {row.id: row for row in claimed}
    sent_as = {unit.id: unit for unit in units}
    results = [r for _, run in runs for r in run.results]
    applied: dict[str, dict[str, Any]] = {}
    written: set[str] = set()  # what is in PostgreSQL already, should the rest be written again

    broken = False

    def finish(part: Sequence[str]) -> None:
        """Write the fates of `part` in one transaction (tasks/isolation.py halves it on a poison)."""
        nonlocal broken
        if len(part) < len(outcomes) - len(written) and not broken:  # halved: the calls cannot be rebuilt
            with session_scope(config.database_url) as session:
                store.break_claim(session, [o.message_id for o in outcomes])
            broken = True
        wanted = set(part)
        mine = [o for o in outcomes if o.message_id in wanted]
        answers = [r for r in results if folded.owner.get(r.message_id) in wanted]
        with session_scope(config.database_url) as session:
            store.finalise(session, mine, current_worker())
            done = follow_ups.apply(session, answers, sent_as)
            devices.settle(session, folded, wanted, done)
            store.record_events(session, events_for(mine, rows, {**done, **folded.summaries}))
            reports.follow(session, provider, priority, answers, rows)
            for countdown, group in waiting_groups(mine):
                for signature in dispatch.deliver(provider, priority, [o.message_id for o in group], countdown):
                    enqueue_after_commit(session, signature)
        applied.update(done)
        written.update(wanted)

    fail = isolation.fail_message(config, "finalise", MessageStatus.SENDING)

    def write() -> None:
        """Write what is not written yet through the door; a poison fails alone, and is written too."""
        left = [o.message_id for o in outcomes if o.message_id not in written]
        with isolation.batch("finalise", left, config=config, fail_alone=fail) as door:
            try:
                door.in_halves(finish)
            finally:
                written.update(door.failed)

    def keep(key: str, until: float) -> kept_answers.Kept:
        """What is not written yet, as the sweeper would write it should this process die."""
        left = [o for o in outcomes if o.message_id not in written]
        events = events_for(left, rows, folded.summaries)
        return kept_answers.Kept(key, current_worker(), tuple(left), tuple(events), until)

    kept_answers.write_or_keep(client, write, keep)
    for follow_up, count in Counter(entry["follow_up"] for entry in applied.values()).items():
        increment(client, "delivery_follow_ups", count, provider=provider, follow_up=follow_up)
    instrument.delivered(client, provider, claimed, outcomes, [s for _, run in runs for s in run.call_seconds])
    return runs


def send_by_account(
    config: Settings,
    client: redis.Redis,
    provider: str,
    claimed: Sequence[store.Claimed],
    files: Mapping[str, Attachment],
) -> list[tuple[Sequence[store.Claimed], SendRun]]:
    """Send each account's messages through its adapter; a pause applies to that account only."""
    pauses = ProviderPauses(client)
    runs: list[tuple[Sequence[store.Claimed], SendRun]] = []
    for account, rows in adapters.accounts_for(config, provider, claimed):
        paused_for = pauses.seconds_left(account.scope) if account.own else None
        if paused_for is not None:
            run = SendRun(unsent=list(rows), paused_for=paused_for)
        else:
            run = send_all(account.adapter, rows, files)
        if run.pause is not None:
            seconds, cause, reason = run.pause
            pauses.pause(account.scope, seconds, reason)
            increment(client, "provider_pauses", provider=provider, cause=cause)
        runs.append((rows, run))
    return runs


def one_per_task(provider: str, priority: str, ids: Sequence[str]) -> None:
    """Messages of a run that died, one per task: the one that kills its worker dies alone."""
    for signature in dispatch.deliver(provider, priority, ids, size=1):
        publish(signature)


def postpone(
    config: Settings,
    provider: str,
    priority: str,
    ids: Sequence[str],
    wait: float,
    owners: Mapping[str, str] | None = None,
) -> None:
    """Send `ids` again after `wait`, and tell the sweeper not to expect them sooner: first
    in their projects' turn where they have `owners` (id → project), else in their lane's
    waiting room, to leave with whatever else waited there in provider-sized batches."""
    countdown = min(max(wait, 0.05), MAX_COUNTDOWN)
    with session_scope(config.database_url) as session:
        store.expect_ready_by(session, ids, countdown)
        if owners is None:
            enqueue_after_commit(session, waiting_room.WaitingIds(provider, priority, ids, countdown))
        else:
            by_project: dict[str, list[str]] = {}
            for message_id in ids:
                by_project.setdefault(owners[message_id], []).append(message_id)
            for signature in dispatch.deliver_in_turn(provider, priority, by_project, countdown):
                enqueue_after_commit(session, signature)


def send_all(adapter: Provider, claimed: Sequence[store.Claimed], files: Mapping[str, Attachment]) -> SendRun:
    run = SendRun()
    for start in range(0, len(claimed), adapter.max_batch):
        chunk = claimed[start : start + adapter.max_batch]
        run.stopped = run.stopped or stopping()
        if run.pause is not None or run.stopped:
            run.unsent.extend(chunk)
            continue
        started = time.monotonic()
        results = send_chunk(adapter, chunk, files)
        run.call_seconds.append(time.monotonic() - started)
        run.results.extend(results)
        stopper = next((r for r in results if r.outcome in PROVIDER_WIDE), None)
        if stopper is not None:
            run.pause = pause_for(stopper)
    return run


def send_chunk(adapter: Provider, chunk: Sequence[store.Claimed], files: Mapping[str, Attachment]) -> list[SendResult]:
    """Send one provider batch; a message that cannot be built fails alone, and a failure of
    the whole call becomes a result per message."""
    built: list[Outbound] = []
    unbuilt: list[SendResult] = []
    for row in chunk:
        try:
            built.append(outbound(row, files))
        except Exception as error:
            reason = f"could not be built for the provider: {type(error).__name__}: {error}"
            unbuilt.append(SendResult(row.id, Outcome.PERMANENT, error=reason))
    if not built:
        return unbuilt
    try:
        return unbuilt + adapter.send(built)
    except ProviderError as error:
        return unbuilt + [SendResult.from_error(message.message_id, error) for message in built]
    except Exception as error:
        logger.exception("provider %s raised unexpectedly", adapter.name)
        detail = f"{type(error).__name__}: {error}"
        return unbuilt + [SendResult(message.message_id, Outcome.TRANSIENT, error=detail) for message in built]


def pause_for(result: SendResult) -> tuple[float, str, str]:
    if result.outcome is Outcome.RATE_LIMITED:
        return result.retry_after or 1.0, "rate_limited", f"provider asked to wait: {result.error}"
    return CONFIGURATION_PAUSE_SECONDS, "configuration", f"configuration error: {result.error}"


def outbound(row: store.Claimed, files: Mapping[str, Attachment]) -> Outbound:
    webhook = row.webhook_project or {"signing_secrets": (), "allowed_networks": None}
    return Outbound(
        message_id=row.id,
        channel=row.channel,
        to=row.to_address,
        subject=row.subject,
        text=row.text,
        html=row.html,
        metadata=row.metadata or {},
        data=row.payload,
        from_address=row.from_address,
        reply_to=row.reply_to,
        headers=row.headers or {},
        cc=row.cc,
        attachments=tuple(files[file_id] for file_id in row.attachment_ids or ()),
        signing_keys=tuple(None if secret is None else signing_key(secret) for secret in webhook["signing_secrets"]),
        allowed_networks=webhook["allowed_networks"] or (),
    )
