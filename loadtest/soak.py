"""The soak: single sends at a fixed rate for minutes on end, with what a real day brings.

    python loadtest/soak.py --rate 400 --duration 15m     # issue 9's protocol
    python loadtest/soak.py --ramp --duration 15m         # find the rate that holds, then soak at it
    python loadtest/soak.py --neighbour --duration 5m     # one project's worst beside another's sends (neighbour.py)

A short benchmark lies: retries, status webhooks and a growing table only show after
minutes. So, against the whole stack as processes (the API under gunicorn, Celery
workers, beat, Redis; PostgreSQL from DATABASE_URL or embedded) and the fake provider
(150 to 250 ms a call, 3% of calls answered 503) behind the real Postmark adapter:

- single template sends to random subscribers (100,000 of them, 8 templates), started on
  schedule whatever the answers (open loop; late starts are counted);
- the 503s go through the real retry path, with the configured backoff (first wait ~30 s);
- 30% of delivered messages report an open through the inbound webhook 20 s after they
  reached the provider, and 15% of those a click;
- two dashboard readers poll the delivery log every 2 s;
- every 10 s: backlog, accepted/s, delivered/s, CPU and RSS of each process.

At the end it prints delivered/s (overall and in the second half), backlog (at the end,
and its maximum after the first two minutes), accept → provider and API latencies, dead
letters, database growth per notification, and a loss check: every accepted id is
terminal or in flight, and every one the database calls sent is in the provider's ledger.
Over the second half it measures where the CPU goes: milliseconds per delivered
notification for each kind of process (the API, the workers by stage — split them with
--split-stages to tell prepare from deliver —, beat, PostgreSQL, Redis, the fake provider,
this load generator) and all together, from /proc; the row versions written per
notification to each table, how many updates were HOT, and the WAL (see pg_writes.py); and, when
PostgreSQL keeps pg_stat_statements, its costliest statements per notification (see
statements.py).
It writes samples.csv, soak.png and the processes' logs into loadtest/results/<run>/,
and appends the figures to BENCHMARKS.md (unless --no-record).

Ramp mode starts at 150/s and adds 50/s a minute until the stack falls behind for two
samples in a row — the backlog grows, or the API accepts less than 95% of the rate — past
each step's first 30 s (while the sends parked for a retry pile up to their new level),
waits for the backlog to drain, then soaks at the highest rate that held.

The process layout under test is set with --api-workers, --api-threads, --workers, --pool,
--concurrency and --split-stages; --profile adds, per process, the functions of ours where
py-spy found the time going.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import hotspots
import neighbour
import pg_writes
import statements
from api_client import Api, Calls
from engagement import ENGAGEMENT_THREADS, Deliveries, Engagement
from pacer import LATE_AFTER, Pacer, late_starts
from report import append_section
from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker
from timeline import Sample, Sampler, active_counts, backlog, fell_behind, plot, write_csv
from usage import ALL_PROCESSES, Usage, ms_per_notification
from workload import (
    POSTMARK_WEBHOOK_PASSWORD,
    POSTMARK_WEBHOOK_USER,
    Layout,
    Setup,
    add_setup_arguments,
    clock,
    database_bytes,
    duration,
    layout_from,
    set_up,
    subscriber_id,
)

from app.delivery.retry import LADDER_SECONDS
from app.enums import ACTIVE_STATUSES

ACTIVE = {status.value for status in ACTIVE_STATUSES}
AT_THE_PROVIDER = {"sent", "delivered", "bounced", "complained"}
DRAIN_TIMEOUT = 300.0  # seconds the ramp waits for the backlog to drain before its soak
PEER = (
    "Peer (Node, PostgreSQL, Redis on 2 vCPU): held 200/s for 15 min (accept→provider median 0.4 s, "
    "p95 14 s; API p50 7 ms, p95 121 ms; 5 dead of 179,987); at 400/s delivered 237/s, 144,247 waiting "
    "at the end, API p95 478 ms."
)
# The kind of process each watched role is, for CPU per notification; workers go by their stage.
KINDS = {
    "api": "API",
    "beat": "beat",
    "postgres": "PostgreSQL",
    "redis": "Redis",
    "provider": "fake provider",
    "load": "load generator",
}
WORKER_KINDS = {"prepare": "prepare worker", "deliver": "deliver worker", "all": "worker (all stages)"}


def percentiles(values: list[float], points: tuple[int, ...] = (50, 95, 99)) -> list[float] | None:
    if not values:
        return None
    ordered = sorted(values)
    return [ordered[min(len(ordered) - 1, int(point / 100 * len(ordered)))] for point in points]


def spread(values: list[float], scale: float, unit: str) -> str:
    found = percentiles(values)
    if found is None:
        return "none"
    p50, p95, p99 = (value * scale for value in found)
    digits = 0 if unit == "ms" else 2
    return f"p50 {p50:.{digits}f} {unit}, p95 {p95:.{digits}f} {unit}, p99 {p99:.{digits}f} {unit}"


def process_kinds(roles: list[str], layout: Layout) -> dict[str, str]:
    """Each watched role's kind of process: `worker<n>` by the stage the layout gives it."""
    return {role: KINDS.get(role) or WORKER_KINDS[layout.stage(int(role.removeprefix("worker")))] for role in roles}


