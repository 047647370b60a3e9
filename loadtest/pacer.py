"""Jobs at a fixed rate, open loop: each starts at its scheduled time, whatever became of
the ones before it.

A closed loop (N clients, each waiting for its answer before the next request) slows down
when the server does, and so hides the very backlog a soak is looking for. Here a
scheduler thread hands each job to a thread pool at its due time; a job that starts more
than LATE_AFTER behind schedule is counted, so a load generator that could not keep up
says so instead of quietly sending less. Pending jobs are bounded: when the pool is that
far behind, the scheduler waits (and the late count shows it).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

LATE_AFTER = 0.010  # seconds behind schedule that make a start late


class Pacer:
    def __init__(self, threads: int, max_pending: int | None = None):
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix="pacer")
        self.slots = threading.BoundedSemaphore(max_pending or 4 * threads)
        self.idle = threading.Condition()
        self.pending = 0
        self.lags: list[float] = []  # seconds behind schedule, per job started, in order

    def run(self, rate: float, seconds: float, job: Callable[[], None], stop: threading.Event) -> int:
        """Start `rate` x `seconds` jobs, the nth n / rate seconds from now, until `stop` is set.

        `job` records its own outcome; it must not raise. Returns how many were started."""
        count = round(rate * seconds)
        begin = time.monotonic()
        for n in range(count):
            due = begin + n / rate
            delay = due - time.monotonic()
            if (delay > 0 and stop.wait(delay)) or stop.is_set():
                return n
            self.slots.acquire()
            with self.idle:
                self.pending += 1
            self.pool.submit(self._start, due, job)
        return count

    def _start(self, due: float, job: Callable[[], None]) -> None:
        self.lags.append(time.monotonic() - due)
        try:
            job()
        finally:
            self.slots.release()
            with self.idle:
                self.pending -= 1
                self.idle.notify_all()

    def wait_idle(self) -> None:
        """Wait until every job handed out so far has finished."""
        with self.idle:
            self.idle.wait_for(lambda: self.pending == 0)

    def close(self) -> None:
        self.pool.shutdown(wait=True)


def late_starts(lags: list[float]) -> tuple[int, float]:
    """How many of these starts were late, and the worst lag."""
    return sum(1 for lag in lags if lag > LATE_AFTER), max(lags, default=0.0)
