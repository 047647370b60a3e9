"""A worker killed mid-call is settled by its stopped heartbeat, within seconds, not by the claim timeout.

Every stack here runs with CLAIM_TIMEOUT_SECONDS and STALLED_AFTER_SECONDS at 600, and each
test's deadline is a small part of that: only the heartbeat path (a claim names its
worker process; the sweeper acts once that process stops beating) can settle the killed
worker's claims and re-dispatch the rows it had taken in time. Each kill lands while a
provider request of the killed process is held open and its rows are `sending`.

The provider's ledger is the truth: a `sent` message reached it exactly once, an `unknown`
one at most once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import suppress
from dataclasses import dataclass

import psutil
import pytest
from sqlalchemy import Engine, text
from werkzeug import Request

from tests.faults.stack import SLOW_BACKSTOPS, Stack, assert_ledger_agrees, insert_accepted, wait_until_terminal
from tests.providers.resend_server import ResendServer
from tests.waiting import wait_until

SETTLE_TIMEOUT = 90.0
# How long the test, playing a supervisor, waits for a stopped worker before its SIGKILL.
SUPERVISOR_GRACE = 5.0
# Requests before the one held open: the kill lands mid-drain, not at the start.
HELD_REQUEST = 3


class HoldOne:
    """The fake provider's answer hook: holds its `nth` request open until released, and
    keeps the ids that request carries. What it lets go is answered as usual."""

    def __init__(self, nth: int) -> None:
        self.nth = nth
        self.seen = 0
        self.open = 0
        self.ids: list[str] = []
        self._lock = threading.Lock()
        self._release = threading.Event()

    def __call__(self, request: Request) -> None:
        with self._lock:
            self.seen += 1
            mine = self.seen == self.nth
            if mine:
                self.ids = [m["id"] for m in request.get_json()["messages"]]
                self.open += 1
        if mine:
            self._release.wait(120)
            with self._lock:
                self.open -= 1
        return None

    def release(self) -> None:
        self._release.set()


@dataclass(frozen=True)
class Injection:
    """The state when SIGKILL landed."""

    statuses: dict[str, int]
    open_requests: int
    killed: str
    claims_of_killed: list[str]

    def show(self) -> dict[str, object]:
        return {
            "statuses": self.statuses,
            "sending": self.statuses.get("sending", 0),
            "open requests": self.open_requests,
            "claimed by the killed process": len(self.claims_of_killed),
        }


def claims(engine: Engine, ids: list[str]) -> dict[str, tuple[str, str | None]]:
    """Each message's (status, claimed_by)."""
    with engine.connect() as connection:
        rows = connection.execute(
            text("SELECT id::text, status, claimed_by FROM messages WHERE id = ANY(CAST(:ids AS uuid[]))"),
            {"ids": ids},
        ).all()
    return {row.id: (row.status, row.claimed_by) for row in rows}


def wait_mid_call(
    engine: Engine, ids: list[str], held_ids: Callable[[], list[str]], open_requests: Callable[[], int]
) -> Injection:
    """Wait (with a deadline) until a provider request is held open and its messages are
    `sending`; the state then, and which process holds their claim."""

    def observe() -> tuple[int, dict[str, tuple[str, str | None]]]:
        return open_requests(), claims(engine, ids)

    def ready(seen: tuple[int, dict[str, tuple[str, str | None]]]) -> bool:
        held = held_ids()
        return seen[0] >= 1 and bool(held) and all(seen[1][i][0] == "sending" for i in held)

    open_now, seen = wait_until(
        observe,
        ready,
        60,
        "a provider request held open with its messages sending",
        show=lambda s: (s[0], Counter(status for status, _ in s[1].values())),
    )
    killed = seen[held_ids()[0]][1]
    assert killed is not None, "a sending message names no worker"
    return Injection(
        statuses=dict(Counter(status for status, _ in seen.values())),
        open_requests=open_now,
        killed=killed,
        claims_of_killed=sorted(i for i, (status, by) in seen.items() if status == "sending" and by == killed),
    )


def pid_of(worker: str) -> int:
    """The pid in a claim's worker identity (host:pid:random)."""
    return int(worker.split(":")[-2])