class Soak:
    """One run's load, the threads that follow it, and the samples."""

    def __init__(self, args: argparse.Namespace, setup: Setup, run_dir: Path):
        self.args = args
        self.workload = setup.workload
        self.db = setup.db
        self.roles = setup.roles()
        self.run_dir = run_dir
        self.calls = Calls()
        connections = args.clients + ENGAGEMENT_THREADS + args.readers
        self.api = Api(setup.stack.api_url, connections, self.calls, {"Authorization": f"Bearer {self.workload.key}"})
        self.random = random.Random(args.seed)
        self.accepted: dict[str, float] = {}  # message id → when its 202 arrived
        self.rate = 0.0
        self.pacer = Pacer(args.clients)
        auth = (POSTMARK_WEBHOOK_USER, POSTMARK_WEBHOOK_PASSWORD)
        self.engagement = Engagement(self.api, auth, args.open_delay, args.open_share, args.click_share, args.seed)
        self.deliveries = Deliveries(setup.provider_url, self.engagement.delivered)
        self.sampler = Sampler(
            self.db,
            self.workload.project_id,
            accepted=lambda: len(self.accepted),
            delivered=lambda: len(self.deliveries.first),
            target=lambda: self.rate,
            usage=Usage(self.roles),
            on_sample=self.on_sample,
        )
        self.stop = threading.Event()
        self.behind = threading.Event()
        self.lagging = 0
        self.warm_until = 0.0  # wall-clock time before which the ramp's step is warming up
        self.kinds = process_kinds(list(self.roles), layout_from(args))
        self.counting = False  # from the measured soak's start
        self.counting_statements = False  # the same, when PostgreSQL keeps them
        # By the time of the sample:
        self.writes: dict[float, pg_writes.Written] = {}
        self.statement_totals: dict[float, dict[int, statements.Statement]] = {}

    def on_sample(self, sample: Sample) -> None:
        self.watch_for_lag(sample)
        if self.counting:
            self.writes[sample.at] = pg_writes.snapshot(self.db)
        if self.counting_statements:
            self.statement_totals[sample.at] = statements.snapshot(self.db)

    def send_one(self) -> None:
        n = self.random.randrange(self.workload.subscribers)
        body = {
            "channel": "email",
            "to": {"subscriber_id": subscriber_id(n)},
            "template": self.random.choice(self.workload.templates),
            "data": {"ref": f"order A-{n}"},
        }
        status, data = self.api.call("send", "POST", "/v1/messages", body)
        if status == 202:
            self.accepted[json.loads(data)["id"]] = time.time()

    def read_log(self) -> None:
        """A dashboard: the newest page of the delivery log, every `read_every` seconds."""
        while not self.stop.wait(self.args.read_every):
            self.api.call("read", "GET", "/v1/events?limit=50")

    @contextmanager
    def running(self) -> Iterator[None]:
        """The feed follower, the engagement, the readers and the sampler run while the caller sends."""
        threads = [
            threading.Thread(target=self.deliveries.follow, args=(self.stop,), name="feed"),
            threading.Thread(target=self.engagement.run, args=(self.stop,), name="engagement"),
            threading.Thread(target=self.sampler.run, args=(self.args.sample_every, self.stop), name="sampler"),
            *(threading.Thread(target=self.read_log, name=f"reader{n}") for n in range(self.args.readers)),
        ]
        for thread in threads:
            thread.start()
        try:
            yield
        finally:
            self.stop.set()
            for thread in threads:
                thread.join()
            self.pacer.close()
            self.api.close()

    def send(self, rate: float, seconds: float, stop: threading.Event | None = None) -> None:
        """Send at `rate` for `seconds` (or until `stop`), then let the last sends answer and
        catch up with the provider's feed."""
        self.rate = rate
        self.pacer.run(rate, seconds, self.send_one, stop or threading.Event())
        self.pacer.wait_idle()
        self.deliveries.poll()

    def profile(self, delay: float, seconds: float) -> None:
        """py-spy on the API and each worker for `seconds`, starting `delay` seconds from now."""
        if self.stop.wait(delay):
            return
        recorders = [
            hotspots.record(role.root.pid, seconds, self.run_dir / f"profile-{name}.txt")
            for name, role in self.roles.items()
            if name == "api" or name.startswith("worker")
        ]
        for recorder in recorders:
            recorder.wait()

    def watch_for_lag(self, sample: Sample) -> None:
        """Set `behind` once the stack fell behind for two samples in a row while sending —
        the backlog grew, or the API accepted less than the rate asked — over intervals that
        began after the step's warm-up: for the first retry wait, the sends parked for their
        retry pile up to their level at the new rate, a growth that stops by itself. A sample
        whose interval began earlier also counts time at the old rate (or before the first
        send) against the new one, and would call a step lost that was not."""
        samples = self.sampler.samples
        if not sample.target or len(samples) < 2 or samples[-2].at < self.warm_until:
            return
        self.lagging = self.lagging + 1 if fell_behind(samples[-2], sample, self.args.sample_every) else 0
        if self.lagging >= 2:
            self.behind.set()

    def ramp(self) -> tuple[float | None, list[str]]:
        """Step the rate up until the stack falls behind: the highest rate that held (if any), and each step's fate."""
        rate, held, steps = self.args.ramp_start, None, []
        while rate <= self.args.max_rate:
            self.behind.clear()
            self.lagging = 0
            self.warm_until = time.time() + LADDER_SECONDS[0] * self.args.retry_delay_scale
            self.send(rate, self.args.step, self.behind)
            if self.behind.is_set():
                steps.append(f"{rate:g}/s: fell behind")
                break
            steps.append(f"{rate:g}/s held")
            held, rate = rate, rate + self.args.ramp_step
        return held, steps

    def wait_for_drain(self, limit: int) -> None:
        """Until the backlog is at most `limit` (or DRAIN_TIMEOUT passed)."""
        deadline = time.monotonic() + DRAIN_TIMEOUT
        while time.monotonic() < deadline and backlog(active_counts(self.db, self.workload.project_id)) > limit:
            time.sleep(self.args.sample_every)


