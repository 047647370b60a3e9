"""Servers and processes for the benchmarks in this folder and for the fault tests.

`servers()` gives a run its PostgreSQL and Redis: the environment's, or embedded ones.
`Processes` starts real `tidings` roles (the API under gunicorn or granian, Celery workers, beat) or
any other command as subprocesses, each in a session of its own with its own log file, so
a run can signal one of them with its pool children, and stop them all at the end.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path

import requests

from app.config import Settings, use_settings
from app.runtime.embedded import EmbeddedRedis, free_port, start_postgres

READY_TIMEOUT = 60.0
STOP_TIMEOUT = 15.0
# Celery worker layouts a benchmark may run: the measurements say one worker's main
# process tops out on one core, so using both cores takes two worker processes.
LAYOUTS = ("one", "two", "split")
# Every benchmark worker runs with these, whatever `tidings worker` defaults to.
POOL = ("--pool", "threads", "--concurrency", "8")


# One pair of keys per run, so what a benchmark writes itself and the processes it starts agree.
RUN_ADMIN_KEY = secrets.token_urlsafe(24)
RUN_SECRET_KEY = secrets.token_urlsafe(24)


def use_run_settings(urls: Mapping[str, str]) -> Settings:
    """The run's settings as this process's own: what it writes itself (a project's webhook
    signing secret, sealed with TIDINGS_SECRET_KEY) uses the run's keys."""
    return use_settings(Settings.from_env(bench_env(urls, Path(tempfile.gettempdir()))))


@contextmanager
def servers() -> Iterator[dict[str, str]]:
    """DATABASE_URL and REDIS_URL: the environment's, or embedded ones for the run."""
    env = {"DATABASE_URL": os.environ.get("DATABASE_URL", ""), "REDIS_URL": os.environ.get("REDIS_URL", "")}
    with ExitStack() as stack:
        if not env["DATABASE_URL"] or not env["REDIS_URL"]:
            directory = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-servers-")))
        if not env["DATABASE_URL"]:
            postgres = start_postgres(directory / "pg")
            stack.callback(postgres.cleanup)
            env["DATABASE_URL"] = postgres.get_uri()
        if not env["REDIS_URL"]:
            redis_server = EmbeddedRedis().start()
            stack.callback(redis_server.stop)
            env["REDIS_URL"] = redis_server.url
        yield env


def bench_env(urls: Mapping[str, str], var_dir: Path, **overrides: str) -> dict[str, str]:
    """What a benchmark's `tidings` processes run with: this environment, the run's servers
    (Redis as the broker too) and keys made for the run."""
    return {
        **os.environ,
        **urls,
        "CELERY_BROKER_URL": urls["REDIS_URL"],
        "TIDINGS_ADMIN_KEY": RUN_ADMIN_KEY,
        "TIDINGS_SECRET_KEY": RUN_SECRET_KEY,
        "TIDINGS_VAR_DIR": str(var_dir),
        **overrides,
    }


def layout_queues(layout: str, queues: Sequence[str]) -> dict[str, list[str]]:
    """Each worker process of a layout and the queues it consumes."""
    if layout == "one":
        return {"worker": list(queues)}
    if layout == "two":
        return {"worker-1": list(queues), "worker-2": list(queues)}
    deliver = [q for q in queues if q.startswith("deliver.")]
    return {"prepare": [q for q in queues if q not in deliver], "deliver": deliver}


def describe_layout(layout: str) -> str:
    named = {"one": "one worker process on every queue", "two": "two worker processes on every queue"}
    split = "two worker processes: one on the prepare, webhook and beat queues, one on the deliver queues"
    return f"{named.get(layout, split)}; pool {POOL[1]}, concurrency {POOL[3]}"


def role(name: str, *args: str) -> list[str]:
    """The command line of one `tidings` role, run by this interpreter."""
    return [sys.executable, "-m", "app.runtime.cli", name, *args]


