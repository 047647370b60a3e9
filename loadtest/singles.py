"""Single sends under load, beside the ceiling of the same run.

End to end (first): a fixed rate (400/s for 60 s) spread over N HTTP clients, through the
API, Celery workers in the chosen layout, beat and the `log` provider: accept → sent
latency (sent_at - created_at, by the database's clock), the backlog once a second, and
every message terminal at the end.

Throughput (then, the workers stopped): the N clients (8 threads, each a requests.Session
keeping its connection) send POST /v1/messages one after another for S seconds (30) to the
API (`tidings api`: gunicorn, 2 workers; or with --server granian, granian's WSGI server
with the same workers and threads), then the same to a bare endpoint under the same server
settings that does one INSERT and one broker publish (loadtest/bare_api.py): req/s, p50/p99,
and ours as a share of the bare one. Every id the API answered must be in PostgreSQL.

    python loadtest/singles.py [--clients 8] [--seconds 30] [--rate 400] [--e2e-seconds 60] [--layout split]
        [--server gunicorn|granian]

Against DATABASE_URL / REDIS_URL when set, embedded servers otherwise. Figures go to stdout
and, unless --no-append, BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import signal
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import bare_api
import progress
import requests
from harness import LAYOUTS, Processes, bench_env, describe_layout, servers
from report import append_section
from sqlalchemy import Engine, create_engine, text

from app.config import Settings, use_settings
from app.db import session_factory
from app.delivery.queues import all_queues, prepare_queue
from app.enums import KeyKind, Priority
from app.redis_client import redis_for
from app.runtime import migrate
from app.services import projects
from tasks.celery_app import configure

API_WORKERS = 2
WARM_UP = 5  # requests per client before the clock starts: connections, pools, caches
MAX_REQUESTS = 1_000_000  # per client, whatever the duration
LATE_SECONDS = 0.05  # a fixed-rate send that leaves later than this after its slot is late
BACKLOG_SECONDS = 1.0
BODY = (
    '{"channel": "email", "to": {"email": "u%d-%s@example.com"}, '
    '"content": {"subject": "Your sign-in code", "text": "Your code is 480 213. It expires in 10 minutes."}}'
)


@dataclass
class Load:
    """What the clients saw: a latency and an id per answered send."""

    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)
    errors: Counter = field(default_factory=Counter)
    late: int = 0
    skipped: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record(self, latency: float, answer: requests.Response) -> None:
        with self.lock:
            if answer.status_code == 202:
                self.latencies.append(latency)
                self.ids.append(answer.json()["id"])
            else:
                self.errors[answer.status_code] += 1

    def describe(self) -> str:
        ranked = statistics.quantiles(self.latencies, n=100, method="inclusive") if len(self.latencies) > 1 else []
        p50, p99 = (ranked[49], ranked[98]) if ranked else (0.0, 0.0)
        errors = ", ".join(f"{n} answered {status}" for status, n in self.errors.items()) or "none"
        return (
            f"{len(self.ids)} accepted in {self.seconds:.1f} s = {len(self.ids) / self.seconds:.0f} req/s, "
            f"p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms; errors: {errors}"
        )


class Sender:
    """One client: a session of its own, so its connection stays open between sends."""

    def __init__(self, url: str, key: str, run: str):
        self.session = requests.Session()
        self.url = f"{url}/v1/messages"
        self.headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        self.run = run
        self.sent = 0

    def send(self, load: Load | None) -> None:
        body = BODY % (self.sent, self.run)
        self.sent += 1
        started = time.perf_counter()
        answer = self.session.post(self.url, data=body, headers=self.headers, timeout=30)
        if load is not None:
            load.record(time.perf_counter() - started, answer)


def run_clients(senders: list[Sender], client: Callable[[int, Sender], None]) -> None:
    """Run `client(index, sender)` in a thread per sender; the first exception is raised once all are done."""
    failures: list[BaseException] = []

    def guarded(index: int, sender: Sender) -> None:
        try:
            client(index, sender)
        except BaseException as error:
            failures.append(error)

    threads = [threading.Thread(target=guarded, args=pair) for pair in enumerate(senders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]


def closed_loop(url: str, key: str, clients: int, seconds: float) -> Load:
    """Every client sends its next request as soon as the last is answered, for `seconds`."""
    load, run = Load(), uuid.uuid4().hex[:8]
    senders = [Sender(url, key, f"{run}-{n}") for n in range(clients)]
    run_clients(senders, lambda _, sender: [sender.send(None) for _ in range(WARM_UP)])
    started = time.perf_counter()
    deadline = started + seconds

    def client(_: int, sender: Sender) -> None:
        for _ in range(MAX_REQUESTS):
            if time.perf_counter() >= deadline:
                return
            sender.send(load)

    run_clients(senders, client)
    load.seconds = time.perf_counter() - started
    return load


def fixed_rate(url: str, key: str, clients: int, rate: float, seconds: float, patience: float = 2) -> Load:
    """`rate` sends a second for `seconds`, each at its own slot; client n takes every n-th slot.

    A server that cannot keep up makes sends late; past `patience` times the planned time the
    clients stop, and the slots left are counted as skipped.
    """
    load, run = Load(), uuid.uuid4().hex[:8]
    senders = [Sender(url, key, f"{run}-{n}") for n in range(clients)]
    total = int(rate * seconds)
    started = time.perf_counter() + 0.1
    give_up = started + patience * seconds

    def client(first: int, sender: Sender) -> None:
        for slot in range(first, total, clients):
            due = started + slot / rate
            if time.perf_counter() > give_up:
                with load.lock:
                    load.skipped += len(range(slot, total, clients))
                return
            wait = due - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            elif -wait > LATE_SECONDS:
                with load.lock:
                    load.late += 1
            sender.send(load)

    run_clients(senders, client)
    load.seconds = time.perf_counter() - started
    return load


@contextmanager
def backlog_samples(engine: Engine, project_id: str) -> Iterator[list[int]]:
    """The project's messages not yet terminal, once a second while the block runs."""
    samples: list[int] = []
    stop = threading.Event()

    def sample() -> None:
        with engine.connect() as connection:
            while not stop.wait(BACKLOG_SECONDS):
                samples.append(progress.pending(connection, project_id))

    thread = threading.Thread(target=sample, name="backlog", daemon=True)
    thread.start()
    try:
        yield samples
    finally:
        stop.set()
        thread.join()


