"""A provider that pushes back: 429 pauses, a shared pace, 503 storms, and lanes under load."""

from __future__ import annotations

import time
from collections import Counter

from sqlalchemy import text

from tests.faults.stack import assert_ledger_agrees, insert_accepted, wait_until_terminal
from tests.provider_server import json_response
from tests.waiting import wait_until


def test_429_pauses_the_provider_for_everyone_without_using_attempts(make_stack, provider, engine, fault_project):
    first_429: list[float] = []

    def rate_limited_for_five_seconds(request):
        now = time.time()
        if not first_429:
            first_429.append(now)
        if now < first_429[0] + 5:
            return json_response({"error": "slow down"}, status=429, headers={"Retry-After": "5"})
        return None

    provider.override = rate_limited_for_five_seconds
    stack = make_stack()
    ids = insert_accepted(engine, fault_project, 300)
    sms_ids = insert_sms(engine, fault_project, 20)
    stack.start_beat()
    stack.start_worker("worker", "--concurrency", "2")
    stack.publish_prepare(ids)
    wait_until(lambda: len(first_429), bool, 30, "the provider's first 429", 0.01)
    stack.publish_prepare(sms_ids, priority="transactional")
    other_provider = wait_until_terminal(engine, sms_ids, timeout=10)
    sms_done = time.time()
    seen = wait_until_terminal(engine, ids, timeout=60)
    assert_ledger_agrees(seen, provider, idempotent=True)
    assert set(seen.values()) == {"sent"}
    # Calls that were already on their way when the first 429 came back may land; none after.
    window = (first_429[0] + provider.latency + 0.3, first_429[0] + 5)
    inside = [r for r in provider.receipts if window[0] <= r.at < window[1]]
    assert inside == []
    with engine.connect() as connection:
        attempts = (
            connection.execute(
                text("SELECT DISTINCT attempts FROM messages WHERE id = ANY(CAST(:ids AS uuid[]))"), {"ids": ids}
            )
            .scalars()
            .all()
        )
    assert attempts == [1]
    assert set(other_provider.values()) == {"sent"}
    assert sms_done < first_429[0] + 5, "the other provider's messages waited for the pause"


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


def leave_no_work_behind(engine) -> None:
    """Cancel what earlier tests left unfinished in the shared database: the stack's sweeper
    would hand it to this test's provider, sharing the pace the test measures."""
    with engine.begin() as connection:
        connection.execute(
            text(
                "UPDATE messages SET status = 'cancelled' "
                "WHERE status IN ('accepted', 'scheduled', 'ready', 'retrying', 'sending')"
            )
        )


def test_two_workers_share_one_pace(make_stack, provider, engine, fault_project):
    provider.latency = 0.0
    leave_no_work_behind(engine)
    stack = make_stack(FAKE_RATE_PER_SEC="20")
    ids = insert_accepted(engine, fault_project, 200)
    stack.start_worker("one", "--concurrency", "4")
    stack.start_worker("two", "--concurrency", "4")
    stack.start_beat()
    stack.publish_prepare(ids)
    seen = wait_until_terminal(engine, ids, timeout=60)
    assert_ledger_agrees(seen, provider, idempotent=True)
    assert set(seen.values()) == {"sent"}
    # The stack's sweeper may hand it rows an earlier test left behind: count this test's own.
    arrivals = sorted(r.at for r in provider.delivered() if r.message_id in set(ids))
    busiest = max(sum(1 for t in arrivals[i:] if t < start + 1.0) for i, start in enumerate(arrivals))
    # 200 messages at 20/s take ten one-second windows: the last opens nine seconds in.
    span = arrivals[-1] - arrivals[0] + 1.0
    print(f"\npacing 20/s over two workers: busiest second {busiest}, 200 messages in {span:.2f} s")
    assert busiest <= 20
    assert 8.5 <= span <= 11.5


def test_503_storm_backs_off_and_every_message_ends(make_stack, provider, engine, fault_project):
    storm_until = time.time() + 10
    calls = Counter()

    def half_fail(request):
        calls["all"] += 1
        if time.time() < storm_until and calls["all"] % 2 == 0:
            return json_response({"error": "unavailable"}, status=503)
        return None

    provider.latency = 0.02
    provider.override = half_fail
    stack = make_stack(MAX_ATTEMPTS="4")
    ids = insert_accepted(engine, fault_project, 1000)
    stack.start_beat()
    stack.start_worker()
    stack.publish_prepare(ids)
    seen = wait_until_terminal(engine, ids, timeout=120)
    assert_ledger_agrees(seen, provider, idempotent=True)
    assert set(seen.values()) <= {"sent", "dead"}
    per_message = Counter(r.message_id for r in provider.receipts)
    per_second = Counter(int(r.at) for r in provider.receipts)
    print(
        f"\n503 storm: {dict(Counter(seen.values()))}, requests per message at most {max(per_message.values())}, "
        f"busiest second {max(per_second.values())} messages"
    )
    assert max(per_message.values()) <= 4
    assert len(provider.receipts) < 2 * len(ids)


def test_transactional_overtakes_a_bulk_backlog(make_stack, provider, engine, fault_project):
    stack = make_stack()
    bulk = insert_accepted(engine, fault_project, 20_000, priority="bulk")
    urgent = insert_accepted(engine, fault_project, 50, priority="transactional")
    stack.publish_prepare(bulk, priority="bulk")
    stack.start_beat()
    stack.start_worker()
    wait_until(lambda: len(provider.delivered()), lambda n: n >= 500, 60, "500 bulk delivered before the urgent", 0.01)
    published = time.time()
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
    assert_ledger_agrees(seen, provider, idempotent=True)
    print(
        f"\npriority: 50 transactional reached the provider {1000 * (arrived - published):.0f} ms after "
        f"publishing, with {bulk_before} of 20,000 bulk delivered by then"
    )
    assert bulk_before < 2000
