"""`tidings dev` (what `make run` runs): the whole stack as child processes of one command.

Without DATABASE_URL / REDIS_URL it starts embedded servers with their data under the var
directory, so a first run needs nothing but Python; with them set it uses those servers.
A child that dies is started again, with a backoff (`_supervise`). Ctrl-C (or SIGTERM)
stops every child and the embedded servers, leaving nothing behind.
"""

from __future__ import annotations

import json
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import requests
from sqlalchemy import select

from app.access.auth import find_caller
from app.config import Settings, use_settings
from app.db import session_factory
from app.enums import KeyKind
from app.models import Project
from app.runtime import migrate
from app.runtime.embedded import EmbeddedRedis, die_with_parent, start_postgres
from app.services import projects

DEMO_PROJECT = "demo"
READY_TIMEOUT = 120


def run(env: dict[str, str]) -> int:
    var_dir = Path(env.get("TIDINGS_VAR_DIR", "var"))
    var_dir.mkdir(parents=True, exist_ok=True)
    embedded_redis: EmbeddedRedis | None = None
    embedded_postgres = None
    if not env.get("DATABASE_URL"):
        print("Starting embedded PostgreSQL in", var_dir / "pg", flush=True)
        embedded_postgres = start_postgres(var_dir / "pg")
        env["DATABASE_URL"] = embedded_postgres.get_uri()
    if not env.get("REDIS_URL"):
        print("Starting embedded Redis in", var_dir / "redis", flush=True)
        embedded_redis = EmbeddedRedis(var_dir / "redis").start()
        env["REDIS_URL"] = embedded_redis.url
    env.update({name: value for name, value in _dev_secrets(var_dir).items() if not env.get(name)})
    env.setdefault("TIDINGS_LOG_FORMAT", "text")  # a person reads these; production ships JSON
    settings = use_settings(Settings.from_env(env))  # the demo project's secrets are sealed with its key
    migrate.upgrade(settings.database_url)
    demo_key = _demo_key(settings, var_dir)
    children: list[subprocess.Popen] = []
    try:
        for role in ("api", "worker", "transactional-worker", "beat"):
            children.append(_spawn(role, env))
        url = f"http://{settings.host}:{settings.port}"
        if not _wait_ready(url, children):
            print("tidings: the API did not become ready; see the log above", file=sys.stderr)
            return 1
        _print_banner(url, settings, demo_key)
        children.append(_spawn("flower", env))
        return _supervise(children, env)
    finally:
        _stop(children)
        if embedded_redis is not None:
            embedded_redis.stop()
        if embedded_postgres is not None:
            embedded_postgres.cleanup()


def _dev_secrets(var_dir: Path) -> dict[str, str]:
    """Admin and secret keys for development, made once and kept under var/."""
    path = var_dir / "dev-secrets.json"
    if path.exists():
        return json.loads(path.read_text())
    values = {
        "TIDINGS_ADMIN_KEY": f"tid_admin_{secrets.token_urlsafe(24)}",
        "TIDINGS_SECRET_KEY": secrets.token_urlsafe(32),
    }
    path.write_text(json.dumps(values))
    path.chmod(0o600)
    return values


def _demo_key(settings: Settings, var_dir: Path) -> str:
    """The demo project's key: reused across restarts while the database still knows it."""
    db = session_factory(settings.database_url)
    path = var_dir / "demo-key"
    if path.exists():
        kept = path.read_text().strip()
        with db() as session:
            if find_caller(session, kept) is not None:
                return kept
    with db() as session:
        exists = session.scalar(select(Project.id).where(Project.id == DEMO_PROJECT)) is not None
    if not exists:
        projects.create_project(
            db, {"id": DEMO_PROJECT, "name": "Demo", "channels": ["email", "sms", "push", "webhook"]}
        )
    key = projects.create_key(db, DEMO_PROJECT, "demo", KeyKind.LIVE)["key"]
    path.write_text(key)
    path.chmod(0o600)
    return key


_CLI = (sys.executable, "-m", "app.runtime.cli")
# Each role's command. A worker of its own on the transactional lanes, as a deployment
# should run one: bulk work, however much one project makes, never holds its threads.
COMMANDS = {
    "api": ("api",),
    "worker": ("worker",),
    # A node name of its own: two `celery@<host>` would answer every ping and inspect as one.
    "transactional-worker": ("worker", "--transactional", "-n", "transactional@%h"),
    "beat": ("beat",),
    "flower": ("flower",),
}
# How each role is asked to stop: gunicorn's SIGINT is its quick shutdown, Celery's
# SIGTERM its warm one (running tasks finish).
STOP_SIGNALS = {
    "api": signal.SIGINT,
    "worker": signal.SIGTERM,
    "transactional-worker": signal.SIGTERM,
    "beat": signal.SIGTERM,
    "flower": signal.SIGTERM,
}
STOP_TIMEOUT = 8


