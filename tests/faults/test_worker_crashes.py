"""Workers that die: nothing lost, nothing sent twice where the provider can tell.

The kill lands in the middle of a provider call, or the test fails: a kill between two
calls would leave no claimed message to recover, and test nothing.
"""

from __future__ import annotations

import signal
import time

import pytest

from tests.faults.stack import POOLS, assert_ledger_agrees, insert_accepted, signal_mid_call, wait_until_terminal

# The pool is where shutdown and death differ: threads in one process, prefork children.
pytestmark = pytest.mark.parametrize("pool", POOLS)


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
    killed = time.monotonic()
    stack.start_worker("worker-again", "--concurrency", "2")
    seen = wait_until_terminal(engine, ids, timeout=60)
    tally = assert_ledger_agrees(ids, seen, provider)
    key = "idempotency key" if deduplicating_provider else "no key"
    tally.report(f"SIGKILL mid-call ({key}), settled {time.monotonic() - killed:.1f} s after the kill", at_kill)
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


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGQUIT], ids=lambda s: s.name)
def test_a_stop_signal_mid_drain_finishes_its_batches_and_sends_nothing_twice(
    make_stack, provider, engine, fault_project, signum
):
    """TERM and INT are Celery's warm shutdown, QUIT its cold one (running tasks get
    worker_soft_shutdown_timeout first): each tells deliver to stop after the call in flight."""
    stack = make_stack()
    ids = insert_accepted(engine, fault_project, 1000)
    stack.publish_prepare(ids)
    stack.start_beat()
    stack.start_worker("worker", "--concurrency", "2")
    at_stop, open_calls = signal_mid_call(stack, "worker", signum, engine, ids, provider)
    assert at_stop["left sending"] == 0, f"the worker left claims behind on a graceful stop: {at_stop}"
    stopped = time.monotonic()
    stack.start_worker("worker-again", "--concurrency", "2")
    seen = wait_until_terminal(engine, ids, timeout=60)
    tally = assert_ledger_agrees(ids, seen, provider)
    tally.report(f"{signum.name} mid-call, settled {time.monotonic() - stopped:.1f} s after the stop", at_stop)
    assert tally.outcomes == {"sent": len(ids)}
    assert tally.repeated_requests == 0  # the calls open at the signal were answered and recorded, not resent
    assert all(call.status == 200 for call in open_calls)
