"""Workers that die: nothing lost, nothing sent twice where the provider can tell.

The kill lands in the middle of a provider call, or the test fails: a kill between two
calls would leave no claimed message to recover, and test nothing.
"""

from __future__ import annotations

import signal
import time
from collections import Counter

import pytest
from sqlalchemy import Engine

from tests.faults.stack import POOLS, Stack, assert_ledger_agrees, insert_accepted, statuses, wait_until_terminal
from tests.provider_server import Call, FakeProviderServer
from tests.waiting import wait_until

# The pool is where shutdown and death differ: threads in one process, prefork children.
pytestmark = pytest.mark.parametrize("pool", POOLS)

MID_DRAIN = 150  # delivered before the fault: the drain is well under way, far from over


def signal_mid_call(
    stack: Stack, name: str, signum: int, engine: Engine, ids: list[str], provider: FakeProviderServer
) -> tuple[dict[str, int], list[Call]]:
    """Signal worker `name` mid-drain, while one of its provider calls is open: once
    MID_DRAIN have been delivered, one of ours is `sending` and a call of the worker's
    arrived less than half the provider's latency ago, so it is still open when the signal
    lands. Returns the state then (statuses read once the worker is gone) and the worker's
    calls that were open when the signal went; the test fails if none was."""

    def observe() -> tuple[int, int, list[Call]]:
        sending = sum(status == "sending" for status in statuses(engine, ids).values())
        now = time.time()
        young = [c for c in provider.open_requests() if c.sender == name and now - c.started < provider.latency / 2]
        return len(provider.delivered()), sending, young

    wait_until(
        observe,
        lambda seen: seen[0] >= MID_DRAIN and seen[1] >= 1 and seen[2],
        30,
        f"{MID_DRAIN} delivered, one sending and a call of {name} just opened",
        every=0.005,
        show=lambda seen: f"delivered {seen[0]}, sending {seen[1]}, young open calls {len(seen[2])}",
    )
    signalled = time.time()
    # A stop reaches the main process only, as a supervisor sends it (with prefork, a SIGTERM
    # to each pool child would cut its call off); a kill takes the whole group.
    stack.signal(name, signum, group=signum == signal.SIGKILL)
    open_calls = [c for c in provider.open_throughout(signalled, signalled) if c.sender == name]
    state = Counter(statuses(engine, ids).values())
    at_signal = {
        "delivered": len(provider.delivered()),
        "left sending": state["sending"],
        "open calls": len(open_calls),
        "messages in open calls": sum(len(c.message_ids) for c in open_calls),
    }
    assert open_calls, f"no call of {name} was open when the signal went: {at_signal}"
    return at_signal, open_calls


@pytest.mark.parametrize("deduplicating_provider", [True, False], ids=["idempotency-key", "no-key"])
def test_sigkill_mid_call_loses_nothing(make_stack, provider, engine, fault_project, deduplicating_provider):
    provider.deduplicate = deduplicating_provider
    stack = make_stack()
    ids = insert_accepted(engine, fault_project, 1000)
    stack.publish_prepare(ids)
    stack.start_beat()
    stack.start_worker("worker", "--concurrency", "2")
    at_kill, open_calls = signal_mid_call(stack, "worker", signal.SIGKILL, engine, ids, provider)
    assert at_kill["left sending"] >= 1, f"the kill left no claim to recover: {at_kill}"
    stack.start_worker("worker-again", "--concurrency", "2")
    seen = wait_until_terminal(engine, ids, timeout=60)
    tally = assert_ledger_agrees(ids, seen, provider)
    tally.report(f"SIGKILL mid-call ({'idempotency key' if deduplicating_provider else 'no key'})", at_kill)
    cut_off = {message_id for call in open_calls for message_id in call.message_ids}
    if deduplicating_provider:
        # The claims the kill abandoned were sent again, and the provider answered without sending.
        assert tally.outcomes == {"sent": len(ids)}
        assert all(provider.appearances()[message_id] >= 2 for message_id in cut_off)
    else:
        # Nobody can tell whether a cut-off call went out: unknown, never sent again.
        assert set(seen.values()) <= {"sent", "unknown"}
        assert {seen[message_id] for message_id in cut_off} == {"unknown"}
        assert tally.outcomes.get("unknown", 0) <= at_kill["left sending"]


def test_sigterm_mid_drain_finishes_its_batches_and_sends_nothing_twice(make_stack, provider, engine, fault_project):
    stack = make_stack()
    ids = insert_accepted(engine, fault_project, 1000)
    stack.publish_prepare(ids)
    stack.start_beat()
    stack.start_worker("worker", "--concurrency", "2")
    at_term, open_calls = signal_mid_call(stack, "worker", signal.SIGTERM, engine, ids, provider)
    assert at_term["left sending"] == 0, f"the worker left claims behind on a graceful stop: {at_term}"
    stack.start_worker("worker-again", "--concurrency", "2")
    seen = wait_until_terminal(engine, ids, timeout=60)
    tally = assert_ledger_agrees(ids, seen, provider)
    tally.report("SIGTERM mid-call", at_term)
    assert tally.outcomes == {"sent": len(ids)}
    assert tally.repeated_requests == 0  # the calls open at the signal were answered and recorded, not resent
    assert all(call.status == 200 for call in open_calls)
