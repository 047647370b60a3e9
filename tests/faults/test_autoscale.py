"""Autoscaling shown: a prefork worker run as docker/compose.yaml runs it (`--autoscale
MAX,MIN`, beat beside it) grows its pool to MAX under a backlog and gives it back to MIN
when idle, and every message arrives once on the way.

The pool is read twice: as the worker reports it (remote control `inspect stats`, the pids
of its pool) and as the OS sees it (the live child processes of the worker's main pid), and
the two must agree. Celery shrinks a pool only when no task has arrived for its keepalive,
read from AUTOSCALE_KEEPALIVE when celery.worker.autoscale is imported (30 s by default);
the worker here runs with 2 s so that idle comes within the test's patience. Beat's own
tasks arrive every second and are not load (tasks/autoscale.py): counted, they kept a grown
pool at MAX, or swung it up again as soon as it shrank, and this test failed at its end.
"""

from __future__ import annotations

import contextlib
import socket
from collections import Counter
from collections.abc import Iterator

import psutil
import pytest
from celery import Celery

from tasks.backlog import queue_depths
from tests.faults.stack import (
    Stack,
    assert_ledger_agrees,
    insert_accepted,
    report_fault,
    statuses,
    wait_until_terminal,
)
from tests.waiting import wait_until

MAX, MIN = 4, 1
KEEPALIVE_SECONDS = "2"
MESSAGES = 2000
LANES = ["prepare.bulk", "deliver.fake.bulk"]


@pytest.fixture
def inspector(make_stack, provider) -> Iterator[tuple[Stack, Celery]]:
    """A stack whose email goes to a provider that takes 300 ms a call (so a backlog builds)
    and counts repeats as deliveries, and a Celery client on its broker for remote control."""
    provider.latency = 0.3
    provider.deduplicate = False
    stack = make_stack(AUTOSCALE_KEEPALIVE=KEEPALIVE_SECONDS, FAKE_PROVIDER_IDEMPOTENT="false")
    client = Celery("inspector", broker=stack.redis.url)
    yield stack, client
    client.close()


def live_children(pid: int) -> list[int]:
    """Child processes of `pid` that still run (an exited child may linger as a zombie)."""
    alive = []
    for child in psutil.Process(pid).children():
        with contextlib.suppress(psutil.NoSuchProcess):
            if child.status() != psutil.STATUS_ZOMBIE:
                alive.append(child.pid)
    return sorted(alive)


def pool(client: Celery, node: str, pid: int) -> tuple[list[int], list[int]]:
    """(pids of the pool as the worker reports them, live children of its main process)."""
    stats = (client.control.inspect(destination=[node], timeout=1).stats() or {}).get(node, {})
    return sorted(stats.get("pool", {}).get("processes", [])), live_children(pid)


def wait_for_pool(client: Celery, node: str, pid: int, size: int, sizes: list[int], timeout: float) -> list[int]:
    """The pool's pids once the worker reports `size` processes and the OS shows the same ones;
    every size seen on the way is added to `sizes`."""

    def observe() -> tuple[list[int], list[int]]:
        seen = pool(client, node, pid)
        sizes.append(len(seen[0]))
        return seen

    reported, _ = wait_until(
        observe,
        lambda seen: len(seen[0]) == size and seen[0] == seen[1],
        timeout,
        f"a pool of {size} (reported pids, live children)",
        every=0.2,
    )
    return reported


def test_prefork_pool_grows_to_max_under_a_backlog_and_shrinks_to_min_when_idle(
    inspector, provider, engine, fault_project
):
    stack, client = inspector
    stack.start_beat()
    worker = stack.start_worker("worker", "--pool", "prefork", "--autoscale", f"{MAX},{MIN}")
    node = f"worker@{socket.gethostname()}"
    sizes: list[int] = []
    started = wait_for_pool(client, node, worker.pid, MIN, sizes, timeout=30)

    ids = insert_accepted(engine, fault_project, MESSAGES)
    stack.publish_prepare(ids)
    grown = wait_for_pool(client, node, worker.pid, MAX, sizes, timeout=30)
    at_max = {
        "pool": len(grown),
        "statuses": dict(Counter(statuses(engine, ids).values())),
        "delivered": len(provider.delivered()),
        "tasks waiting": queue_depths(stack.redis.url, LANES),
    }
    seen = wait_until_terminal(engine, ids, timeout=90)
    assert_ledger_agrees(ids, seen, provider)
    counts = provider.deliveries()
    shrunk = wait_for_pool(client, node, worker.pid, MIN, sizes, timeout=30)

    outcomes = {
        "statuses": dict(Counter(seen.values())),
        "deliveries per message": dict(Counter(counts[i] for i in ids)),
        "pool sizes": {"start": len(started), "peak": max(sizes), "idle": len(shrunk)},
    }
    report_fault("autoscale", at_max, outcomes)
    assert set(seen.values()) == {"sent"}
    assert all(counts[i] == 1 for i in ids), outcomes["deliveries per message"]
    assert max(sizes) == MAX
    assert worker.poll() is None, "the worker's main process ended"
