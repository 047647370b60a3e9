"""The shared pace holds where the provider counts it: arrivals per second at its ledger.

A provider that says "N per second" counts the requests that reach it, in whatever second
they arrive. The pace is granted in Redis before a run claims its rows; the grant is
stamped again once they are claimed (app/delivery/pacing.py). These tests run two and
three worker processes on one pace with the machine's cores kept busy by the test itself,
so the lag between a grant and its request is what a loaded box gives, and count the
ledger's arrivals in every one-second window.
"""

from __future__ import annotations

import bisect
import statistics
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import redis
from sqlalchemy import text

from tests.faults.stack import assert_ledger_agrees, insert_accepted, wait_until_terminal
from tests.provider_server import Call

PACE = 50  # per second, shared by every worker of the test
MESSAGES = 600  # twelve seconds at the pace
OVER = 1.1  # at most this much of the pace in any one-second window at the provider
# At least this much of the pace, first arrival to last: the window is 1.1 s (WINDOW_MS), and
# each grant holds its room from its grant through its claim to its stamp (~0.1 s here).
UNDER = 0.7
BUSY_SECONDS = 60  # the longest the test's own load may outlive it
SPINNERS = 4  # processes that spin, beside the stack: twice the cores of the machine the tests run on


def test_two_worker_processes_hold_one_pace_at_the_provider(make_stack, provider, engine, fault_project):
    measure_pace_at_the_provider(2, make_stack, provider, engine, fault_project)


def test_three_worker_processes_hold_one_pace_at_the_provider(make_stack, provider, engine, fault_project):
    measure_pace_at_the_provider(3, make_stack, provider, engine, fault_project)


def measure_pace_at_the_provider(workers: int, make_stack, provider, engine, fault_project) -> None:
    leave_no_work_behind(engine)
    stack = make_stack(FAKE_RATE_PER_SEC=str(PACE))
    names = [f"w{n}" for n in range(1, workers + 1)]
    for name in names:  # all up before there is work: the first would otherwise take it all while the rest boot
        stack.start_worker(name, "--concurrency", "4")
    ids = insert_accepted(engine, fault_project, MESSAGES)
    with busy_cores(), GrantWatch(redis.Redis.from_url(stack.redis.url), "tidings:pace:fake") as grants:
        stack.start_beat()
        stack.publish_prepare(ids)
        seen = wait_until_terminal(engine, ids, timeout=MESSAGES / PACE / UNDER + 30)
    tally = assert_ledger_agrees(ids, seen, provider)
    ours = set(ids)
    calls = sorted((c for c in provider.calls if set(c.message_ids) & ours), key=lambda c: c.started)
    arrivals = sorted(c.started for c in calls for i in c.message_ids if i in ours)
    busiest = busiest_window(arrivals, 1.0)
    span = arrivals[-1] - arrivals[0]
    by_worker = dict(Counter(c.sender for c in calls for i in c.message_ids if i in ours))
    tally.report(
        f"{workers} workers, one pace of {PACE}/s, cores kept busy",
        {
            "sent by": by_worker,
            "busiest one-second window": busiest,
            "per second, first arrival to last": round(len(arrivals) / span, 1),
            "grant to request (s)": grants.gaps(calls, stamped=False),
            "stamp to request (s)": grants.gaps(calls, stamped=True),
        },
    )
    assert tally.outcomes == {"sent": len(ids)}
    assert len(by_worker) >= 2, f"one worker sent everything: {by_worker}"
    assert busiest <= PACE * OVER, busiest
    assert len(arrivals) >= PACE * UNDER * span, (len(arrivals), span)


def busiest_window(arrivals: list[float], seconds: float) -> int:
    """The most arrivals (sorted, by the provider's clock) in any window of `seconds`: the
    busiest window starts at an arrival, so trying each is enough."""
    return max((bisect.bisect_left(arrivals, at + seconds) - i for i, at in enumerate(arrivals)), default=0)


@dataclass
class Grant:
    granted: float  # the score it was first seen with (Redis's clock, seconds)
    stamped: float  # the last score seen
    count: int  # the last count seen (after any give-back)


@dataclass
class GrantWatch:
    """Every grant of one pace, read from its sorted set every few milliseconds while the
    test runs: a grant lives a window in it, so none goes unseen; a stamp moves its score."""

    client: redis.Redis
    key: str
    grants: dict[str, Grant] = field(default_factory=dict)
    done: threading.Event = field(default_factory=threading.Event)

    def __enter__(self) -> GrantWatch:
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join(5)

    def _watch(self) -> None:
        while not self.done.wait(0.002):
            for member, score in self.client.zrange(self.key, 0, -1, withscores=True):
                grant_id, count = member.decode().rsplit(":", 1)
                seen = self.grants.setdefault(grant_id, Grant(score / 1000, score / 1000, int(count)))
                seen.stamped, seen.count = score / 1000, int(count)

    def gaps(self, calls: list[Call], *, stamped: bool) -> dict[str, float]:
        """From grant (or its stamp) to its request's arrival at the provider, pairing the
        grants that sent something with the requests, each in the order they came: a grant is
        one request at this pace (a slice is less than the provider's batch)."""
        grants = sorted((g for g in self.grants.values() if g.count), key=lambda g: g.stamped)
        gaps = sorted(c.started - (g.stamped if stamped else g.granted) for g, c in zip(grants, calls, strict=False))
        if not gaps:
            return {}
        return {
            "pairs": len(gaps),
            "median": round(statistics.median(gaps), 3),
            "p95": round(gaps[int(0.95 * (len(gaps) - 1))], 3),
            "max": round(gaps[-1], 3),
            "spread": round(gaps[-1] - gaps[0], 3),
        }


@contextmanager
def busy_cores() -> Iterator[None]:
    """Processes that spin on the machine's cores while the test runs (each gives up by
    itself after BUSY_SECONDS, should the test die before it stops them)."""
    spin = f"import time\nend = time.monotonic() + {BUSY_SECONDS}\nwhile time.monotonic() < end: pass"
    spinners = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(SPINNERS)]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


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
