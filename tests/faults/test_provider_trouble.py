"""A provider that pushes back: 429 pauses, 503 storms, and lanes under load (the shared pace:
test_pace_at_provider.py)."""

from __future__ import annotations

import itertools
import time
from collections import Counter
from dataclasses import dataclass

from sqlalchemy import text

from app.delivery.retry import LADDER_SECONDS
from tests.faults.stack import FAST_RECOVERY, assert_ledger_agrees, insert_accepted, statuses, wait_until_terminal
from tests.provider_server import MESSAGES_PATH, Call, json_response
from tests.waiting import wait_until

CONCURRENCY = 2  # each worker's threads in the 429 test
PAUSE_SECONDS = 5  # the 429's Retry-After


def test_429_pauses_the_provider_for_everyone_without_using_attempts(make_stack, provider, engine, fault_project):
    """Two worker processes; the provider answers 429 to whichever calls first, and from then
    until the pause ends tells only that one: the other learns of the pause from Redis or not at
    all, so a pause kept per process would let it go on sending through the pause."""
    told: list[tuple[str, float]] = []  # (the worker told, when)

    def rate_limited_for_five_seconds(request):
        sender = MESSAGES_PATH.match(request.path)["sender"]
        now = time.time()
        if not told:
            told.append((sender, now))
        if sender == told[0][0] and now < told[0][1] + PAUSE_SECONDS:
            return json_response({"error": "slow down"}, status=429, headers={"Retry-After": str(PAUSE_SECONDS)})
        return None

    provider.override = rate_limited_for_five_seconds
    stack = make_stack()
    # Both workers up before there is work: the first would otherwise take it all while the second boots.
    stack.start_worker("one", "--concurrency", str(CONCURRENCY))
    stack.start_worker("two", "--concurrency", str(CONCURRENCY))
    ids = insert_accepted(engine, fault_project, 1500)
    sms_ids = insert_sms(engine, fault_project, 20)
    stack.start_beat()
    # Transactional: its deliver tasks go to whichever worker is free, not in the project's turn
    # as a bulk lane's do, so the worker not told has work it could send through the pause.
    stack.publish_prepare(ids, priority="transactional")
    wait_until(lambda: len(told), bool, 30, "the provider's first 429", 0.01)
    told_worker, first_429 = told[0]
    pause_ends = first_429 + PAUSE_SECONDS
    at_429 = dict(Counter(statuses(engine, ids).values()))
    stack.publish_prepare(sms_ids, priority="transactional")
    other_provider = wait_until_terminal(engine, sms_ids, timeout=10)
    other_provider_done = time.time()
    seen = wait_until_terminal(engine, ids, timeout=60)
    tally = assert_ledger_agrees(ids, seen, provider)
    tally.report("429 for 5 s to one of two workers", at_429)
    assert tally.outcomes == {"sent": len(ids)}
    # Once the first 429 was answered, only runs already past their look at the pause may
    # call before it ends: at most one per thread of each worker. The worker told is told
    # again by each; the other one is answered, and would go on sending had it not seen the pause.
    answered = next(c.ended for c in provider.calls if c.status == 429)
    late = [c for c in provider.calls if answered <= c.started < pause_ends]
    by_worker = {name: [c for c in late if c.sender == name] for name in ("one", "two")}
    assert all(len(calls) <= CONCURRENCY for calls in by_worker.values()), late
    assert {c.status for c in by_worker[told_worker]} <= {429}, late
    assert set(other_provider.values()) == {"sent"}
    assert other_provider_done < pause_ends  # the other provider's messages did not wait for the pause
    with engine.connect() as connection:
        attempts = (
            connection.execute(
                text("SELECT DISTINCT attempts FROM messages WHERE id = ANY(CAST(:ids AS uuid[]))"), {"ids": ids}
            )
            .scalars()
            .all()
        )
    assert attempts == [1]


def insert_sms(engine, project_id: str, count: int) -> list[str]:
    with engine.begin() as connection:
        return list(
            connection.execute(
                text(
                    """
                    WITH new AS (
                        INSERT INTO messages (project_id, channel, status, priority, to_address)
                        SELECT :project, 'sms', 'accepted', 'transactional', '+4915112345' || lpad(g::text, 3, '0')
                        FROM generate_series(1, :count) AS g RETURNING id
                    )
                    INSERT INTO message_contents (message_id, text) SELECT id, 'Your code is 1234' FROM new
                    RETURNING message_id::text
                    """
                ),
                {"project": project_id, "count": count},
            ).scalars()
        )


STORM_SECONDS = 3.0  # from the first call, by the provider's clock
STORM_ATTEMPTS = 5
# How unlikely a failed call's retries may come too early and the test still fail: see retry_gaps.
FALSE_ALARM = 1e-6


