"""The `tidings` operator commands, run in-process against the session's PostgreSQL and Redis."""

from __future__ import annotations

import json
import logging
import os
import re
import time
from datetime import UTC, datetime, timedelta

import click
import pytest
from click.testing import CliRunner, Result
from sqlalchemy import text

from app.runtime.cli import main
from tests.conftest import ADMIN_KEY, bearer, create_project, email


@pytest.fixture
def tidings(migrated):
    """Run `tidings ARGS` with the test session's environment. The session's worker runs in this
    process, and its lines (an expired token discarded, a batch delivered) would land in the
    command's captured output: its loggers say only warnings while a command runs."""
    runner = CliRunner()
    workers = [logging.getLogger(name) for name in ("celery", "tasks")]

    def run(*args: str) -> Result:
        levels = [logger.level for logger in workers]
        for logger in workers:
            logger.setLevel(logging.WARNING)
        try:
            return runner.invoke(main, list(args), env=dict(migrated.environ), catch_exceptions=False)
        finally:
            for logger, level in zip(workers, levels, strict=True):
                logger.setLevel(level)

    return run


def fails_with_one_line(result: Result, *needles: str) -> None:
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tidings: "), result.stderr
    for needle in needles:
        assert needle in lines[0]


def test_every_command_has_help(tidings):
    def walk(command: click.Command, path: list[str]):
        yield path
        if isinstance(command, click.Group):
            for name, sub in command.commands.items():
                yield from walk(sub, [*path, name])

    paths = list(walk(main, []))
    assert {"projects", "keys", "send", "digest", "requeue", "pause", "resume", "purge", "mcp", "check"} <= {
        p[0] for p in paths if p
    }
    for path in paths:
        result = tidings(*path, "--help")
        assert result.exit_code == 0, (path, result.output)
        assert "Usage: " in result.output


def test_projects_and_keys(tidings, client, engine):
    created = tidings("projects", "create", "--id", "cli-acme", "--name", "Acme", "--channels", "email,sms")
    assert created.exit_code == 0, created.output
    assert "cli-acme" in created.output and "email,sms" in created.output
    assert "webhook signing secret (shown once): whsec_" in created.output
    assert "cli-acme" in tidings("projects", "list").output
    fails_with_one_line(tidings("projects", "create", "--id", "cli-acme", "--name", "Again"), "exists already")

    made = tidings("keys", "create", "cli-acme", "--name", "backend")
    assert made.exit_code == 0, made.output
    key = re.search(r"tid_live_\S+", made.output).group(0)
    key_id = made.output.splitlines()[1].split()[0]
    assert client.get("/v1/messages", headers=bearer(key)).status_code == 200
    assert tidings("keys", "revoke", "cli-acme", key_id).exit_code == 0
    assert client.get("/v1/messages", headers=bearer(key)).status_code == 401
    fails_with_one_line(tidings("keys", "revoke", "cli-acme", key_id), "No active key")


def test_bad_input_is_one_line_and_writes_nothing(tidings, engine):
    fails_with_one_line(tidings("projects", "create", "--id", "Bad Id", "--name", "X"), "id:")
    fails_with_one_line(tidings("projects", "create", "--name", "X", "--channels", "fax"), "channels")
    fails_with_one_line(tidings("projects", "create", "--name", "X", "--retention-days", "0"), "retention_days")
    with engine.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM projects WHERE name = 'X'")).scalar() == 0
    fails_with_one_line(tidings("send", "--project", "nope", "--to", "not-an-email"), "to.email")
    fails_with_one_line(tidings("digest", "--since", "yesterday"), "since")
    fails_with_one_line(tidings("requeue"), "Name the messages")
    fails_with_one_line(tidings("pause", "pigeon"), "No provider 'pigeon'")


@pytest.mark.usefixtures("worker")
def test_send_follows_a_notification_to_sent(tidings, project, fake_provider):
    result = tidings("send", "--project", project.id, "--to", "ada@example.com", "--wait", "20")
    assert result.exit_code == 0, result.output
    message_id = re.search(r"accepted (\S+)", result.output).group(1)
    assert "status sent" in result.output
    assert fake_provider.count(message_id) == 1
    fails_with_one_line(tidings("send", "--project", "no-such-project", "--to", "ada@example.com"), "No project")


def test_send_counts_against_the_projects_daily_quota(tidings, client):
    spent = create_project(client, settings={"daily_quota": {"email": 0}})
    refused = tidings("send", "--project", spent.id, "--to", "ada@example.com")
    fails_with_one_line(refused, "daily email quota has 0 of 0 left")


