"""What the soak and the Locust run share: a project to load, the fake provider, the stack.

The stack is `tests.faults.stack.Stack` (the API under gunicorn, Celery workers and beat
as real processes, with a Redis of their own) with production clocks instead of the fault
tests' short ones, and with email going through the real Postmark adapter to the fake
provider: Postmark echoes our message id in its webhooks, so the soak can answer deliveries
with opens and clicks through the real inbound route.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, sessionmaker

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.faults.stack runs Tidings as processes

from harness import servers, use_run_settings
from usage import Role

from app.config import Settings, database_url_from_env
from app.db import session_factory
from app.delivery.queues import all_queues, is_transactional
from app.enums import KeyKind
from app.redis_client import redis_for
from app.runtime import migrate
from app.schemas.audience import TemplateCreateSchema
from app.services import projects, subscribers, templates
from tests.faults.stack import FAST_RECOVERY, Stack

RESULTS = Path(__file__).resolve().parent / "results"
FAKE_PROVIDER = Path(__file__).resolve().parent / "fake_provider.py"
POSTMARK_WEBHOOK_USER, POSTMARK_WEBHOOK_PASSWORD = "loadtest", "loadtest-webhook-password"
IMPORT_CHUNK = 10_000  # the import route's limit
TEMPLATE_COUNT = 8


@dataclass(frozen=True)
class Layout:
    """The process layout under test: gunicorn workers x threads, Celery worker processes x pool."""

    api_workers: int = 2
    api_threads: int = 32
    workers: int = 2
    pool: str = "threads"
    # Provider calls wait 150-250 ms with the thread idle: 8 threads delivered 205/s of
    # 318/s accepted in the soak, 32 kept up with the API (measured, loadtest/results).
    concurrency: int = 32
    # Odd-numbered workers consume the prepare, webhook and beat queues, even-numbered ones
    # the deliver queues, instead of every worker consuming every queue in priority order.
    split_stages: bool = False
    # The first worker on the transactional lanes alone, as `make run` and docker/compose.yaml run one.
    transactional_worker: bool = False

    def describe(self) -> str:
        return (
            f"API {self.api_workers} gunicorn workers x {self.api_threads} threads, "
            f"{self.workers} Celery workers x {self.pool} {self.concurrency}"
            + (", stages split between workers" if self.split_stages else "")
            + (", the first on the transactional lanes alone" if self.transactional_worker else "")
        )

    def stage(self, n: int) -> str:
        """What the nth worker (from 1) consumes: "prepare" (with the webhook and beat queues)
        or "deliver" when the stages are split, else "all"."""
        if not self.split_stages or self.workers < 2:
            return "all"
        return "deliver" if n % 2 == 0 else "prepare"

    def worker_queues(self, n: int, queues: list[str]) -> list[str]:
        """The queues of the nth worker (from 1): all of them, one stage's when split, or the
        transactional lanes (the first, with `transactional_worker`)."""
        if self.transactional_worker and n == 1:
            return [queue for queue in queues if is_transactional(queue)]
        stage = self.stage(n)
        if stage == "all":
            return queues
        return [queue for queue in queues if queue.startswith("deliver.") == (stage == "deliver")]


def add_setup_arguments(parser: argparse.ArgumentParser) -> None:
    """What both runners take: the data, the provider's behaviour, where results go, the layout."""
    parser.add_argument("--subscribers", type=int, default=100_000, help="default 100,000")
    parser.add_argument("--transient-rate", type=float, default=0.03, help="provider calls answered 503 (0.03)")
    parser.add_argument("--provider-latency", default="150-250", help="ms per provider call (150-250)")
    parser.add_argument("--seed", type=int, default=9, help="for reproducible choices and provider failures")
    parser.add_argument("--results", type=Path, default=RESULTS, help="where the run's folder goes")
    parser.add_argument("--no-record", action="store_true", help="do not append to BENCHMARKS.md")
    default = Layout()
    parser.add_argument("--api-workers", type=int, default=default.api_workers, help="gunicorn worker processes")
    parser.add_argument("--api-threads", type=int, default=default.api_threads, help="threads per gunicorn worker")
    parser.add_argument("--workers", type=int, default=default.workers, help="Celery worker processes")
    parser.add_argument("--pool", choices=["threads", "prefork", "solo"], default=default.pool, help="Celery pool")
    parser.add_argument("--concurrency", type=int, default=default.concurrency, help="pool size per worker")
    parser.add_argument(
        "--split-stages", action="store_true", help="odd workers prepare, even workers deliver (default: all do all)"
    )
    parser.add_argument(
        "--transactional-worker", action="store_true", help="the first worker on the transactional lanes alone"
    )