def test_503_storm_backs_off_along_the_ladder_and_every_message_ends_sent(make_stack, provider, engine, fault_project):
    numbers = itertools.count(1)
    storm: list[float] = []

    def every_other_call_fails_while_the_storm_lasts(request):
        number, now = next(numbers), time.time()
        if not storm:
            storm.append(now + STORM_SECONDS)
        if now < storm[0] and number % 2 == 0:
            return json_response({"error": "unavailable"}, status=503)
        return None

    provider.latency = 0.02
    provider.override = every_other_call_fails_while_the_storm_lasts
    stack = make_stack(MAX_ATTEMPTS=str(STORM_ATTEMPTS))
    stack.start_beat()
    stack.start_worker()
    # Made only now, so the sweeper does not take them for stalled and send them its own way.
    ids = insert_accepted(engine, fault_project, 1000)
    stack.publish_prepare(ids)
    seen = wait_until_terminal(engine, ids, timeout=120)
    tally = assert_ledger_agrees(ids, seen, provider)
    gaps = retry_gaps(provider.calls, float(FAST_RECOVERY["RETRY_DELAY_SCALE"]))
    early = [gap for gap in gaps if gap.seconds < gap.floor]
    failed = [c for c in provider.calls if c.status == 503]
    tally.report(
        "503 storm",
        {
            "storm": f"every other call 503 for {STORM_SECONDS:g} s from the first",
            "calls failed": len(failed),
            "retries checked": len(gaps),
            "smallest gap/step": smallest_ratio(gaps),
        },
    )
    assert tally.outcomes == {"sent": len(ids)}, "the storm ended, so every message must have gone"
    assert failed and len(gaps) == sum(len(c.message_ids) for c in failed), "a failed message was never tried again"
    assert early == [], f"{len(early)} retries came sooner than the ladder allows: {early[:5]}"
    assert any(gap.floor >= gap.step / 2 for gap in gaps), "no failed call was large enough to bound its retries"
    assert max(provider.appearances()[i] for i in ids) <= STORM_ATTEMPTS
    assert len(provider.receipts) < 2 * len(ids)


@dataclass(frozen=True)
class Gap:
    """A message's wait between a failed call and its next, against the ladder's step."""

    message_id: str
    attempt: int
    seconds: float
    step: float
    floor: float


def retry_gaps(calls: list[Call], scale: float) -> list[Gap]:
    """Every retry after a failed call, with the least wait the retry policy allows it.

    After failed attempt k a message waits a uniform draw up to the ladder's step k, times
    `scale` (app/delivery/retry.py); the messages of one run that retry soon share the
    latest of their draws (tasks/outcomes.py align_short_retries). So a call of n messages
    that failed is tried again after the largest of n draws at least, and that is below a
    fraction f of the smallest step among them with probability at most f**n: the floor
    is the f for which that is FALSE_ALARM. A single message may retry at once; a hundred
    may not.
    """
    seen: Counter[str] = Counter()
    next_call: dict[tuple[str, int], float] = {}
    attempts: dict[int, dict[str, int]] = {}
    for call in sorted(calls, key=lambda c: c.started):
        attempts[call.number] = {}
        for message_id in call.message_ids:
            seen[message_id] += 1
            attempts[call.number][message_id] = seen[message_id]
            next_call[message_id, seen[message_id] - 1] = call.started
    gaps = []
    for call in calls:
        if call.status != 503:
            continue
        numbers = attempts[call.number]
        step = min(LADDER_SECONDS[min(n, len(LADDER_SECONDS)) - 1] for n in numbers.values()) * scale
        floor = step * FALSE_ALARM ** (1 / len(numbers))
        gaps += [
            Gap(message_id, attempt, next_call[message_id, attempt] - call.started, step, floor)
            for message_id, attempt in numbers.items()
            if (message_id, attempt) in next_call
        ]
    return gaps


def smallest_ratio(gaps: list[Gap]) -> float | None:
    return round(min(gap.seconds / gap.step for gap in gaps), 3) if gaps else None


def test_transactional_overtakes_a_bulk_backlog(make_stack, provider, engine, fault_project):
    stack = make_stack()
    bulk = insert_accepted(engine, fault_project, 20_000, priority="bulk")
    urgent = insert_accepted(engine, fault_project, 50, priority="transactional")
    stack.publish_prepare(bulk, priority="bulk")
    stack.start_beat()
    stack.start_worker()
    bulk_at_publish = wait_until(
        lambda: len(provider.delivered()), lambda n: n >= 500, 60, "500 bulk delivered before the urgent", 0.01
    )
    stack.publish_prepare(urgent, priority="transactional")
    urgent_set = set(urgent)
    wait_until(
        lambda: sum(1 for r in provider.delivered() if r.message_id in urgent_set),
        lambda n: n == len(urgent),
        120,
        f"all {len(urgent)} transactional delivered",
        0.005,
    )
    arrived = max(r.at for r in provider.delivered() if r.message_id in urgent_set)
    bulk_before = sum(1 for r in provider.delivered() if r.message_id not in urgent_set and r.at <= arrived)
    seen = wait_until_terminal(engine, bulk + urgent, timeout=180)
    tally = assert_ledger_agrees(bulk + urgent, seen, provider)
    tally.report(
        "transactional behind 20,000 bulk",
        {"bulk delivered": bulk_at_publish, "bulk delivered before the last transactional": bulk_before},
    )
    assert tally.outcomes == {"sent": len(bulk) + len(urgent)}
    assert bulk_before < 2000