def statuses_of(db: sessionmaker[Session], project_id: str) -> dict[str, str]:
    with db() as session:
        rows = session.execute(
            text("SELECT id::text, status FROM messages WHERE project_id = :project"), {"project": project_id}
        ).all()
    return dict(rows)


def loss_check(accepted: dict[str, float], statuses: dict[str, str], first: dict[str, float]) -> Counter[str]:
    """Each accepted id is terminal, in flight, or lost: missing from the database, or
    called sent there but never seen by the provider. `first` must be read after
    `statuses`: the provider records a message before it answers, so before it is sent."""
    verdicts: Counter[str] = Counter()
    for message_id in accepted:
        status = statuses.get(message_id)
        if status is None:
            verdicts["missing from the database"] += 1
        elif status in AT_THE_PROVIDER and message_id not in first:
            verdicts[f"{status} but never at the provider"] += 1
        else:
            verdicts["in flight" if status in ACTIVE else "terminal"] += 1
    return verdicts


@dataclass(frozen=True)
class Window:
    """The measured soak: from `began` to `ended`, the backlog at its end, the database's
    size at both ends, the pacer's first job in it, and why PostgreSQL gave no statement
    figures (None when it did)."""

    began: float
    ended: float
    backlog_at_end: int
    bytes_before: int
    bytes_after: int
    first_job: int
    without_statements: str | None

    @property
    def seconds(self) -> float:
        return self.ended - self.began

    @property
    def half(self) -> float:
        """When the second half began."""
        return self.began + self.seconds / 2

    def holds(self, at: float) -> bool:
        return self.began <= at <= self.ended