def _spawn(role: str, env: dict[str, str]) -> subprocess.Popen:
    """A child in its own session: Ctrl-C reaches only us, and we stop children in order."""
    return subprocess.Popen([*_CLI, *COMMANDS[role]], env=env, start_new_session=True, preexec_fn=die_with_parent)


def _role(child: subprocess.Popen) -> str:
    """The role a child runs: the one whose command `_spawn` gave it."""
    command = tuple(cast(list[str], child.args)[len(_CLI) :])
    return next(role for role, args in COMMANDS.items() if args == command)


def _wait_ready(url: str, children: list[subprocess.Popen]) -> bool:
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        if any(child.poll() is not None for child in children):
            return False
        try:
            if requests.get(f"{url}/readyz", timeout=1).status_code == 200:
                return True
        except requests.RequestException:
            pass
        time.sleep(0.25)
    return False


def _print_banner(url: str, settings: Settings, demo_key: str) -> None:
    body = json.dumps(
        {
            "channel": "email",
            "to": {"email": "ada@example.com"},
            "content": {"subject": "Hello", "text": "First notification"},
        }
    )
    print(
        f"""
Tidings is ready at {url}  (API docs: {url}/docs, Flower: http://{settings.host}:{settings.flower_port})
  console:          {url}/console  (sign in with the admin key or the demo project key)
  admin key:        {settings.admin_key}
  demo project key: {demo_key}
  providers:        {", ".join(f"{c}={','.join(chain)}" for c, chain in settings.chains.items())}

Send a first notification:
  curl -s {url}/v1/messages -H 'Authorization: Bearer {demo_key}' \\
       -H 'Content-Type: application/json' -d '{body}'
Then follow it with:  curl -s {url}/v1/messages/<id> -H 'Authorization: Bearer {demo_key}'
Press Ctrl-C to stop everything.
""",
        flush=True,
    )


# A child that dies is started again after a wait that doubles with each death in a row,
# from the first to the most; one that stayed up STABLE_SECONDS starts from the first again.
FIRST_RESTART_WAIT = 1.0
MOST_RESTART_WAIT = 30.0
STABLE_SECONDS = 60.0


@dataclass
class _Restarts:
    """One role's deaths in a row, when its current process started, and when it is due again."""

    in_a_row: int = 0
    started: float = field(default_factory=time.monotonic)
    due: float | None = None


def _supervise(children: list[subprocess.Popen], env: dict[str, str]) -> int:
    """Start a child that dies again, after its backoff, until we are told to stop.

    A worker that exits (a broker lost for longer than it retries, an out-of-memory kill)
    must not leave `make run` up but delivering nothing; a child that dies at once again
    and again is retried at most every MOST_RESTART_WAIT seconds, and says so each time.
    """
    stop_requested = False

    def request_stop(*_: Any) -> None:
        nonlocal stop_requested
        stop_requested = True

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    restarts = {_role(child): _Restarts() for child in children}
    while not stop_requested:
        now = time.monotonic()
        for index, child in enumerate(children):
            role = _role(child)
            state = restarts[role]
            if child.poll() is None:
                continue
            if state.due is None:
                state.in_a_row = 1 if now - state.started >= STABLE_SECONDS else state.in_a_row + 1
                wait = min(FIRST_RESTART_WAIT * 2 ** (state.in_a_row - 1), MOST_RESTART_WAIT)
                state.due = now + wait
                print(
                    f"tidings: {role} exited with {child.returncode}; restarting it in {wait:g} s "
                    f"({state.in_a_row} in a row)",
                    file=sys.stderr,
                    flush=True,
                )
            elif now >= state.due:
                children[index] = _spawn(role, env)
                restarts[role] = _Restarts(in_a_row=state.in_a_row)
                print(f"tidings: {role} restarted (pid {children[index].pid})", file=sys.stderr, flush=True)
        time.sleep(0.2)
    return 0


def _stop(children: list[subprocess.Popen]) -> None:
    for child in children:
        if child.poll() is None:
            child.send_signal(STOP_SIGNALS[_role(child)])
    deadline = time.monotonic() + STOP_TIMEOUT
    for child in children:
        try:
            child.wait(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