def layout_from(args: argparse.Namespace) -> Layout:
    return Layout(
        args.api_workers,
        args.api_threads,
        args.workers,
        args.pool,
        args.concurrency,
        args.split_stages,
        args.transactional_worker,
    )


def duration(value: str) -> float:
    """Seconds from `90`, `90s`, `15m` or `1.5h`."""
    units = {"s": 1, "m": 60, "h": 3600}
    number, unit = (value[:-1], units[value[-1]]) if value and value[-1] in units else (value, 1)
    try:
        seconds = float(number) * unit
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a duration like 90s or 15m, got {value!r}") from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"a duration must be positive, got {value!r}")
    return seconds


def clock(seconds: float) -> str:
    return f"{int(seconds // 60)}m{seconds % 60:04.1f}s"


@dataclass(frozen=True)
class Workload:
    """A project with a live key, `subscribers` subscribers (u0, u1, …) and the templates to send."""

    project_id: str
    key: str
    subscribers: int
    templates: tuple[str, ...]


def subscriber_id(n: int) -> str:
    return f"u{n}"


def create_workload(database_url: str, subscriber_count: int, name: str) -> Workload:
    """Migrate, then create the project, its key, subscribers (10,000 an import) and templates."""
    migrate.upgrade(database_url)
    db = session_factory(database_url)
    project_id = f"{name}-{os.urandom(4).hex()}"
    # No daily quota: a soak at 400 a second passes the deployment's 250,000 emails within 11 minutes.
    unlimited = {"daily_quota": {"email": None}}
    projects.create_project(db, {"id": project_id, "name": name, "channels": ["email"], "settings": unlimited})
    key = projects.create_key(db, project_id, name, KeyKind.LIVE)["key"]
    for start in range(0, subscriber_count, IMPORT_CHUNK):
        rows = [
            {"external_id": subscriber_id(n), "email": f"{subscriber_id(n)}@example.com", "data": {"name": f"User {n}"}}
            for n in range(start, min(start + IMPORT_CHUNK, subscriber_count))
        ]
        result = subscribers.import_many(db, project_id, rows)
        if result["rejected"]:
            raise RuntimeError(f"subscriber import rejected rows: {result['rejected'][:3]}")
    keys = tuple(f"notice-{n}" for n in range(1, TEMPLATE_COUNT + 1))
    for n, template_key in enumerate(keys, 1):
        body = {
            "key": template_key,
            "channel": "email",
            "subject": f"Notice {n} for {{{{ subscriber.data.name }}}}: {{{{ ref }}}}",
            "text": f"Hello {{{{ subscriber.data.name }}}},\n\nnotice {n} about {{{{ ref }}}}.\n",
            "html": f"<p>Hello {{{{ subscriber.data.name }}}},</p><p>notice {n} about <b>{{{{ ref }}}}</b>.</p>",
        }
        templates.create(db, project_id, TemplateCreateSchema().load(body))
    return Workload(project_id, key, subscriber_count, keys)


def database_bytes(db: sessionmaker[Session]) -> int:
    with db() as session:
        return session.scalar(text("SELECT pg_database_size(current_database())"))


def postmaster_pid(db: sessionmaker[Session]) -> int | None:
    """PostgreSQL's main process, when it runs on this machine and its data directory is readable."""
    try:
        with db() as session:
            directory = session.scalar(text("SHOW data_directory"))  # a privilege a shared server may withhold
        return int((Path(directory) / "postmaster.pid").read_text().split()[0])
    except (DBAPIError, OSError, ValueError, IndexError):
        return None