def summary(soak: Soak, rate: float, window: Window) -> tuple[list[str], int]:
    """The closing figures for the measured window, and how many messages were lost."""
    args, first = soak.args, soak.deliveries.first
    accepted = {mid: at for mid, at in soak.accepted.items() if at >= window.began}
    delivered = [at for at in first.values() if window.holds(at)]
    half = window.half
    samples = [s for s in soak.sampler.samples if window.holds(s.at)]
    settled = [s.backlog for s in samples if s.at >= window.began + args.settle]
    statuses = statuses_of(soak.db, soak.workload.project_id)
    soak.deliveries.poll()
    verdicts = loss_check(soak.accepted, statuses, first)
    lost = {verdict: n for verdict, n in verdicts.items() if verdict not in ("terminal", "in flight")}
    sends = [c for c in soak.calls.by_kind["send"] if window.holds(c.at)]
    refused = Counter(c.status for c in sends if c.status != 202)
    late, max_lag = late_starts(soak.pacer.lags[window.first_job :])
    posted = soak.engagement.posted
    calls = soak.deliveries.calls()

    def api(kind: str) -> str:
        return spread([c.seconds for c in soak.calls.by_kind[kind] if window.holds(c.at)], 1000, "ms")

    reached = [first[mid] - at for mid, at in accepted.items() if mid in first]
    growth = window.bytes_after - window.bytes_before
    return [
        f"soak: {rate:g}/s for {clock(window.seconds)}, {soak.workload.subscribers:,} subscribers, "
        f"{len(soak.workload.templates)} templates; {layout_from(args).describe()}",
        f"load: {len(sends):,} sends, {late:,} started late (> {LATE_AFTER * 1000:.0f} ms, worst {max_lag:.2f} s); "
        f"{len(sends) - sum(refused.values()):,} accepted, {sum(refused.values()):,} refused"
        + (f" {dict(refused)}" if refused else ""),
        f"delivered/s: {len(delivered) / window.seconds:.1f} overall, "
        f"{sum(1 for at in delivered if at >= half) / (window.ended - half):.1f} in the second half (target {rate:g})",
        f"backlog: {window.backlog_at_end:,} at the end, "
        f"max {max([*settled, window.backlog_at_end]):,} after {clock(args.settle)}",
        f"accept→provider: {spread(reached, 1, 's')} ({len(reached):,} of {len(accepted):,} reached the provider)",
        f"API sends: {api('send')}",
        f"API reads: {api('read')}",
        f"API inbound webhooks: {api('inbound')}",
        f"engagement: {sum(n for (kind, _), n in posted.items() if kind == 'Open'):,} opens and "
        f"{sum(n for (kind, _), n in posted.items() if kind == 'Click'):,} clicks posted, "
        f"{sum(n for (_, status), n in posted.items() if status != 200):,} refused",
        f"provider, whole run: {sum(calls.values()):,} calls, {calls.get('503', 0):,} answered 503 (retried), "
        f"{soak.deliveries.duplicates():,} messages reached it twice",
        f"dead letters: {Counter(statuses.values())['dead']:,}",
        f"database growth: {growth / max(len(accepted), 1):,.0f} bytes per notification (+{growth / 1e6:,.1f} MB)",
        f"lost: {sum(lost.values()):,} ({verdicts['terminal']:,} terminal, {verdicts['in flight']:,} in flight"
        + "".join(f"; {n:,} {verdict}" for verdict, n in lost.items())
        + ")",
        f"CPU % of one core (mean) and peak RSS: {usage_by_role(samples)}",
        *(
            f"where {path.stem.removeprefix('profile-')} spends its time: {hotspots.hot_spots(path)}"
            for path in sorted(soak.run_dir.glob("profile-*.txt"))
        ),
    ], sum(lost.values())