class Processes:
    """Child processes of one run, by name; each logs to `<directory>/<name>.log`."""

    def __init__(self, directory: Path, env: Mapping[str, str]):
        self.directory = directory
        self.env = dict(env)
        self.processes: dict[str, subprocess.Popen] = {}

    def start(self, name: str, command: Sequence[str], ready: str, **env: str) -> subprocess.Popen:
        """Start `command` and wait until its log shows `ready`."""
        log = open(self.directory / f"{name}.log", "w")  # noqa: SIM115 - the process writes to it until stopped
        process = subprocess.Popen(
            list(command),
            env={**self.env, **env},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.processes[name] = process
        self.wait_for_log(name, ready)
        return process

    def start_worker(self, name: str = "worker", *args: str, **env: str) -> subprocess.Popen:
        return self.start(
            name,
            role("worker", "-n", f"{name}@%h", "--without-mingle", "--without-gossip", *args),
            ready="ready.",
            **env,
        )

    def start_workers(self, layout: str, queues: Sequence[str]) -> list[str]:
        """The worker processes of `layout` on `queues`; their names."""
        consumed = layout_queues(layout, queues)
        for name, names in consumed.items():
            self.start_worker(name, "-Q", ",".join(names), *POOL)
        return list(consumed)

    def start_beat(self, name: str = "beat") -> subprocess.Popen:
        beat_dir = self.directory / name
        beat_dir.mkdir(exist_ok=True)
        return self.start(name, role("beat"), ready="maxinterval", TIDINGS_VAR_DIR=str(beat_dir))

    def start_api(self, workers: int = 1, name: str = "api") -> str:
        """`tidings api` (gunicorn) on a free loopback port; its URL once it answers."""
        return self.start_http(name, role("api", "--workers", str(workers)))

    def start_granian(self, name: str, factory: str, workers: int, threads: int) -> str:
        """The WSGI app `factory` (module:function, in this folder) builds, under granian's WSGI
        server with `workers` processes of `threads` threads each, as gunicorn runs the API."""
        options = ["--interface", "wsgi", "--factory", "--no-access-log", "--working-dir", str(Path(__file__).parent)]
        sizes = ["--workers", str(workers), "--blocking-threads", str(threads)]
        return self.start_http(name, [sys.executable, "-m", "granian", *options, *sizes, factory], "Started worker-")

    def start_http(self, name: str, command: Sequence[str], ready: str = "Booting worker") -> str:
        """A server told its port by TIDINGS_PORT (gunicorn, through our settings) or GRANIAN_PORT;
        its URL once it answers at all."""
        port = free_port()
        self.start(name, command, ready=ready, TIDINGS_PORT=str(port), GRANIAN_PORT=str(port))
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            try:
                requests.get(f"{url}/healthz", timeout=5)
                return url
            except requests.RequestException:  # not listening yet, or too busy booting to answer
                time.sleep(0.1)
        raise RuntimeError(f"{name} did not answer on {url}")

    def wait_for_log(self, name: str, needle: str, timeout: float = READY_TIMEOUT) -> None:
        path, process = self.directory / f"{name}.log", self.processes[name]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if needle in path.read_text(errors="replace"):
                return
            if process.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError(f"{name} never logged {needle!r}:\n{path.read_text(errors='replace')[-3000:]}")

    def signal(self, name: str, signum: int, timeout: float = 60, group: bool = True) -> int:
        """Send `signum` to the process group (pool children too), or with `group` False to
        the main process only, as `docker stop` and systemd's KillMode=mixed do, and wait
        for the end."""
        process = self.processes.pop(name)
        if group:
            os.killpg(process.pid, signum)
        else:
            os.kill(process.pid, signum)
        return process.wait(timeout=timeout)

    def stop(self) -> None:
        """Stop every process still running: SIGTERM to all at once (they stop side by side,
        not one after another), then SIGKILL to any that lingers past STOP_TIMEOUT."""
        running = [process for process in self.processes.values() if process.poll() is None]
        self.processes.clear()
        for process in running:
            with suppress(ProcessLookupError):  # it ended since we looked
                os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT
        for process in running:
            try:
                process.wait(timeout=max(deadline - time.monotonic(), 0.0))
            except subprocess.TimeoutExpired:
                with suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
