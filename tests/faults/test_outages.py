"""Redis and PostgreSQL going away: committed messages still arrive, once."""

from __future__ import annotations

import contextlib
import subprocess
import time

import requests
from pgserver._commands import pg_ctl
from sqlalchemy import create_engine, text

from app.runtime import migrate
from app.runtime.embedded import start_postgres
from tests.conftest import ADMIN_KEY
from tests.faults.stack import (
    assert_ledger_agrees,
    insert_accepted,
    new_project,
    wait_until_terminal,
)
from tests.waiting import wait_until


def test_redis_lost_with_10000_queued_the_sweeper_delivers_them_all(make_stack, provider, engine, fault_project):
    provider.latency = 0.01
    stack = make_stack()
    ids = insert_accepted(engine, fault_project, 10_000)
    stack.publish_prepare(ids)
    assert stack.redis.process is not None
    stack.redis.stop(kill=True)  # no persistence: every queued task is gone
    stack.redis.start()
    restarted = time.monotonic()
    stack.start_beat()
    stack.start_worker()
    seen = wait_until_terminal(engine, ids, timeout=120)
    recovery = time.monotonic() - restarted
    assert_ledger_agrees(seen, provider, idempotent=True)
    assert set(seen.values()) == {"sent"}
    print(f"\nRedis lost with 10,000 queued: all sent {recovery:.1f} s after the restart")


def test_api_accepts_while_redis_is_down_and_the_messages_follow_later(make_stack, provider, engine):
    stack = make_stack()
    api = stack.start_api()
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    project = requests.post(
        f"{api}/v1/admin/projects", json={"name": "Outage", "rate_limit_per_min": 2}, headers=admin, timeout=10
    ).json()
    key = requests.post(
        f"{api}/v1/admin/projects/{project['id']}/keys", json={"name": "k"}, headers=admin, timeout=10
    ).json()["key"]
    stack.redis.stop(kill=True)
    body = {"channel": "email", "to": {"email": "ada@example.com"}, "content": {"subject": "Hi", "text": "t"}}
    answers, slowest = [], 0.0
    for _ in range(4):  # twice the rate limit: the limiter must fail open, not shut
        started = time.monotonic()
        answers.append(
            requests.post(f"{api}/v1/messages", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=30)
        )
        slowest = max(slowest, time.monotonic() - started)
    assert [a.status_code for a in answers] == [202] * 4
    assert "RateLimit-Limit" not in answers[0].headers
    assert requests.get(f"{api}/readyz", timeout=10).status_code == 503
    ids = [a.json()["id"] for a in answers]
    # The coalescer's publish failed after the 202s: said in the log, left to the sweeper.
    stack.wait_for_log("api", "accepted messages; the sweeper will dispatch them")
    stack.redis.start()
    stack.start_beat()
    stack.start_worker()
    seen = wait_until_terminal(engine, ids, timeout=60)
    assert set(seen.values()) == {"sent"}
    assert all(provider.count(i) == 1 for i in ids)
    print(f"\nRedis down: 4 sends answered 202, the slowest in {slowest * 1000:.0f} ms; delivered after restart")


def test_postgres_restarted_mid_drain(make_stack, provider, tmp_path):
    server = start_postgres(tmp_path / "pg")
    try:
        url = server.get_uri()
        migrate.upgrade(url)
        own = create_engine(url.replace("postgresql://", "postgresql+psycopg2://", 1))
        project = new_project(own)
        ids = insert_accepted(own, project, 1000)
        stack = make_stack(DATABASE_URL=url)
        stack.publish_prepare(ids)
        stack.start_beat()
        stack.start_worker("worker", "--concurrency", "2")
        # Mid-drain, or the restart tests nothing: before the drain began it would pass trivially.
        wait_until(
            lambda: len(provider.delivered()), lambda n: n >= 150, 30, "150 of 1000 delivered before the restart", 0.01
        )
        pg_ctl(["-m", "immediate", "-w", "restart"], pgdata=server.pgdata, user=server.system_user)
        own.dispose()
        seen = wait_until_terminal(own, ids, timeout=90)
        assert_ledger_agrees(seen, provider, idempotent=True)
        assert set(seen.values()) == {"sent"}
        with own.connect() as connection:
            unclaimed_yet_sent = connection.execute(
                text("SELECT count(*) FROM messages WHERE id = ANY(CAST(:ids AS uuid[])) AND attempts = 0"),
                {"ids": [r.message_id for r in provider.delivered()]},
            ).scalar_one()
        assert unclaimed_yet_sent == 0
        own.dispose()
        stack.stop()
    finally:
        # pgserver stops the postmaster it started, which the restart replaced: stop the new one.
        with contextlib.suppress(subprocess.CalledProcessError):
            pg_ctl(["-m", "immediate", "-w", "stop"], pgdata=server.pgdata, user=server.system_user)
        server.cleanup()