def per_notification(soak: Soak, rate: float, window: Window) -> tuple[list[str], list[str]]:
    """Where the CPU went per notification delivered in the second half (from its first
    sample to the window's last), by kind of process; then as tables the row versions
    and WAL written, and PostgreSQL's statements or a line saying why there are none."""
    samples = [s for s in soak.sampler.samples if window.half <= s.at <= window.ended]
    if len(samples) < 2:
        return ["CPU ms per delivered notification: fewer than two samples in the second half"], []
    start, end = samples[0], samples[-1]
    delivered = sum(1 for at in soak.deliveries.first.values() if start.at <= at <= end.at)
    heading = f"CPU ms per delivered notification, second half ({clock(end.at - start.at)}, {delivered:,} delivered)"
    if not delivered:
        return [f"{heading}: none delivered"], []
    cpu = ms_per_notification(start.usage, end.usage, soak.kinds, delivered)
    cores = os.cpu_count() or 1
    line = (
        f"{heading}: "
        + ", ".join(f"{kind} {ms:.2f}" for kind, ms in cpu.items() if kind != ALL_PROCESSES)
        + f"; {ALL_PROCESSES} {cpu[ALL_PROCESSES]:.2f} ({cores} cores allow {1000 * cores / rate:.2f} at {rate:g}/s)"
    )
    written = pg_writes.since(soak.writes[start.at], soak.writes[end.at])
    tables = ["Row versions written per delivered notification, second half", ""]
    tables += pg_writes.table(written, delivered)
    if window.without_statements:
        return [line, f"statements: {window.without_statements}"], tables
    counted = statements.since(soak.statement_totals[start.at], soak.statement_totals[end.at])
    heading = (
        f"PostgreSQL statements per delivered notification, second half: the top {statements.TOP} by time, "
        f"and any run at least {statements.FREQUENT:g} times a notification"
    )
    return [line], [*tables, "", heading, "", *statements.table(counted, delivered)]


def usage_by_role(samples: list[Sample]) -> str:
    if not samples:
        return "no samples (the soak was shorter than a sample interval)"
    return ", ".join(
        f"{role} {sum(s.usage[role].cpu_percent for s in samples) / len(samples):.0f}% "
        f"{max(s.usage[role].rss_mb for s in samples):.0f} MB"
        for role in samples[-1].usage
    )


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=400, help="sends per second (default 400)")
    parser.add_argument("--duration", type=duration, default=900, help="how long to soak: 90s, 15m (default 15m)")
    parser.add_argument("--ramp", action="store_true", help="find the sustainable rate first, then soak at it")
    parser.add_argument("--ramp-start", type=float, default=150, help="the ramp's first rate (default 150)")
    parser.add_argument("--ramp-step", type=float, default=50, help="added at each step (default 50)")
    parser.add_argument("--step", type=duration, default=60, help="length of a ramp step (default 1m)")
    parser.add_argument("--max-rate", type=float, default=3000, help="the ramp stops here at the latest")
    parser.add_argument("--clients", type=int, default=128, help="sender threads (default 128)")
    parser.add_argument("--readers", type=int, default=2, help="dashboard readers of the delivery log")
    parser.add_argument("--read-every", type=duration, default=2, help="between a reader's polls (default 2s)")
    parser.add_argument("--sample-every", type=duration, default=10, help="between samples (default 10s)")
    parser.add_argument("--settle", type=duration, default=120, help="backlog max is taken after this (2m)")
    parser.add_argument("--open-delay", type=duration, default=20, help="delivery → open webhook (default 20s)")
    parser.add_argument("--open-share", type=float, default=0.30, help="delivered messages opened (0.30)")
    parser.add_argument("--click-share", type=float, default=0.15, help="opened messages clicked (0.15)")
    parser.add_argument("--retry-delay-scale", type=float, default=1.0, help="RETRY_DELAY_SCALE for the stack")
    parser.add_argument("--profile", action="store_true", help="py-spy the API and workers mid-soak (up to 60 s)")
    add_setup_arguments(parser)
    args = parser.parse_args(argv)
    if not (0 < args.rate <= 10_000 and 0 < args.ramp_start <= args.max_rate <= 10_000):
        parser.error("rates must be between 0 and 10,000 per second, the ramp's start below its maximum")
    if args.subscribers < 1 or args.clients < 1:
        parser.error("need at least one subscriber and one client")
    return args


