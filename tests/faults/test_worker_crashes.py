"""Workers that die: nothing lost, nothing sent twice where the provider can tell."""

from __future__ import annotations

import signal
import time

import pytest

from tests.faults.stack import assert_ledger_agrees, insert_accepted, statuses, wait_until_terminal


def wait_for_deliveries(provider, at_least: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while len(provider.delivered()) < at_least:
        assert time.monotonic() < deadline, f"only {len(provider.delivered())} delivered"
        time.sleep(0.01)


@pytest.mark.parametrize("deduplicating_provider", [True, False], ids=["idempotency-key", "no-key"])
def test_sigkill_mid_drain_loses_nothing(make_stack, provider, engine, fault_project, deduplicating_provider):
    provider.deduplicate = deduplicating_provider
    stack = make_stack(FAKE_PROVIDER_IDEMPOTENT=str(deduplicating_provider).lower())
    ids = insert_accepted(engine, fault_project, 1000)
    stack.publish_prepare(ids)
    stack.start_beat()
    stack.start_worker("worker", "--concurrency", "2")
    wait_for_deliveries(provider, 150)
    stack.signal("worker", signal.SIGKILL)
    in_flight = sum(status == "sending" for status in statuses(engine, ids).values())
    stack.start_worker("worker-again", "--concurrency", "2")
    seen = wait_until_terminal(engine, ids, timeout=60)
    counts = assert_ledger_agrees(seen, provider, idempotent=deduplicating_provider)
    duplicates = sum(count - 1 for count in counts.values() if count > 1)
    raw = sum(1 for r in provider.receipts if r.message_id in seen) - len(counts)
    print(
        f"\nSIGKILL ({'idempotency key' if deduplicating_provider else 'no key'}): in flight {in_flight}, "
        f"requests repeated {raw}, duplicate deliveries {duplicates}, final {dict(_tally(seen))}"
    )
    assert duplicates <= in_flight
    if deduplicating_provider:
        assert duplicates == 0
        assert set(seen.values()) == {"sent"}
    else:
        assert set(seen.values()) <= {"sent", "unknown"}
        assert sum(status == "unknown" for status in seen.values()) <= in_flight


def test_sigterm_mid_drain_finishes_its_batches_and_sends_nothing_twice(make_stack, provider, engine, fault_project):
    provider.deduplicate = False
    stack = make_stack(FAKE_PROVIDER_IDEMPOTENT="false")
    ids = insert_accepted(engine, fault_project, 1000)
    stack.publish_prepare(ids)
    stack.start_beat()
    stack.start_worker("worker", "--concurrency", "2")
    wait_for_deliveries(provider, 150)
    assert stack.signal("worker", signal.SIGTERM) == 0
    assert "sending" not in statuses(engine, ids).values()
    stack.start_worker("worker-again", "--concurrency", "2")
    seen = wait_until_terminal(engine, ids, timeout=60)
    counts = assert_ledger_agrees(seen, provider, idempotent=False)
    assert set(seen.values()) == {"sent"}
    assert max(counts.values()) == 1


def _tally(seen: dict[str, str]) -> dict[str, int]:
    tally: dict[str, int] = {}
    for status in seen.values():
        tally[status] = tally.get(status, 0) + 1
    return tally
