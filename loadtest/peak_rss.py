"""Peak resident memory of a run's processes, sampled in the background with psutil.

Each watched process is named by the run (`api`, `worker-1`, `postgres`…) and counted
with its children: gunicorn's workers, a prefork pool's children, PostgreSQL's backends.
A child's RSS includes the shared memory it touched (PostgreSQL's shared buffers, pages
a fork shares with its parent), so the totals overstate what the group really holds.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass

import psutil
import redis
from sqlalchemy import Engine, text

MB = 1024 * 1024
SAMPLE_SECONDS = 0.5


@dataclass
class Peak:
    """The largest figures seen for one watched process and its children, in bytes."""

    own: int = 0
    largest_child: int = 0
    total: int = 0
    children: int = 0

    def describe(self) -> str:
        if not self.children:
            return f"{self.own / MB:.0f} MB"
        return (
            f"{self.own / MB:.0f} MB, largest of its {self.children} children {self.largest_child / MB:.0f} MB, "
            f"{self.total / MB:.0f} MB in all"
        )


class PeakRss:
    """Samples every watched process twice a second until the block ends."""

    def __init__(self, pids: Mapping[str, int]):
        self.processes = {name: psutil.Process(pid) for name, pid in pids.items()}
        self.peaks = {name: Peak() for name in pids}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="peak-rss", daemon=True)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_SECONDS):
            self.sample()

    def sample(self) -> None:
        for name, process in self.processes.items():
            try:
                own = process.memory_info().rss
                children = [rss for child in process.children(recursive=True) if (rss := _rss(child))]
            except psutil.NoSuchProcess:  # stopped already: keep what was seen
                continue
            peak = self.peaks[name]
            peak.own = max(peak.own, own)
            peak.largest_child = max([peak.largest_child, *children])
            peak.total = max(peak.total, own + sum(children))
            peak.children = max(peak.children, len(children))

    def lines(self) -> list[str]:
        return [f"{name}: {peak.describe()}" for name, peak in self.peaks.items()]


def _rss(process: psutil.Process) -> int:
    try:
        return process.memory_info().rss
    except psutil.NoSuchProcess:
        return 0


def postgres_pid(engine: Engine) -> int:
    """The postmaster: the parent of the backend serving this connection."""
    with engine.connect() as connection:
        backend = connection.scalar(text("SELECT pg_backend_pid()"))
    return psutil.Process(backend).ppid()


def redis_pid(url: str) -> int:
    client = redis.Redis.from_url(url)
    try:
        return int(client.info("server")["process_id"])
    finally:
        client.close()