def roles_of(stack: Stack, provider_pid: int, db: sessionmaker[Session]) -> dict[str, Role]:
    """The processes to watch: the stack's, PostgreSQL (when local), Redis, the provider, and
    this process alone (its children are the stack)."""
    roles = {name: Role(process.pid) for name, process in stack.processes.items()}
    postgres = postmaster_pid(db)
    if postgres is not None:
        roles["postgres"] = Role(postgres)
    roles["redis"] = Role(stack.redis.process.pid)
    roles["provider"] = Role(provider_pid)
    roles["load"] = Role(os.getpid(), descendants=False)
    return roles


@dataclass(frozen=True)
class Setup:
    workload: Workload
    db: sessionmaker[Session]
    stack: Stack
    provider_url: str
    provider: subprocess.Popen

    def roles(self) -> dict[str, Role]:
        return roles_of(self.stack, self.provider.pid, self.db)


@contextmanager
def set_up(name: str, args: argparse.Namespace, run_dir: Path, **env: str) -> Iterator[Setup]:
    """PostgreSQL (DATABASE_URL's, or embedded for the run) with a workload in it, the fake
    provider and the stack; afterwards the workload's project goes, with its messages."""
    provider_args = ["--latency", args.provider_latency, "--transient-rate", str(args.transient_rate)]
    with servers() as urls:
        use_run_settings(urls)
        database_url = database_url_from_env(urls)
        print(f"setting up {args.subscribers:,} subscribers and the templates …", flush=True)
        workload = create_workload(database_url, args.subscribers, name)
        db = session_factory(database_url)
        try:
            with (
                fake_provider(*provider_args, "--seed", str(args.seed)) as (provider_url, provider),
                running_stack(run_dir, database_url, provider_url, layout_from(args), **env) as stack,
            ):
                yield Setup(workload, db, stack, provider_url, provider)
        finally:
            if os.environ.get("DATABASE_URL"):  # an embedded database goes with its directory
                projects.delete_project(db, redis_for(urls["REDIS_URL"]), workload.project_id)


@contextmanager
def fake_provider(*args: str) -> Iterator[tuple[str, subprocess.Popen]]:
    """`loadtest/fake_provider.py` as a process of its own on a free port: (url, process)."""
    process = subprocess.Popen(
        [sys.executable, str(FAKE_PROVIDER), "--port", "0", *args], stdout=subprocess.PIPE, text=True
    )
    try:
        line = process.stdout.readline()
        if not line.startswith("fake provider listening on "):
            raise RuntimeError(f"the fake provider did not start: {line!r}")
        yield line.rsplit(" ", 1)[1].strip(), process
    finally:
        process.terminate()
        process.wait(timeout=10)


@contextmanager
def running_stack(run_dir: Path, database_url: str, provider_url: str, layout: Layout, **env: str) -> Iterator[Stack]:
    """API, workers and beat as processes; their logs in `run_dir`. `stack.api_url` is set."""
    run_dir.mkdir(parents=True, exist_ok=True)
    stack = Stack(
        run_dir,
        database_url,
        provider_url,
        EMAIL_PROVIDER="postmark",
        POSTMARK_BASE_URL=provider_url,
        POSTMARK_SERVER_TOKEN="loadtest",
        EMAIL_FROM="loadtest@example.com",
        POSTMARK_WEBHOOK_USERNAME=POSTMARK_WEBHOOK_USER,
        POSTMARK_WEBHOOK_PASSWORD=POSTMARK_WEBHOOK_PASSWORD,
        TIDINGS_API_THREADS=str(layout.api_threads),
        **env,
    )
    for name in (*FAST_RECOVERY, "MAX_ATTEMPTS"):  # the settings' own defaults, unless the caller set one
        if name not in env:
            stack.env.pop(name, None)
    try:
        stack.api_url = stack.start_api(layout.api_workers)
        queues = all_queues(Settings.from_env(stack.env))
        for n in range(1, layout.workers + 1):
            stack.start_worker(
                f"worker{n}",
                *("--pool", layout.pool, "--concurrency", str(layout.concurrency)),
                *("--queues", ",".join(layout.worker_queues(n, queues))),
            )
        stack.start_beat()
        yield stack
    finally:
        stack.stop()
