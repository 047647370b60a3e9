"""The drain benchmark, the peer's protocol: accept 100,000 jobs through the batch API, release
them at once, and time the drain, beside the ceilings of this machine measured in the same run.

    python loadtest/drain.py [--batches 20] [--recipients 5000] [--layout split] [--clients 2]

For each provider mode — `batch`: the `log` provider taking 100 messages per call; `single`:
the same provider taking one per call (LOG_PROVIDER_MAX_BATCH) — it starts the stack (the
API under gunicorn, Celery workers in the chosen layout, beat), makes a project without a
rate limit, POSTs the batches to /v1/messages/batch scheduled an hour ahead, releases
them all with one UPDATE and the dispatch `release_due` uses (tasks.maintenance), and
waits until every message is terminal. It reports enqueue and drain jobs/s, the CPU time
each process spent per job while draining (/proc: on a shared machine the figure that
wall-clock noise does not move), the peak RSS of every process, and the database bytes per
message before and after VACUUM. With --profile, py-spy samples each worker during the
drain and the report names where their time went (collapsed stacks kept in DIR).

Ceilings: a raw COPY of the same rows into plain scratch tables shaped like messages and
message_contents, and a no-op Celery task drained by workers of the same layout
(loadtest/noop_task.py). Figures go to stdout and, unless --no-append, BENCHMARKS.md.
Against DATABASE_URL / REDIS_URL when set, embedded servers otherwise; it runs VACUUM FULL on
messages, message_contents and events, so give it a database of its own.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import hotspots
import noop_task
import progress
import redis
import requests
from harness import LAYOUTS, POOL, Processes, bench_env, describe_layout, layout_queues, servers, use_run_settings
from peak_rss import PeakRss, postgres_pid, redis_pid
from report import append_section
from sqlalchemy import Engine, create_engine, text
from usage import Role

from app.config import Settings, database_url_from_env
from app.db import session_factory, session_scope
from app.delivery.queues import all_queues
from app.enums import KeyKind
from app.redis_client import redis_for
from app.runtime import migrate
from app.services import projects
from tasks import maintenance
from tasks.celery_app import configure

# Provider modes: what LOG_PROVIDER_MAX_BATCH is, and how the report names it.
MODES = {"batch": ("100", "log provider, 100 messages per call"), "single": ("1", "log provider, one message per call")}
API_WORKERS = 2
TEMPLATE = {
    "key": "drain",
    "channel": "email",
    "subject": "Issue {{ issue }} of the newsletter",
    "text": "Hello,\n\nhere is issue {{ issue }}: what we did this month.\n\nThe team",
    "html": "<p>Hello,</p><p>here is issue <b>{{ issue }}</b>: what we did this month.</p><p>The team</p>",
}
RELEASE = text(
    """
    UPDATE messages SET status = 'accepted', scheduled_at = now(), next_attempt_at = NULL, updated_at = now()
    WHERE project_id = :project AND status = 'scheduled'
    RETURNING id::text, project_id, priority
    """
)
TABLES = ("messages", "message_contents", "events")
POLL_SECONDS = 0.25
# py-spy stops on its own after this, should a drain outlast it.
PROFILE_LIMIT_SECONDS = 600


@dataclass
class ModeResult:
    mode: str
    accepted: int = 0
    rejected: int = 0
    enqueue_seconds: float = 0.0
    drain_seconds: float = 0.0
    statuses: Counter = field(default_factory=Counter)
    bytes_per_message: dict[str, float] = field(default_factory=dict)
    rss: list[str] = field(default_factory=list)
    cpu_seconds: dict[str, float] = field(default_factory=dict)  # per process, over the drain
    hot_spots: dict[str, str] = field(default_factory=dict)  # per worker, with --profile
    # The COPY ceiling, taken with this mode's rows when it was asked to.
    copy_seconds: float | None = None

    @property
    def enqueue_rate(self) -> float:
        return self.accepted / self.enqueue_seconds

    @property
    def drain_rate(self) -> float:
        return self.accepted / self.drain_seconds if self.drain_seconds else 0.0

    @property
    def lost(self) -> int:
        return progress.lost(self.accepted, self.statuses)


@dataclass(frozen=True)
class NoopResult:
    tasks: int
    publish_seconds: float
    drain_seconds: float


def batch_bodies(batches: int, recipients: int, run: str) -> list[bytes]:
    """The requests, encoded before the clock starts: one template, recipients by address."""
    scheduled_at = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    return [
        json.dumps(
            {
                "channel": "email",
                "template": TEMPLATE["key"],
                "data": {"issue": 12},
                "priority": "bulk",
                "scheduled_at": scheduled_at,
                "recipients": [{"email": f"r{b}-{n}-{run}@example.com"} for n in range(recipients)],
            }
        ).encode()
        for b in range(batches)
    ]


def enqueue(api: str, key: str, bodies: list[bytes], clients: int) -> tuple[int, int, float]:
    """POST every batch, `clients` at a time; (accepted, rejected, seconds of wall time)."""
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}

    def post(body: bytes) -> dict:
        answer = requests.post(f"{api}/v1/messages/batch", data=body, headers=headers, timeout=300)
        if answer.status_code != 202:
            raise RuntimeError(f"the batch API answered {answer.status_code}: {answer.text[:500]}")
        return answer.json()

    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        answers = list(pool.map(post, bodies))
    seconds = time.perf_counter() - started
    return sum(a["accepted"] for a in answers), sum(len(a["rejected"]) for a in answers), seconds


def copy_ceiling(engine: Engine, project_id: str, directory: Path) -> float:
    """COPY the project's message and content rows into plain scratch tables of the same
    shape, indexes included; the seconds the COPY and its commit took."""
    connection = engine.raw_connection()
    try:
        cursor = connection.cursor()
        messages_of = cursor.mogrify("SELECT * FROM messages WHERE project_id = %s", (project_id,)).decode()
        contents_of = f"SELECT * FROM message_contents WHERE message_id IN (SELECT id FROM ({messages_of}) m)"
        with (directory / "messages.copy").open("w+") as messages, (directory / "contents.copy").open("w+") as contents:
            cursor.copy_expert(f"COPY ({messages_of}) TO STDOUT", messages)
            cursor.copy_expert(f"COPY ({contents_of}) TO STDOUT", contents)
            cursor.execute(
                "CREATE TABLE copy_ceiling_messages (LIKE messages INCLUDING ALL);"
                "CREATE TABLE copy_ceiling_contents (LIKE message_contents INCLUDING ALL)"
            )
            connection.commit()
            messages.seek(0)
            contents.seek(0)
            started = time.perf_counter()
            cursor.copy_expert("COPY copy_ceiling_messages FROM STDIN", messages)
            cursor.copy_expert("COPY copy_ceiling_contents FROM STDIN", contents)
            connection.commit()
            seconds = time.perf_counter() - started
        cursor.execute("DROP TABLE copy_ceiling_messages, copy_ceiling_contents")
        connection.commit()
    finally:
        connection.close()
    return seconds


def release(database_url: str, project_id: str) -> tuple[int, datetime]:
    """Every scheduled message of the project due now, in one UPDATE, dispatched after the
    commit exactly as release_due dispatches what it releases; (count, the release time)."""
    with session_scope(database_url) as session:
        released_at = session.scalar(text("SELECT now()"))
        rows = session.execute(RELEASE, {"project": project_id}).all()
        maintenance.enqueue_prepare(session, rows)
    return len(rows), released_at


def wait_drained(engine: Engine, project_id: str, released_at: datetime, timeout: float) -> tuple[float, Counter]:
    """Poll until no message of the project has work ahead; (seconds from the release to the
    last finalise, by the database's clock; statuses at the end)."""
    deadline = time.monotonic() + timeout
    with engine.connect() as connection:
        while progress.pending(connection, project_id) and time.monotonic() < deadline:
            time.sleep(POLL_SECONDS)
        finished = connection.scalar(
            text("SELECT max(updated_at) FROM messages WHERE project_id = :project"), {"project": project_id}
        )
    return (finished - released_at).total_seconds(), progress.statuses(engine, project_id)


@contextmanager
def profiled(pids: dict[str, int], directory: Path | None) -> Iterator[dict[str, str]]:
    """py-spy on each worker process while the block runs, when given a `directory` for
    the stacks; the dict filled, once the block ends, with where each spent its time."""
    found: dict[str, str] = {}
    if directory is None:
        yield found
        return
    directory.mkdir(parents=True, exist_ok=True)
    workers = {name: pid for name, pid in pids.items() if name not in ("api", "beat", "postgres", "redis")}
    paths = {name: directory / f"profile-{name}.txt" for name in workers}
    recorders = {name: hotspots.record(pid, PROFILE_LIMIT_SECONDS, paths[name]) for name, pid in workers.items()}
    try:
        yield found
    finally:
        for recorder in recorders.values():  # py-spy writes what it sampled when interrupted
            recorder.send_signal(signal.SIGINT)
        for recorder in recorders.values():
            recorder.wait(timeout=60)
    found.update({name: hotspots.hot_spots(path, count=8) for name, path in paths.items() if path.exists()})


def table_bytes(engine: Engine) -> int:
    """messages, message_contents and events with their indexes, TOAST and maps."""
    sizes = " + ".join(f"pg_total_relation_size('{table}')" for table in TABLES)
    with engine.connect() as connection:
        return connection.scalar(text(f"SELECT {sizes}"))


def vacuum(engine: Engine, full: bool) -> None:
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        connection.execute(text(f"VACUUM {'FULL ' if full else ''}{', '.join(TABLES)}"))


@contextmanager
def stack(env: dict[str, str], directory: Path, layout: str) -> Iterator[tuple[Processes, str]]:
    """The API, the workers of the layout and beat, stopped when the block ends; and the API's URL."""
    processes = Processes(directory, env)
    try:
        api = processes.start_api(API_WORKERS)
        processes.start_workers(layout, all_queues(Settings.from_env(env)))
        processes.start_beat()
        yield processes, api
    finally:
        processes.stop()


def run_mode(
    urls: dict[str, str],
    mode: str,
    project_id: str,
    args: argparse.Namespace,
    engine: Engine,
    directory: Path,
    measure_copy: bool,
) -> ModeResult:
    """One provider mode from a fresh stack, in a project of its own; with the COPY ceiling
    taken on its rows when asked for."""
    max_batch, _ = MODES[mode]
    mode_dir = directory / mode
    mode_dir.mkdir()
    env = bench_env(urls, mode_dir, EMAIL_PROVIDER="log", LOG_PROVIDER_MAX_BATCH=max_batch)
    settings = Settings.from_env(env)
    configure(settings)  # the release publishes through the pipeline's own dispatch
    key = projects.create_key(session_factory(settings.database_url), project_id, "drain", KeyKind.LIVE)["key"]
    result = ModeResult(mode)
    bodies = batch_bodies(args.batches, args.recipients, project_id)
    size_before = table_bytes(engine)
    with stack(env, mode_dir, args.layout) as (processes, api):
        created = requests.post(
            f"{api}/v1/templates", json=TEMPLATE, headers={"Authorization": f"Bearer {key}"}, timeout=30
        )
        created.raise_for_status()
        pids = {name: process.pid for name, process in processes.processes.items()}
        pids |= {"postgres": postgres_pid(engine), "redis": redis_pid(settings.redis_url)}
        roles = {name: Role(pid) for name, pid in pids.items()}
        with PeakRss(pids) as rss:
            result.accepted, result.rejected, result.enqueue_seconds = enqueue(api, key, bodies, args.clients)
            if measure_copy:
                result.copy_seconds = copy_ceiling(engine, project_id, mode_dir)
            cpu_before = {name: role.totals()[0] for name, role in roles.items()}
            with profiled(pids, args.profile / mode if args.profile else None) as hot_spots:
                released, released_at = release(settings.database_url, project_id)
                result.drain_seconds, result.statuses = wait_drained(engine, project_id, released_at, args.timeout)
                result.cpu_seconds = {name: role.totals()[0] - cpu_before[name] for name, role in roles.items()}
        result.rss = rss.lines()
        result.hot_spots = hot_spots
    if released != result.accepted:
        raise RuntimeError(f"released {released} of {result.accepted} accepted messages")
    # What this mode's rows added: the tables were compact when it began (VACUUM FULL below).
    result.bytes_per_message["before VACUUM"] = (table_bytes(engine) - size_before) / result.accepted
    vacuum(engine, full=False)
    result.bytes_per_message["after VACUUM"] = (table_bytes(engine) - size_before) / result.accepted
    vacuum(engine, full=True)
    result.bytes_per_message["after VACUUM FULL"] = (table_bytes(engine) - size_before) / result.accepted
    return result


def noop_ceiling(urls: dict[str, str], directory: Path, layout: str, tasks: int) -> NoopResult:
    """Publish `tasks` no-op tasks one by one from this process, start workers of the layout
    idle, then tell them all at once to consume the queue and time them: from that moment to
    the queue's end (in flight then: a prefetch per worker, a few milliseconds of work)."""
    here = str(Path(__file__).resolve().parent)
    env = bench_env(urls, directory, PYTHONPATH=os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")])))
    app = configure(Settings.from_env(env))
    client = redis.Redis.from_url(env["REDIS_URL"])
    client.delete(noop_task.QUEUE)
    started = time.perf_counter()
    for _ in range(tasks):
        noop_task.noop.apply_async(queue=noop_task.QUEUE)
    publish_seconds = time.perf_counter() - started
    processes = Processes(directory, env)
    names = [f"noop-{name}" for name in layout_queues(layout, ())]
    try:
        for name in names:
            processes.start_worker(name, "--include", "noop_task", "-Q", noop_task.IDLE_QUEUE, *POOL)
        started = time.perf_counter()
        app.control.add_consumer(noop_task.QUEUE, destination=[f"{n}@{socket.gethostname()}" for n in names])
        deadline = time.monotonic() + max(60.0, tasks / 100)
        while client.llen(noop_task.QUEUE) and time.monotonic() < deadline:
            time.sleep(0.005)
        seconds = time.perf_counter() - started
        if client.llen(noop_task.QUEUE):
            raise RuntimeError("the no-op workers did not drain their queue in time")
    finally:
        processes.stop()
        client.close()
    return NoopResult(tasks, publish_seconds, seconds)


def report(results: list[ModeResult], noop: NoopResult | None, args: argparse.Namespace) -> str:
    lines = [f"layout: {describe_layout(args.layout)}; API: gunicorn, {API_WORKERS} workers"]
    copied = next((r for r in results if r.copy_seconds), None)
    copy_rate = copied.accepted / copied.copy_seconds if copied and copied.copy_seconds else None
    noop_rate = noop.tasks / noop.drain_seconds if noop else None
    if copied and copy_rate:
        lines.append(
            f"ceiling, raw COPY of the same {copied.accepted} rows (messages + contents into plain tables "
            f"with their indexes): {copy_rate:.0f} rows/s"
        )
    if noop:
        lines.append(
            f"ceiling, no-op Celery task: {noop.tasks} drained in {noop.drain_seconds:.2f} s = {noop_rate:.0f} tasks/s "
            f"(published one by one at {noop.tasks / noop.publish_seconds:.0f}/s)"
        )
    for result in results:
        lines.append(f"mode {result.mode} ({MODES[result.mode][1]}):")
        enqueue = (
            f"  enqueue: {result.accepted} accepted, {result.rejected} rejected, {args.batches} POSTs of "
            f"{args.recipients} by {args.clients} clients in {result.enqueue_seconds:.2f} s = "
            f"{result.enqueue_rate:.0f} jobs/s"
        )
        lines.append(enqueue + (f" ({result.enqueue_rate / copy_rate:.2f} of raw COPY)" if copy_rate else ""))
        drain = f"  drain: {result.accepted} in {result.drain_seconds:.2f} s = {result.drain_rate:.0f} jobs/s"
        lines.append(drain + (f" ({result.drain_rate / noop_rate:.1f} times the no-op task rate)" if noop_rate else ""))
        lines.append(f"  statuses: {progress.describe(result.statuses)}; lost: {result.lost}")
        cpu = ", ".join(f"{name} {1000 * s / result.accepted:.3f}" for name, s in result.cpu_seconds.items())
        total = 1000 * sum(result.cpu_seconds.values()) / result.accepted
        lines.append(f"  CPU ms per job while draining: {cpu}; all {total:.3f}")
        lines.extend(f"  where {name} spent its time: {spots}" for name, spots in result.hot_spots.items())
        sizes = ", ".join(f"{size:.0f} {when}" for when, size in result.bytes_per_message.items())
        lines.append(f"  bytes per message (messages + contents + events, indexes and TOAST): {sizes}")
        lines.append("  peak RSS (with children; each counts the shared memory it touched):")
        lines.extend(f"    {line}" for line in result.rss)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=20, help="POST /v1/messages/batch requests per mode")
    parser.add_argument("--recipients", type=int, default=5000, help="recipients per batch (at most 10,000)")
    parser.add_argument("--clients", type=int, default=2, help="batch requests in flight at once")
    parser.add_argument("--layout", choices=LAYOUTS, default="split", help="the Celery worker processes")
    parser.add_argument("--modes", default="batch,single", help=f"provider modes, of {', '.join(MODES)}")
    parser.add_argument("--noop-tasks", type=int, default=20_000, help="tasks for the no-op ceiling (0: skip)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds a drain may take before giving up")
    parser.add_argument("--no-append", action="store_true", help="print only; leave BENCHMARKS.md alone")
    parser.add_argument("--profile", type=Path, help="py-spy the workers while draining; stacks go to this folder")
    args = parser.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not modes or set(modes) - set(MODES):
        parser.error(f"--modes takes {', '.join(MODES)}")
    if not (1 <= args.batches <= 1000 and 1 <= args.recipients <= 10_000 and 1 <= args.clients <= 16):
        parser.error("need 1 <= batches <= 1000, 1 <= recipients <= 10,000, 1 <= clients <= 16")
    if not 0 <= args.noop_tasks <= 1_000_000:
        parser.error("need 0 <= noop-tasks <= 1,000,000")
    results: list[ModeResult] = []
    noop = None
    with servers() as urls, tempfile.TemporaryDirectory(prefix="drain-") as scratch:
        directory = Path(scratch)
        use_run_settings(urls)
        database_url = database_url_from_env(urls)
        migrate.upgrade(database_url)
        engine = create_engine(database_url)
        db = session_factory(database_url)
        project_ids: list[str] = []
        try:
            vacuum(engine, full=True)  # each mode measures the bytes its rows add to compact tables
            for index, mode in enumerate(modes):
                project_id = f"drain-{mode}-{uuid.uuid4().hex[:8]}"
                projects.create_project(db, {"id": project_id, "name": f"Drain ({mode})", "channels": ["email"]})
                project_ids.append(project_id)
                results.append(run_mode(urls, mode, project_id, args, engine, directory, measure_copy=index == 0))
            if args.noop_tasks:
                noop_dir = directory / "noop"
                noop_dir.mkdir()
                noop = noop_ceiling(urls, noop_dir, args.layout, args.noop_tasks)
        finally:
            for project_id in project_ids:
                projects.delete_project(db, redis_for(urls["REDIS_URL"]), project_id)
            engine.dispose()
    body = report(results, noop, args)
    print(body)
    if not args.no_append:
        append_section("Drain: batch enqueue and drain (issue 6)", f"```\n{body}\n```")
    return 0 if all(result.lost == 0 for result in results) else 1


if __name__ == "__main__":
    sys.exit(main())