def claimants(engine: Engine, ids: set[str]) -> dict[str, str]:
    """Which worker process each message's last claim named (kept when the sweeper settles it);
    read at the end, so a claim the killed process took after the state was read counts too."""
    with engine.connect() as connection:
        rows = connection.execute(
            text("SELECT id::text, claimed_by FROM messages WHERE id = ANY(CAST(:ids AS uuid[]))"), {"ids": list(ids)}
        ).all()
    return dict(rows)


def kill_mid_call(
    stack: Stack,
    engine: Engine,
    ids: list[str],
    held_ids: Callable[[], list[str]],
    open_requests: Callable[[], int],
    release: Callable[[], None],
) -> tuple[Injection, set[int]]:
    """Beat and two workers drain `ids`; once the provider holds a call open, SIGKILL the
    worker whose claim it carries, then let the provider answer. The state then, and the
    pids that died (the worker's, and its pool children's under prefork)."""
    stack.start_beat()
    for name in ("a", "b"):
        stack.start_worker(name, "--concurrency", "2")
    stack.publish_prepare(ids)
    try:
        injection = wait_mid_call(engine, ids, held_ids, open_requests)
        # The claim names the process that made the call: the worker itself under threads, a
        # pool child under prefork, whose worker's whole process group goes.
        claimant = pid_of(injection.killed)
        [victim] = [n for n, p in stack.processes.items() if p.pid in (claimant, os.getpgid(claimant))]
        worker = psutil.Process(stack.processes[victim].pid)
        killed = {worker.pid, *(child.pid for child in worker.children(recursive=True))}
        stack.signal(victim, signal.SIGKILL)
    finally:
        release()
    return injection, killed


@pytest.mark.parametrize("deduplicating", [True, False], ids=["deduplicating", "not-deduplicating"])
def test_a_worker_killed_mid_call_is_settled_by_the_other_within_seconds(
    make_stack, provider, engine, fault_project, deduplicating
):
    provider.deduplicate = deduplicating
    provider.override = held = HoldOne(HELD_REQUEST)
    stack = make_stack(FAKE_PROVIDER_IDEMPOTENT=str(deduplicating).lower(), **SLOW_BACKSTOPS)
    ids = insert_accepted(engine, fault_project, 600)
    injection, killed = kill_mid_call(stack, engine, ids, lambda: held.ids, lambda: held.open, held.release)
    seen = wait_until_terminal(engine, ids, timeout=SETTLE_TIMEOUT)
    tally = assert_ledger_agrees(ids, seen, provider)
    tally.report(f"sigkill-mid-call-{'deduplicating' if deduplicating else 'not-deduplicating'}", injection.show())
    assert set(seen.values()) <= {"sent", "unknown"}
    assert injection.statuses.get("sending", 0) >= 1 and injection.open_requests >= 1
    if deduplicating:
        assert set(seen.values()) == {"sent"}
    else:
        unknown = {i for i, status in seen.items() if status == "unknown"}
        assert set(held.ids) <= unknown
        assert injection.killed in claimants(engine, unknown).values()
        assert {pid_of(worker) for worker in claimants(engine, unknown).values()} <= killed  # no one else's


def test_a_prefork_child_killed_mid_call_is_settled_while_its_worker_lives_on(
    make_stack, provider, engine, fault_project
):
    """The claim names the pool child that made the call: killing it alone (out of memory,
    a hard time limit) leaves the worker's main process beating for nothing of its own."""
    provider.deduplicate = False
    provider.override = held = HoldOne(HELD_REQUEST)
    stack = make_stack(FAKE_PROVIDER_IDEMPOTENT="false", **SLOW_BACKSTOPS)
    ids = insert_accepted(engine, fault_project, 400)
    stack.start_beat()
    stack.start_worker("worker", "--pool", "prefork", "--concurrency", "2")
    stack.publish_prepare(ids)
    try:
        injection = wait_mid_call(engine, ids, lambda: held.ids, lambda: held.open)
        child = pid_of(injection.killed)
        assert child != stack.processes["worker"].pid and os.getpgid(child) == stack.processes["worker"].pid
        os.kill(child, signal.SIGKILL)
        killed = time.time()
    finally:
        held.release()
    seen = wait_until_terminal(engine, ids, timeout=SETTLE_TIMEOUT)
    tally = assert_ledger_agrees(ids, seen, provider)
    print(tally.report(f"sigkill-prefork-child-mid-call, settled {time.time() - killed:.1f} s after", injection.show()))
    assert set(seen.values()) <= {"sent", "unknown"}
    assert stack.processes["worker"].poll() is None, "the worker's main process died with its child"
    unknown = {i for i, status in seen.items() if status == "unknown"}
    assert set(held.ids) <= unknown
    assert set(claimants(engine, unknown).values()) == {injection.killed}  # its claims, and no one else's