@dataclass
class EndToEnd:
    load: Load
    statuses: Counter
    backlog: list[int]
    latencies: tuple[float, float, float]  # accept → sent: p50, p99, max

    def describe(self, rate: float, seconds: float, clients: int) -> list[str]:
        p50, p99, slowest = self.latencies
        backlog = self.backlog or [0]
        third = max(len(backlog) // 3, 1)
        return [
            f"end to end at {rate:.0f}/s for {seconds:.0f} s ({clients} clients; sends late by more than "
            f"{LATE_SECONDS * 1000:.0f} ms: {self.load.late}, skipped: {self.load.skipped}): {self.load.describe()}",
            f"  accept → sent: p50 {p50 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms, max {slowest * 1000:.0f} ms",
            f"  statuses: {progress.describe(self.statuses)}; lost: {progress.lost(len(self.load.ids), self.statuses)}",
            f"  backlog (not yet terminal, once a second): {' '.join(map(str, backlog))}",
            f"  backlog mean: first third {statistics.fmean(backlog[:third]):.0f}, "
            f"last third {statistics.fmean(backlog[-third:]):.0f}; max {max(backlog)}",
        ]


SENT_LATENCY = text(
    """
    SELECT percentile_cont(ARRAY[0.5, 0.99]) WITHIN GROUP (ORDER BY extract(epoch FROM sent_at - created_at)),
           max(extract(epoch FROM sent_at - created_at))
    FROM messages WHERE project_id = :project AND status = 'sent'
    """
)


def end_to_end(api: str, key: str, engine: Engine, project_id: str, args: argparse.Namespace) -> EndToEnd:
    """The fixed-rate load, then the wait for its last message (as long again as the load, or 30 s)."""
    with backlog_samples(engine, project_id) as backlog:
        load = fixed_rate(api, key, args.clients, args.rate, args.e2e_seconds, args.patience)
        deadline = time.monotonic() + max(args.e2e_seconds, 30)
        with engine.connect() as connection:
            while progress.pending(connection, project_id) and time.monotonic() < deadline:
                time.sleep(0.2)
    with engine.connect() as connection:
        quantiles, slowest = connection.execute(SENT_LATENCY, {"project": project_id}).one()
    p50, p99 = quantiles or (0.0, 0.0)
    return EndToEnd(load, progress.statuses(engine, project_id), backlog, (p50, p99, float(slowest or 0)))


def stored(engine: Engine, ids: list[str]) -> int:
    with engine.connect() as connection:
        return connection.scalar(
            text("SELECT count(*) FROM messages WHERE id = ANY(CAST(:ids AS uuid[]))"), {"ids": ids}
        )


@contextmanager
def bare_table(engine: Engine) -> Iterator[None]:
    """The bare endpoint's scratch table, shaped like messages, for the length of the block."""
    with engine.begin() as connection:
        connection.execute(text(f"DROP TABLE IF EXISTS {bare_api.TABLE}"))
        connection.execute(text(f"CREATE TABLE {bare_api.TABLE} (LIKE messages INCLUDING ALL)"))
    try:
        yield
    finally:
        with engine.begin() as connection:
            connection.execute(text(f"DROP TABLE {bare_api.TABLE}"))


def purge(settings: Settings, queues: list[str]) -> None:
    """Drop the tasks nobody will consume: the throughput run's prepares and the bare endpoint's."""
    with configure(settings).connection_for_write() as connection:
        for queue in queues:
            connection.default_channel.queue_purge(queue)


def start_server(processes: Processes, server: str, app: str, settings: Settings) -> str:
    """`app` ("api": ours, or "bare") under `server`, with the API's workers and threads; its URL."""
    if server == "granian":
        return processes.start_granian(app, f"granian_apps:{app}", API_WORKERS, settings.api_threads)
    if app == "api":
        return processes.start_api(API_WORKERS)
    return processes.start_http(app, [sys.executable, bare_api.__file__, "--workers", str(API_WORKERS)])


def bench(args: argparse.Namespace) -> tuple[list[str], bool]:
    """Every measurement of one run; the report's lines, and whether nothing was lost."""
    lines = [f"API: {args.server}, {API_WORKERS} workers; end-to-end workers: {describe_layout(args.layout)}"]
    with servers() as urls, tempfile.TemporaryDirectory(prefix="singles-") as scratch:
        directory = Path(scratch)
        env = bench_env(urls, directory, EMAIL_PROVIDER="log")
        settings = use_settings(Settings.from_env(env))
        migrate.upgrade(settings.database_url)
        engine = create_engine(settings.database_url)
        db = session_factory(settings.database_url)
        project_id = f"singles-{uuid.uuid4().hex[:8]}"
        projects.create_project(db, {"id": project_id, "name": "Single sends", "channels": ["email"]})
        processes = Processes(directory, env)
        try:
            key = projects.create_key(db, project_id, "singles", KeyKind.LIVE)["key"]
            api = start_server(processes, args.server, "api", settings)
            whole = True
            if args.e2e_seconds:
                workers = processes.start_workers(args.layout, all_queues(settings))
                processes.start_beat()
                result = end_to_end(api, key, engine, project_id, args)
                lines.extend(result.describe(args.rate, args.e2e_seconds, args.clients))
                whole = progress.lost(len(result.load.ids), result.statuses) == 0
                for name in [*workers, "beat"]:
                    processes.signal(name, signal.SIGTERM)
            ours = closed_loop(api, key, args.clients, args.seconds)
            kept = stored(engine, ours.ids)
            lines.append(f"ours, {args.clients} clients for {args.seconds:.0f} s: {ours.describe()}")
            lines.append(f"  stored: {kept} of {len(ours.ids)} answered, {len(ours.ids) - kept} lost")
            whole = whole and kept == len(ours.ids)
            with bare_table(engine):
                bare = closed_loop(
                    start_server(processes, args.server, "bare", settings), "", args.clients, args.seconds
                )
            lines.append(f"bare endpoint (one INSERT + one publish, same {args.server} settings): {bare.describe()}")
            lines.append(f"ours / bare: {len(ours.ids) / ours.seconds / (len(bare.ids) / bare.seconds):.2f}")
        finally:
            processes.stop()
            purge(settings, [prepare_queue(Priority.TRANSACTIONAL), bare_api.QUEUE])
            projects.delete_project(db, redis_for(settings.redis_url), project_id)
            engine.dispose()
    return lines, whole


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=8, help="concurrent HTTP clients")
    parser.add_argument("--seconds", type=float, default=30, help="length of each throughput run")
    parser.add_argument("--rate", type=float, default=400, help="sends a second in the end-to-end run")
    parser.add_argument("--e2e-seconds", type=float, default=60, help="length of the end-to-end run (0: skip it)")
    parser.add_argument(
        "--patience",
        type=float,
        default=2,
        help="the end-to-end run skips the slots left after this many times its length (default 2)",
    )
    parser.add_argument(
        "--server",
        choices=("gunicorn", "granian"),
        default="gunicorn",
        help="the WSGI server of ours and the bare endpoint",
    )
    parser.add_argument("--layout", choices=LAYOUTS, default="split", help="the Celery workers of the end-to-end run")
    parser.add_argument("--no-append", action="store_true", help="print only; leave BENCHMARKS.md alone")
    args = parser.parse_args(argv)
    if not (1 <= args.clients <= 64 and 1 <= args.seconds <= 600 and 0 <= args.e2e_seconds <= 600):
        parser.error("need 1 <= clients <= 64, 1 <= seconds <= 600, 0 <= e2e-seconds <= 600")
    if not 1 <= args.rate <= 10_000:
        parser.error("need 1 <= rate <= 10,000")
    if not 1 <= args.patience <= 100:
        parser.error("need 1 <= patience <= 100")
    lines, whole = bench(args)
    body = "\n".join(lines)
    print(body)
    if not args.no_append:
        append_section("Single sends: throughput and end to end (issue 6)", f"```\n{body}\n```")
    return 0 if whole else 1


if __name__ == "__main__":
    sys.exit(main())
