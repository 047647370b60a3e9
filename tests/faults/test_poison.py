"""A message whose prepare or delivery kills its worker, every time: its batch-mates go on after
the first death, and it is failed alone after a few, instead of taking a worker down at every sweep."""

from __future__ import annotations

import signal
import threading
from collections import Counter
from collections.abc import Callable

from sqlalchemy import text
from werkzeug import Request, Response

from tasks.isolation import KILLED_RUNS
from tests.faults.stack import Stack, assert_ledger_agrees, insert_accepted, wait_until_terminal
from tests.waiting import wait_until


def wait_until_stuck_on(engine, holder_pid: int, waiting_before: int, timeout: float = 30) -> int:
    """Until one more backend waits for the lock the test holds: a prepare run is stuck on the poison."""

    def waiting() -> int:
        with engine.connect() as connection:
            return connection.execute(
                text("SELECT count(*) FROM pg_stat_activity WHERE :holder = ANY(pg_blocking_pids(pid))"),
                {"holder": holder_pid},
            ).scalar_one()

    return wait_until(
        waiting, lambda n: n > waiting_before, timeout, f"more than {waiting_before} prepare runs stuck on the poison"
    )


def end_waiters(engine, holder_pid: int) -> None:
    """A killed worker's backend waits on in the lock queue, holding its batch's row locks,
    until PostgreSQL notices the client is gone (at the next read); here it is told at once."""
    with engine.connect() as connection:
        connection.execute(
            text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE :holder = ANY(pg_blocking_pids(pid))"),
            {"holder": holder_pid},
        )


def test_a_message_that_kills_its_worker_fails_alone_and_its_batch_mates_are_sent_once(
    make_stack, provider, engine, fault_project
):
    stack = make_stack()
    ids = insert_accepted(engine, fault_project, 20)
    poison = ids[7]
    with engine.connect() as holder:
        # While this row lock is held, a prepare run that holds the poison waits forever where
        # it writes its content: the stand-in for a message whose handling kills its worker.
        holder.execute(text("SELECT 1 FROM message_contents WHERE message_id = :id FOR UPDATE"), {"id": poison})
        holder_pid = holder.execute(text("SELECT pg_backend_pid()")).scalar_one()
        stack.publish_prepare(ids)
        stack.start_beat()
        kill_while_held(
            stack,
            engine,
            ids,
            poison,
            lambda _: wait_until_stuck_on(engine, holder_pid, waiting_before=0),
            after_kill=lambda: end_waiters(engine, holder_pid),
        )
        stack.start_worker("survivor", "--concurrency", "2")
        seen = wait_until_terminal(engine, ids, timeout=60)
        holder.rollback()
    tally = assert_ledger_agrees(ids, seen, provider)
    tally.report("a prepare that kills its worker", {"worker deaths": KILLED_RUNS, "stuck on": "the poison's row lock"})
    assert seen[poison] == "failed"
    assert tally.outcomes == {"sent": 19, "failed": 1}
    assert error_of(engine, poison) == f"prepare killed its worker {KILLED_RUNS} times"


def error_of(engine, message_id: str) -> str | None:
    with engine.connect() as connection:
        return connection.execute(
            text("SELECT error FROM messages WHERE id = CAST(:id AS uuid)"), {"id": message_id}
        ).scalar_one()


class HangingProvider:
    """Holds every provider call that carries the poison until the test has killed its worker:
    the stand-in for a message whose sending kills the worker. Calls without it go through."""

    def __init__(self, poison: str):
        self.poison = poison
        self.held: list[threading.Event] = []
        self._lock = threading.Lock()

    def __call__(self, request: Request) -> Response | None:
        if all(m["id"] != self.poison for m in request.get_json()["messages"]):
            return None
        release = threading.Event()
        with self._lock:
            self.held.append(release)
        release.wait(timeout=120)
        return Response("the worker is gone", status=500)

    def wait_held(self, count: int, timeout: float = 60) -> None:
        wait_until(lambda: len(self.held), lambda n: n >= count, timeout, f"the poison's call held {count} times")

    def release_all(self) -> None:
        for release in self.held:
            release.set()


def kill_while_held(
    stack: Stack,
    engine,
    ids: list[str],
    poison: str,
    wait_stuck: Callable[[int], None],
    after_kill: Callable[[], None] = lambda: None,
) -> None:
    """Start a worker and kill it once it is stuck on the poison (for the n-th time), KILLED_RUNS
    times; from the second death on, every other message must already be sent."""
    for death in range(1, KILLED_RUNS + 1):
        stack.start_worker(f"worker{death}", "--concurrency", "2")
        wait_stuck(death)
        if death > 1:
            good = wait_until_terminal(engine, [i for i in ids if i != poison], timeout=60)
            assert Counter(good.values()) == Counter({"sent": len(ids) - 1})
        stack.signal(f"worker{death}", signal.SIGKILL)
        after_kill()


def test_a_message_whose_sending_kills_its_worker_fails_alone_and_its_batch_mates_are_sent_once(
    make_stack, provider, engine, fault_project
):
    # The workers take the provider for one that de-duplicates, so they send abandoned claims
    # again; the ledger forgives no repeat, so a resend of anything that went would show.
    stack = make_stack(CLAIM_TIMEOUT_SECONDS="2", FAKE_PROVIDER_IDEMPOTENT="true")
    ids = insert_accepted(engine, fault_project, 20)
    poison = ids[7]
    provider.override = hanging = HangingProvider(poison)
    try:
        stack.publish_prepare(ids)
        stack.start_beat()
        kill_while_held(stack, engine, ids, poison, hanging.wait_held)
        stack.start_worker("survivor", "--concurrency", "2")
        seen = wait_until_terminal(engine, ids, timeout=60)
    finally:
        hanging.release_all()
    tally = assert_ledger_agrees(ids, seen, provider)
    tally.report("a delivery that kills its worker", {"worker deaths": KILLED_RUNS, "calls held": len(hanging.held)})
    assert tally.outcomes == {"sent": 19, "failed": 1}
    assert seen[poison] == "failed"
    assert len(hanging.held) == KILLED_RUNS  # the first with its whole batch, then alone
    assert error_of(engine, poison) == f"deliver killed its worker {KILLED_RUNS} times"
