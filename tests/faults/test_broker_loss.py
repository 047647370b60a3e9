"""Redis dying under a worker's established connections: the same worker goes on delivering.

A supervisor restarting a dead worker would hide the failure this guards against, so the
test holds on to the one process it started and checks that it is the one delivering after
Redis is back. Beat runs beside it, as in production: the messages whose tasks Redis took
with it, and the one in flight at the provider, end sent once each, by the sweeper and the
same worker, against the provider's own ledger.
"""

from __future__ import annotations

import subprocess
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from tests.faults.stack import POOLS, assert_ledger_agrees, insert_accepted, statuses, wait_until_terminal
from tests.waiting import wait_until


def wait_for(condition: Callable[[], object], what: str, timeout: float, worker: subprocess.Popen, log: Path) -> None:
    """Poll `condition` until it holds; fail at once if the worker exits, or at the deadline with what was seen."""
    alive, _ = wait_until(
        lambda: (worker.poll() is None, condition()),
        lambda seen: not seen[0] or seen[1],
        timeout,
        what,
        show=lambda seen: f"worker alive {seen[0]}, {what}: {seen[1]!r}",
    )
    assert alive, f"the worker exited waiting for {what}:\n{tail(log)}"


def tail(log: Path) -> str:
    """The end of the worker's log, for a failure to show what the worker said last."""
    return log.read_text(errors="replace")[-4000:]


# `tidings worker`'s own pool (threads) and compose's (prefork, autoscaled).
POOL_ARGUMENTS = {"threads": (), "prefork": ("--autoscale", "4,2")}


@pytest.mark.parametrize("pool", POOLS)
def test_redis_killed_under_unacked_tasks_the_same_worker_delivers_afterwards(
    make_stack, provider, engine, fault_project, pool
):
    provider.latency = 3.0  # a long call, so its task is still running (unacked) when Redis dies
    stack = make_stack()
    worker = stack.start_worker("worker", *POOL_ARGUMENTS[pool])
    stack.start_beat()
    log = stack.directory / "worker.log"
    broker = redis.Redis(port=stack.redis.port, socket_timeout=2)
    before = insert_accepted(engine, fault_project, 20)
    stack.publish_prepare(before)
    # Late acknowledgement: the task stays in kombu's `unacked` hash while the provider call
    # lasts. Its channel is closed (restoring it) and its ack comes after the loss: the
    # worker used to die on both.
    wait_for(
        lambda: (
            "sending" in statuses(engine, before).values() and broker.hlen("unacked") > 0 and provider.open_requests()
        ),
        "a delivery in flight at the provider, its task unacked",
        30,
        worker,
        log,
    )
    at_loss = {
        "sending": Counter(statuses(engine, before).values())["sending"],
        "unacked tasks": broker.hlen("unacked"),
        "open calls": len(provider.open_requests()),
    }

    stack.redis.stop(kill=True)  # SIGKILL, no persistence: the queues and the unacked hash are gone
    wait_for(lambda: "Connection to broker lost" in log.read_text(errors="replace"), "the loss", 30, worker, log)
    stack.redis.start()  # the same port, so the worker's reconnect loop finds it
    wait_for(lambda: log.read_text(errors="replace").count("Connected to ") >= 2, "a reconnect", 60, worker, log)

    after = insert_accepted(engine, fault_project, 5)
    stack.publish_prepare(after)
    seen = wait_until_terminal(engine, before + after, timeout=90)
    assert worker.poll() is None, tail(log)
    assert stack.processes["worker"].pid == worker.pid
    tally = assert_ledger_agrees(before + after, seen, provider)
    tally.report(f"Redis killed under unacked tasks ({pool}), the 20 before and 5 after", at_loss)
    assert {seen[message_id] for message_id in after} == {"sent"}
    assert set(tally.outcomes) <= {"sent", "unknown"} and sum(tally.outcomes.values()) == len(before + after)