def test_digest_as_tables_and_as_json(tidings, project, engine):
    later = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    ids = [project.send(email(scheduled_at=later)).get_json()["id"] for _ in range(2)]
    as_json = tidings("digest", "--project", project.id, "--json")
    assert as_json.exit_code == 0, as_json.output
    answer = json.loads(as_json.output)
    assert answer["counts"] == [{"project": project.id, "channel": "email", "status": "scheduled", "count": 2}]
    tables = tidings("digest", "--project", project.id)
    assert tables.exit_code == 0, tables.output
    assert re.search(rf"{project.id}\s+email\s+scheduled\s+2", tables.output)
    assert "Queues" in tables.output and "Providers" in tables.output and "Dead letters: 0" in tables.output
    assert re.search(rf"{project.id}\s+email\s+2\s+250000\s", tables.output)  # the deployment's quota
    with engine.begin() as connection:
        connection.execute(
            text("UPDATE messages SET status = 'cancelled' WHERE id = ANY(CAST(:ids AS uuid[]))"), {"ids": ids}
        )


def test_requeue_pause_resume(tidings, client, project, engine):
    later = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    dead = project.send(email(scheduled_at=later)).get_json()["id"]
    with engine.begin() as connection:
        connection.execute(text("UPDATE messages SET status = 'dead', attempts = 3 WHERE id = :id"), {"id": dead})
    paused = tidings("pause", "fake", "--seconds", "60", "--reason", "outage")
    assert paused.exit_code == 0, paused.output
    assert "outage" in paused.output
    assert client.get("/v1/admin/providers", headers=bearer(ADMIN_KEY)).get_json()[0]["paused"] is True
    requeued = tidings("requeue", "--id", dead, "--by", "ops@acme")
    assert requeued.output.strip() == "requeued 1"
    requeued_event = next(e for e in project.get(dead).get_json()["events"] if e["type"] == "requeued")
    assert requeued_event["data"] == {"by": "ops@acme", "previous_attempts": 3}
    resumed = tidings("resume", "fake")
    assert resumed.exit_code == 0 and "no" in resumed.output.splitlines()[1]


def test_purge_dry_run_then_for_real(tidings, client, engine):
    tidings("projects", "create", "--id", "cli-short", "--name", "Short", "--retention-days", "1")
    with engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO messages (project_id, channel, status, priority, created_at) "
                "SELECT 'cli-short', 'email', 'sent', 'bulk', now() - interval '2 days' FROM generate_series(1, 4)"
            )
        )
    dry = tidings("purge", "--project", "cli-short", "--dry-run")
    assert re.search(r"cli-short\s+4", dry.output), dry.output
    done = tidings("purge", "--project", "cli-short")
    assert re.search(r"cli-short\s+4", done.output), done.output
    assert re.search(r"cli-short\s+0", tidings("purge", "--project", "cli-short", "--dry-run").output)


def test_check_worker_pings_a_worker_by_node_name(tidings, worker):
    result = tidings("check", "worker", "--node", worker.hostname, "--timeout", "10")
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"{worker.hostname} ok"
    missing = tidings("check", "worker", "--node", "celery@nowhere", "--timeout", "1")
    assert missing.exit_code == 1
    assert "celery@nowhere did not answer within 1s" in missing.output


def test_check_beat_reads_the_age_of_beats_schedule(migrated, tmp_path):
    runner = CliRunner()
    env = {**migrated.environ, "TIDINGS_VAR_DIR": str(tmp_path)}
    assert runner.invoke(main, ["check", "beat"], env=env).exit_code == 1
    schedule = tmp_path / "celerybeat-schedule"
    schedule.write_bytes(b"")
    assert runner.invoke(main, ["check", "beat"], env=env).exit_code == 0
    old = time.time() - 600
    os.utime(schedule, (old, old))
    stale = runner.invoke(main, ["check", "beat"], env=env)
    assert stale.exit_code == 1
    assert "has not saved its schedule" in stale.output


@pytest.mark.usefixtures("worker")
def test_requeue_unknown_messages_warns_that_they_may_arrive_twice(tidings, project, engine, fake_provider):
    later = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    message_id = project.send(email(scheduled_at=later)).get_json()["id"]
    with engine.begin() as connection:
        connection.execute(text("UPDATE messages SET status = 'unknown' WHERE id = :id"), {"id": message_id})
    assert tidings("requeue", "--id", message_id).output.strip() == "requeued 0"  # dead letters only, by default
    result = tidings("requeue", "--status", "unknown", "--id", message_id, "--by", "ops@acme")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "requeued 1"
    assert result.stderr.startswith("warning: requeued while unknown") and "twice" in result.stderr
    message = project.wait_for(message_id)
    assert message["status"] == "sent"
    assert [e["data"]["by"] for e in message["events"] if e["type"] == "requeued"] == ["ops@acme"]
    assert fake_provider.count(message_id) == 1
