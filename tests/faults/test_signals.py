"""The signal matrix, beyond SIGTERM and SIGKILL mid-call (test_worker_crashes.py): a
worker killed between two calls, and one that ends itself with os._exit() mid-batch.

Every stack here runs with the claim timeout and the stalled sweep at 600 s, so only the
dead process's stopped heartbeat (silent for WORKER_DEAD_AFTER_SECONDS, 3 s here) and
what the next sweep sets off can settle its work within the deadline: the silence, one
sweep, and the 5 s the rest may take to go again, plus the drain. Each test ends with
every message final (so no claim left, of any age) and the provider's ledger agreeing;
it prints how long the recovery took and never asserts it.
"""

from __future__ import annotations

import os
import signal
import time
from itertools import pairwise
from pathlib import Path

import psutil
from sqlalchemy import Engine, text

from tests.faults.exit_hook.sitecustomize import EXIT_CODE
from tests.faults.stack import (
    FAST_RECOVERY,
    MID_DRAIN,
    SLOW_BACKSTOPS,
    Stack,
    assert_ledger_agrees,
    insert_accepted,
    statuses,
    wait_until_terminal,
)
from tests.provider_server import FakeProviderServer
from tests.waiting import wait_until

# The target: the rest goes again within 5 s of the death being known (its silence and a sweep).
RECOVERY = float(FAST_RECOVERY["WORKER_DEAD_AFTER_SECONDS"]) + float(FAST_RECOVERY["SWEEP_INTERVAL_SECONDS"]) + 5
DRAIN = 15.0  # what the surviving worker needs for the rest of the backlog, and more
EXIT_HOOK = Path(__file__).parent / "exit_hook"


def longest_stall(provider: FakeProviderServer, since: float) -> float:
    """The longest time after `since` (time.time()) in which no request reached the provider."""
    arrivals = sorted({since, *(r.at for r in provider.delivered() if r.at >= since)})
    return max((later - earlier for earlier, later in pairwise(arrivals)), default=0.0)


def settle(
    engine: Engine, ids: list[str], provider: FakeProviderServer, fault: str, at_fault: dict, since: float
) -> dict[str, str]:
    """Wait for every message to be final within the target plus the drain, check the ledger,
    and report the fault with the time recovery took."""
    seen = wait_until_terminal(engine, ids, timeout=RECOVERY + DRAIN)
    settled = time.time() - since
    tally = assert_ledger_agrees(ids, seen, provider)
    stall = longest_stall(provider, since)
    print(tally.report(f"{fault}: longest stall {stall:.1f} s, settled {settled:.1f} s after it", at_fault))
    assert set(seen.values()) <= {"sent", "unknown"}
    return seen


def claims_of(engine: Engine, ids: list[str], pids: list[int]) -> int:
    """How many of `ids` are `sending` under a claim of one of `pids` (a claim names host:pid:random)."""
    with engine.connect() as connection:
        return connection.execute(
            text(
                "SELECT count(*) FROM messages WHERE id = ANY(CAST(:ids AS uuid[])) "
                "AND status = 'sending' AND split_part(claimed_by, ':', 2) = ANY(:pids)"
            ),
            {"ids": ids, "pids": [str(pid) for pid in pids]},
        ).scalar_one()


def pool_of(pid: int) -> list[int]:
    """A worker process and its pool's children, which make the claims under prefork."""
    return [pid, *(child.pid for child in psutil.Process(pid).children(recursive=True))]


def start_two_workers(stack: Stack, ids: list[str], **a_env: str) -> None:
    """Beat, worker `a` (one slot, so it is often between calls) with `a_env`, and worker `b`, on `ids`."""
    stack.start_beat()
    stack.start_worker("a", "--concurrency", "1", **a_env)
    stack.start_worker("b", "--concurrency", "2")
    stack.publish_prepare(ids)


def test_sigkill_between_calls_the_rest_goes_again_within_seconds(make_stack, provider, engine, fault_project):
    """Killed between two calls (no claim of its own, no call open), a worker took tokens with
    it: the lane keeps their chunks, the youngest of it (a token takes the oldest), which the
    sweep must give tokens again although none of their rows has stood still."""
    provider.deduplicate = False
    stack = make_stack(**SLOW_BACKSTOPS)
    ids = insert_accepted(engine, fault_project, 2000)
    start_two_workers(stack, ids)
    pid = stack.processes["a"].pid

    def observe() -> tuple[int, int, int]:
        delivered = provider.delivered()
        return len(delivered), sum(r.sender == "a" for r in delivered), claims_of(engine, ids, pool_of(pid))

    wait_until(
        observe,
        lambda seen: seen[0] >= MID_DRAIN and seen[1] > 0 and seen[2] == 0,
        30,
        f"{MID_DRAIN} delivered, some by a, and no claim of a",
        every=0.01,
        show=lambda seen: f"delivered {seen[0]}, by a {seen[1]}, claims of a {seen[2]}",
    )
    pids = pool_of(pid)
    killed = time.time()
    stack.signal("a", signal.SIGKILL)
    state = statuses(engine, ids)
    at_kill = {
        "delivered": len(provider.delivered()),
        "ready": sum(s == "ready" for s in state.values()),
        "sending": sum(s == "sending" for s in state.values()),
        "claims of a": claims_of(engine, ids, pids),
    }
    assert not at_kill["claims of a"], f"a claimed between the look and the kill: {at_kill}"
    seen = settle(engine, ids, provider, "SIGKILL between calls", at_kill, killed)
    assert set(seen.values()) == {"sent"}  # it held no claim: nothing is unknown


def test_a_worker_that_exits_mid_batch_is_settled_within_seconds(make_stack, provider, engine, fault_project, pool):
    """os._exit() the moment its third call is answered: the provider delivered, the claims are
    `sending`, and nothing of Tidings runs after (no shutdown signal, no finally). Under
    prefork the pool child exits and its worker lives on."""
    provider.deduplicate = False
    stack = make_stack(**SLOW_BACKSTOPS)
    ids = insert_accepted(engine, fault_project, 1000)
    hooked = {
        "PYTHONPATH": os.pathsep.join([str(EXIT_HOOK), stack.env.get("PYTHONPATH", "")]),
        "FAULT_EXIT_AFTER_CALLS": "3",
    }
    start_two_workers(stack, ids, **hooked)
    log = stack.directory / "a.log"

    def exited() -> bool:
        if pool == "prefork":
            return f"exitcode {EXIT_CODE}" in log.read_text(errors="replace")
        return stack.processes["a"].poll() == EXIT_CODE

    wait_until(
        exited,
        bool,
        30,
        f"a process of a to exit with {EXIT_CODE}",
        every=0.005,
        show=lambda _: log.read_text(errors="replace")[-2000:],
    )
    ended = time.time()
    answered = [c for c in provider.calls if c.sender == "a" and c.ended is not None]
    last = max(answered, key=lambda c: c.ended or 0)
    state = statuses(engine, ids)
    at_exit = {
        "delivered": len(provider.delivered()),
        "sending": sum(s == "sending" for s in state.values()),
        "calls of a answered": len(answered),
        "messages of its last call": len(last.message_ids),
    }
    seen = settle(engine, ids, provider, f"os._exit() mid-batch ({pool})", at_exit, ended)
    # Its last call was answered and never written: delivered once, and nobody can tell.
    assert {seen[message_id] for message_id in last.message_ids} == {"unknown"}
    if pool == "prefork":
        assert stack.processes["a"].poll() is None, "the worker's main process died with its child"
