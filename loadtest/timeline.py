"""The soak's samples over time: backlog, rates, CPU and memory; as CSV and as a plot.

Backlog is every message of the project that is neither terminal nor at the provider:
scheduled, accepted, ready or retrying (retrying ones wait for their backoff on purpose,
and are counted all the same: they are not delivered yet). `sending` is at the provider.
"""

from __future__ import annotations

import csv
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker
from usage import RoleUsage, Usage

from app.enums import ACTIVE_STATUSES, MessageStatus

WAITING = [status.value for status in ACTIVE_STATUSES if status is not MessageStatus.SENDING]
# Backlog growth counts above this share of the sends in the interval (with a floor): noise,
# and retries parking for their backoff, stay below it.
GROWTH_SHARE, GROWTH_FLOOR = 0.02, 50
# The API is behind when it accepted less than this share of the rate asked: the sends then
# wait in the load generator, where the backlog cannot see them.
ACCEPTED_SHARE = 0.95


@dataclass(frozen=True)
class Sample:
    at: float  # wall-clock time
    target: float  # sends per second asked of the load generator
    accepted_per_s: float
    delivered_per_s: float
    backlog: int
    sending: int
    usage: dict[str, RoleUsage]


def fell_behind(previous: Sample, sample: Sample, sample_every: float) -> bool:
    """Whether `sample`, taken while sending, shows the stack behind the rate asked: the
    backlog grew since `previous`, or the API accepted less than it was sent."""
    threshold = max(GROWTH_FLOOR, GROWTH_SHARE * sample.target * sample_every)
    grew = sample.backlog - previous.backlog > threshold
    return grew or sample.accepted_per_s < ACCEPTED_SHARE * sample.target


def active_counts(db: sessionmaker[Session], project_id: str) -> dict[str, int]:
    """The project's messages by status, for the statuses that are not final yet."""
    with db() as session:
        rows = session.execute(
            text(
                "SELECT status, count(*) FROM messages"
                " WHERE project_id = :project AND status = ANY(CAST(:active AS text[])) GROUP BY status"
            ),
            {"project": project_id, "active": [status.value for status in ACTIVE_STATUSES]},
        ).all()
    return {status: count for status, count in rows}


def backlog(counts: dict[str, int]) -> int:
    return sum(counts.get(status, 0) for status in WAITING)


class Sampler:
    """Takes a sample every `every` seconds on its own thread; `on_sample` sees each one."""

    def __init__(
        self,
        db: sessionmaker[Session],
        project_id: str,
        accepted: Callable[[], int],
        delivered: Callable[[], int],
        target: Callable[[], float],
        usage: Usage,
        on_sample: Callable[[Sample], None],
    ):
        self.db, self.project_id = db, project_id
        self.accepted, self.delivered, self.target = accepted, delivered, target
        self.usage = usage
        self.on_sample = on_sample
        self.samples: list[Sample] = []
        self.last = (time.time(), accepted(), delivered())

    def sample(self) -> None:
        now, accepted, delivered = time.time(), self.accepted(), self.delivered()
        elapsed = max(now - self.last[0], 1e-6)
        counts = active_counts(self.db, self.project_id)
        sample = Sample(
            at=now,
            target=self.target(),
            accepted_per_s=(accepted - self.last[1]) / elapsed,
            delivered_per_s=(delivered - self.last[2]) / elapsed,
            backlog=backlog(counts),
            sending=counts.get(MessageStatus.SENDING.value, 0),
            usage=self.usage.sample(),
        )
        self.last = (now, accepted, delivered)
        self.samples.append(sample)
        self.on_sample(sample)

    def run(self, every: float, stop: threading.Event) -> None:
        while not stop.wait(every):
            self.sample()


def write_csv(samples: list[Sample], began: float, path: Path) -> None:
    roles = list(samples[0].usage) if samples else []
    with path.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(
            ["seconds", "target_per_s", "accepted_per_s", "delivered_per_s", "backlog", "sending"]
            + [f"{role}_cpu_percent" for role in roles]
            + [f"{role}_rss_mb" for role in roles]
        )
        for s in samples:
            writer.writerow(
                [round(s.at - began, 1), s.target, round(s.accepted_per_s, 1), round(s.delivered_per_s, 1)]
                + [s.backlog, s.sending]
                + [round(s.usage[role].cpu_percent, 1) for role in roles]
                + [round(s.usage[role].rss_mb, 1) for role in roles]
            )


def plot(samples: list[Sample], began: float, title: str, path: Path, marks: dict[str, float]) -> None:
    """Rates, backlog and CPU per role against minutes; `marks` draws labelled vertical lines."""
    import matplotlib

    matplotlib.use("Agg")  # no display: a file only
    from matplotlib import pyplot

    minutes = [(s.at - began) / 60 for s in samples]
    figure, (rates, backlog, cpu) = pyplot.subplots(3, 1, sharex=True, figsize=(11, 10))
    figure.suptitle(title)
    rates.plot(minutes, [s.target for s in samples], "k--", label="target sends/s")
    rates.plot(minutes, [s.accepted_per_s for s in samples], label="accepted/s")
    rates.plot(minutes, [s.delivered_per_s for s in samples], label="delivered/s (at the provider)")
    rates.set_ylabel("messages/s")
    backlog.plot(minutes, [s.backlog for s in samples], color="tab:red", label="backlog (not yet at the provider)")
    backlog.plot(minutes, [s.sending for s in samples], color="tab:gray", label="sending")
    backlog.set_ylabel("messages")
    for role in samples[0].usage if samples else []:
        cpu.plot(minutes, [s.usage[role].cpu_percent for s in samples], label=role)
    cpu.set_ylabel("CPU % of one core")
    cpu.set_xlabel("minutes")
    for axes in (rates, backlog, cpu):
        for label, at in marks.items():
            axes.axvline((at - began) / 60, color="k", linestyle=":", linewidth=1)
            if axes is rates:
                axes.annotate(label, ((at - began) / 60, 0), rotation=90, va="bottom", fontsize=8)
        axes.legend(loc="upper left", fontsize=8)
        axes.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    pyplot.close(figure)