@dataclass
class Outcome:
    lines: list[str]
    lost: int
    samples: list[Sample]
    started: float
    title: str
    marks: dict[str, float]  # labelled moments for the plot
    table: list[str] = field(default_factory=list)  # row versions and statements, in Markdown


def run(args: argparse.Namespace, run_dir: Path) -> Outcome:
    """Set up, load, measure."""
    with set_up("soak", args, run_dir, RETRY_DELAY_SCALE=str(args.retry_delay_scale)) as setup:
        return measure(Soak(args, setup, run_dir))


def measure(soak: Soak) -> Outcome:
    """The ramp (when asked for), then the soak at its rate; the summary of the soak."""
    args, started, lines = soak.args, time.time(), []
    with soak.running():
        rate = args.rate
        if args.ramp:
            print(f"ramp from {args.ramp_start:g}/s, +{args.ramp_step:g}/s every {clock(args.step)} …", flush=True)
            held, steps = soak.ramp()
            verdict = f"sustainable rate: {held:g}/s" if held else "no rate held"
            lines.append(f"ramp: {'; '.join(steps)}; {verdict}")
            print(lines[-1], flush=True)
            if held is None:
                return Outcome(lines, 0, soak.sampler.samples, started, lines[-1], {})
            soak.rate = 0.0  # nothing is sent while the backlog drains
            soak.wait_for_drain(limit=int(held))
            rate = held
        print(f"soak at {rate:g}/s for {clock(args.duration)} …", flush=True)
        without_statements = statements.start(soak.db)
        soak.counting, soak.counting_statements = True, without_statements is None
        bytes_before, began, first_job = database_bytes(soak.db), time.time(), len(soak.pacer.lags)
        profiling = (min(args.settle, args.duration / 3), min(60, args.duration / 3)) if args.profile else None
        profiler = threading.Thread(target=soak.profile, args=profiling) if profiling else None
        if profiler is not None:
            profiler.start()
        soak.send(rate, args.duration)
        if profiler is not None:
            profiler.join()
        ended, waiting = time.time(), backlog(active_counts(soak.db, soak.workload.project_id))
        window = Window(began, ended, waiting, bytes_before, database_bytes(soak.db), first_job, without_statements)
    figures, lost = summary(soak, rate, window)  # with every thread of the run stopped
    where_it_goes, table = per_notification(soak, rate, window)
    marks = {"soak": began} if args.ramp else {}
    return Outcome(lines + figures + where_it_goes, lost, soak.sampler.samples, started, figures[0], marks, table)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--neighbour" in argv:
        return neighbour.main([arg for arg in argv if arg != "--neighbour"])
    args = parse(argv)
    run_dir = args.results / f"{'ramp' if args.ramp else 'soak'}-{datetime.now():%Y%m%d-%H%M%S}"
    outcome = run(args, run_dir)
    write_csv(outcome.samples, outcome.started, run_dir / "samples.csv")
    picture = run_dir / "soak.png"
    plot(outcome.samples, outcome.started, outcome.title, picture, outcome.marks)
    lines = [*outcome.lines, f"plot: {picture}"]
    table = "\n\n" + "\n".join(outcome.table) if outcome.table else ""  # after the lines, a blank line between
    print("\n".join(lines) + table)
    if not args.no_record:
        heading = "Soak: ramp, then hold the sustainable rate" if args.ramp else f"Soak at {args.rate:g}/s"
        append_section(heading, "\n".join(f"- {line}" for line in lines) + f"{table}\n\n{PEER}")
    return 1 if outcome.lost else 0


if __name__ == "__main__":
    sys.exit(main())