@pytest.fixture
def resend_stack(tmp_path, database, pool) -> Iterator[tuple[Stack, ResendServer]]:
    """A stack whose email goes to Resend, a local server shaped like it (tests/providers/resend_server.py)."""
    server = ResendServer().start()
    (tmp_path / "resend").mkdir()
    stack = Stack(
        tmp_path / "resend",
        database,
        None,
        pool,
        EMAIL_PROVIDER="resend",
        RESEND_BASE_URL=server.url,
        RESEND_API_KEY="re_test_123",
        EMAIL_FROM="Tidings <hello@tidings.test>",
        **SLOW_BACKSTOPS,
    )
    yield stack, server
    stack.stop()
    server.stop()


def test_resend_claims_abandoned_mid_call_are_sent_again_as_the_same_calls_and_delivered_once(
    resend_stack, engine, fault_project
):
    """Resend's Idempotency-Key covers one request: the killed worker's calls made again
    exactly are answered, not sent, so every message ends `sent` with one delivery."""
    stack, server = resend_stack
    server.hold = lambda number: number == HELD_REQUEST
    ids = insert_accepted(engine, fault_project, 600)
    injection, _ = kill_mid_call(stack, engine, ids, lambda: server.held_ids, lambda: server.open, server.release)
    seen = wait_until_terminal(engine, ids, timeout=SETTLE_TIMEOUT)
    tally = assert_ledger_agrees(ids, seen, server)
    tally.report("sigkill-mid-call-resend", {**injection.show(), "calls answered from their key": server.replays})
    assert injection.statuses.get("sending", 0) >= 1 and injection.open_requests >= 1
    assert set(seen.values()) == {"sent"}
    assert server.replays >= 1, "no call of the killed worker was made again"


def test_a_stop_that_outlives_the_soft_shutdown_timeout_is_settled_like_a_death(
    make_stack, provider, engine, fault_project
):
    """SIGTERM while a provider call hangs: the warm shutdown waits for it; then SIGQUIT,
    the cold shutdown, waits WORKER_SOFT_SHUTDOWN_SECONDS and cancels. The call outlives
    both, so the worker ends with its claim `sending` (under threads Celery cannot cancel a
    running task and logs an unrecoverable error; whatever still holds the process, its
    supervisor kills it, as `docker stop` does after its grace): the claim is settled like
    any dead worker's."""
    provider.deduplicate = False
    provider.override = held = HoldOne(HELD_REQUEST)
    stack = make_stack(FAKE_PROVIDER_IDEMPOTENT="false", WORKER_SOFT_SHUTDOWN_SECONDS="1", **SLOW_BACKSTOPS)
    ids = insert_accepted(engine, fault_project, 400)
    stack.start_beat()
    worker = stack.start_worker("worker", "--concurrency", "2")
    stack.publish_prepare(ids)
    try:
        injection = wait_mid_call(engine, ids, lambda: held.ids, lambda: held.open)
        stopped = time.time()
        os.kill(worker.pid, signal.SIGTERM)
        stack.wait_for_log("worker", "Warm shutdown")
        os.kill(worker.pid, signal.SIGQUIT)
        with suppress(subprocess.TimeoutExpired):  # then the supervisor's SIGKILL, below
            worker.wait(timeout=SUPERVISOR_GRACE)
    finally:
        if worker.poll() is None:
            stack.signal("worker", signal.SIGKILL)
        held.release()
    at_stop = {**injection.show(), "exit status": worker.returncode}
    stack.start_worker("worker-again", "--concurrency", "2")
    seen = wait_until_terminal(engine, ids, timeout=SETTLE_TIMEOUT)
    tally = assert_ledger_agrees(ids, seen, provider)
    print(tally.report(f"SIGTERM outliving the soft shutdown, settled {time.time() - stopped:.1f} s after it", at_stop))
    assert set(seen.values()) <= {"sent", "unknown"}
    assert {seen[i] for i in held.ids} == {"unknown"}  # the hung call's messages: nobody can tell
