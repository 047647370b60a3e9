"""Operator commands: projects, keys, a test send, the digest, requeue, pause/resume, purge.

Each command calls the same service function as its HTTP route and validates its input
with the same schema, so the CLI and the API cannot drift apart: what the API answers
with a 4xx, the CLI reports as one line and exit status 2.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import click
import redis
from sqlalchemy.orm import Session, sessionmaker

from app.config import Settings
from app.db import session_factory
from app.enums import ACTIVE_STATUSES, REQUEUABLE_STATUSES, MessageStatus
from app.redis_client import redis_for
from app.runtime.cli_base import load_settings, one_line_errors

# `send --wait` follows a message until it has no work ahead of it.
SETTLED = {status.value for status in MessageStatus} - {status.value for status in ACTIVE_STATUSES}


@dataclass(frozen=True)
class Ops:
    """What a command needs: settings (checked), the database, Redis, a configured Celery."""

    settings: Settings
    db: sessionmaker[Session]
    redis: redis.Redis


def connect() -> Ops:
    from app.delivery.broker import configure

    settings = load_settings()
    configure(settings)
    return Ops(settings, session_factory(settings.database_url), redis_for(settings.redis_url))


def load(schema: Any, data: dict[str, Any]) -> dict[str, Any]:
    """Validate with the API's schema; absent options are left out, as a client would."""
    return schema.load({name: value for name, value in data.items() if value not in (None, (), [])})


def table(rows: Iterable[Sequence[Any]], header: Sequence[str]) -> None:
    rows = [["-" if cell is None else str(cell) for cell in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(header)]
    for row in [list(header), *rows]:
        click.echo("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


def csv(value: str | None) -> list[str] | None:
    return [part.strip() for part in value.split(",") if part.strip()] if value else None


@click.group()
def projects() -> None:
    """Create and list projects."""


@projects.command("create")
@click.option("--id", "project_id", help="a-z, 0-9 and -; generated when absent.")
@click.option("--name", required=True)
@click.option("--channels", help="Comma-separated: email,sms,push,webhook,in_app (default: all).")
@click.option("--rate-limit", type=int, help="API requests per minute.")
@click.option("--retention-days", type=int, help="Days a finished message is kept (default 30).")
@one_line_errors
def projects_create(
    project_id: str | None, name: str, channels: str | None, rate_limit: int | None, retention_days: int | None
) -> None:
    """Create a project."""
    from app.schemas.core import ProjectCreatedSchema, ProjectCreateSchema
    from app.services import projects as service

    data = load(
        ProjectCreateSchema(),
        {
            "id": project_id,
            "name": name,
            "channels": csv(channels),
            "rate_limit_per_min": rate_limit,
            "settings": {"retention_days": retention_days} if retention_days is not None else None,
        },
    )
    project = ProjectCreatedSchema().dump(service.create_project(connect().db, data))
    table([(project["id"], project["name"], ",".join(project["channels"]), project["rate_limit_per_min"])], _PROJECT)
    click.echo(f"webhook signing secret (shown once): {project['webhook_signing_secret']}")


_PROJECT = ("ID", "NAME", "CHANNELS", "RATE/MIN")


@projects.command("list")
@one_line_errors
def projects_list() -> None:
    """List every project."""
    from app.services import projects as service

    rows = service.list_projects(connect().db)
    table([(p.id, p.name, ",".join(p.channels), p.rate_limit_per_min) for p in rows], _PROJECT)


@click.group()
def keys() -> None:
    """Create and revoke a project's API keys."""


@keys.command("create")
@click.argument("project")
@click.option("--name", required=True)
@click.option("--kind", type=click.Choice(["live", "test"]), default="live", show_default=True)
@one_line_errors
def keys_create(project: str, name: str, kind: str) -> None:
    """Create a key for PROJECT; the key is shown this once."""
    from app.schemas.core import KeyCreateSchema
    from app.services import projects as service

    data = load(KeyCreateSchema(), {"name": name, "kind": kind})
    key = service.create_key(connect().db, project, data["name"], data["kind"])
    table([(key["id"], key["name"], key["kind"], key["key"])], ("ID", "NAME", "KIND", "KEY (shown once)"))


@keys.command("revoke")
@click.argument("project")
@click.argument("key_id")
@one_line_errors
def keys_revoke(project: str, key_id: str) -> None:
    """Revoke KEY_ID of PROJECT."""
    from app.services import projects as service

    ops = connect()
    service.revoke_key(ops.db, ops.redis, project, key_id)
    click.echo(f"revoked {key_id}")


@click.command()
@click.option("--project", required=True)
@click.option("--to", "address", required=True, help="An email address, E.164 phone, device token or URL.")
@click.option("--channel", type=click.Choice(["email", "sms", "push", "webhook"]), default="email", show_default=True)
@click.option("--subject", default="Tidings test notification", show_default=True)
@click.option("--text", "body", default="If you can read this, Tidings delivers.", show_default=True)
@click.option("--test", "test_key", is_flag=True, help="As a test key would: the log provider, never a real one.")
@click.option("--wait", type=click.FloatRange(0, 300), default=0, help="Seconds to follow it to a final status.")
@one_line_errors
def send(project: str, address: str, channel: str, subject: str, body: str, test_key: bool, wait: float) -> None:
    """Send one test notification through the whole pipeline."""
    from app.access.auth import Caller
    from app.access.limits import send_limits
    from app.enums import Channel, KeyKind
    from app.schemas.core import ADDRESS_FOR_CHANNEL, SendSchema
    from app.services import messages
    from app.services import projects as service

    ops = connect()
    kind = ADDRESS_FOR_CHANNEL[Channel(channel)]
    raw = {"channel": channel, "to": {kind: address}, "content": {"subject": subject, "text": body}}
    if channel != "email":
        raw["content"] = {"text": body}
    data = load(SendSchema(), raw)
    found = service.get_project(ops.db, project)
    key_kind = KeyKind.TEST if test_key else KeyKind.LIVE
    # The project's limits, as its own keys have them: an operator's send counts like any other.
    caller = Caller(found.id, tuple(found.channels), None, key_kind, send_limits(found.settings, ops.settings))
    message_id = messages.accept(ops.db, caller, data, raw, None).body["id"]
    click.echo(f"accepted {message_id}")
    deadline = time.monotonic() + wait
    status = "accepted"
    while wait and time.monotonic() < deadline:
        status = messages.get_message(ops.db, project, message_id)["status"]
        if status in SETTLED:
            break
        time.sleep(0.2)
    if wait:
        click.echo(f"status {status}")


@click.command()
@click.option(
    "--since", help="RFC 3339 with a zone; cut to the hour, or the day if older than 2 days (default: 24 h ago)."
)
@click.option("--project")
@click.option("--json", "as_json", is_flag=True, help="The endpoint's JSON instead of tables.")
@one_line_errors
def digest(since: str | None, project: str | None, as_json: bool) -> None:
    """What the system is doing: the same numbers as GET /v1/admin/digest."""
    from app.schemas.core import DigestQuerySchema, DigestSchema
    from app.services import digest as service

    query = load(DigestQuerySchema(), {"since": since, "project": project})
    ops = connect()
    answer = DigestSchema().dump(
        service.digest(ops.db, ops.settings, ops.redis, query.get("since"), query.get("project"))
    )
    if as_json:
        click.echo(json.dumps(answer, indent=2))
        return
    click.echo(f"Messages created since {answer['since']}")
    table([(r["project"], r["channel"], r["status"], r["count"]) for r in answer["counts"]], _COUNTS)
    throughput = answer["throughput"]
    click.echo(f"\nSent: {throughput['last_minute']} in the last minute, {throughput['last_hour']} in the last hour")
    click.echo("\nQueues")
    table([(q["name"], q["depth"]) for q in answer["queues"]], ("QUEUE", "TASKS"))
    click.echo("\nWaiting for a worker")
    table([(lane["name"], lane["count"], f"{lane['oldest_age_seconds']:.1f}") for lane in answer["lanes"]], _LANES)
    click.echo("\nProviders")
    table([_provider_row(p) for p in answer["providers"]], _PROVIDERS)
    dead = answer["dead_letters"]
    click.echo(f"\nDead letters: {dead['total']}")
    table([(row["project"], row["count"]) for row in dead["by_project"]], ("PROJECT", "DEAD"))
    click.echo("\nDaily quotas used today")
    table([(q["project"], q["channel"], q["used"], q["limit"], q["resets_at"]) for q in answer["quotas"]], _QUOTAS)


_COUNTS = ("PROJECT", "CHANNEL", "STATUS", "COUNT")
_LANES = ("LANE", "MESSAGES", "OLDEST (s)")
_PROVIDERS = ("PROVIDER", "CHANNELS", "RATE/S", "PAUSED", "BREAKER")
_QUOTAS = ("PROJECT", "CHANNEL", "USED", "QUOTA", "RESETS AT")


def _provider_row(state: dict[str, Any]) -> tuple[Any, ...]:
    paused = "no"
    if state["paused"]:
        left = state["paused_seconds_left"]
        paused = f"{state['paused_reason']} ({'until resumed' if left is None else f'{left:.0f}s left'})"
    return state["name"], ",".join(state["channels"]), state["rate_per_sec"], paused, state["breaker"]


@click.command()
@click.option(
    "--status",
    type=click.Choice([status.value for status in REQUEUABLE_STATUSES]),
    default=MessageStatus.DEAD.value,
    show_default=True,
    help="dead letters, or unknown messages (which may then be delivered twice).",
)
@click.option("--id", "ids", multiple=True, help="A message's id; repeat for more.")
@click.option("--project")
@click.option("--channel")
@click.option("--provider")
@click.option("--since", help="Messages created from (RFC 3339).")
@click.option("--until", help="Messages created before (RFC 3339).")
@click.option("--by", "requested_by", default="cli", show_default=True, help="Recorded in each message's timeline.")
@one_line_errors
def requeue(ids: tuple[str, ...], requested_by: str, **filters: str | None) -> None:
    """Send dead letters, or unknown messages, again with fresh attempts (up to 10,000 a run)."""
    from app.schemas.core import RequeueSchema
    from app.services import operations

    criteria = load(RequeueSchema(), {"ids": list(ids), "requested_by": requested_by, **filters})
    answer = operations.requeue_answer(connect().db, criteria)
    click.echo(f"requeued {answer['requeued']}")
    if "warning" in answer:
        click.echo(f"warning: {answer['warning']}", err=True)


@click.command()
@click.argument("provider")
@click.option("--seconds", type=int, help="How long (default: until resumed).")
@click.option("--reason", default="paused by an operator (cli)", show_default=True)
@one_line_errors
def pause(provider: str, seconds: int | None, reason: str) -> None:
    """Stop sending through PROVIDER; messages wait and keep their attempts."""
    from app.schemas.core import PauseSchema
    from app.services import operations

    ops = connect()
    state = operations.set_pause(
        ops.settings, ops.redis, provider, load(PauseSchema(), {"seconds": seconds, "reason": reason})
    )
    table([_provider_row(state)], _PROVIDERS)


@click.command()
@click.argument("provider")
@one_line_errors
def resume(provider: str) -> None:
    """Send through PROVIDER again."""
    from app.services import operations

    ops = connect()
    table([_provider_row(operations.set_pause(ops.settings, ops.redis, provider, None))], _PROVIDERS)


@click.command()
@click.option("--project", help="Only this project (default: every project).")
@click.option("--dry-run", is_flag=True, help="Count what would go; delete nothing.")
@click.option("--max-seconds", type=click.FloatRange(min=1), default=3600, show_default=True)
@one_line_errors
def purge(project: str | None, dry_run: bool, max_seconds: float) -> None:
    """Delete finished messages past their project's retention, as the nightly run does."""
    from app.delivery.retention import purge as run

    report = run(connect().db, project=project, max_seconds=max_seconds, dry_run=dry_run)
    table(sorted(report.deleted.items()), ("PROJECT", "WOULD DELETE" if dry_run else "DELETED"))
    if not report.finished:
        click.echo("stopped at --max-seconds; run it again for the rest")


@click.group()
def check() -> None:
    """Health checks for container orchestrators: exit 0 when healthy, 1 otherwise."""


# Beat saves its schedule at least every 3 minutes (Celery's sync_every) while it runs.
BEAT_SYNC_GRACE = 300


@check.command("worker")
@click.option("--node", help="The worker's node name (default: celery@HOSTNAME, what `tidings worker` uses).")
@click.option("--timeout", type=click.FloatRange(0.1, 30), default=5, show_default=True)
@one_line_errors
def check_worker(node: str | None, timeout: float) -> None:
    """Does the worker on this host answer a ping over the broker?"""
    import socket

    from app.delivery.broker import configure

    node = node or f"celery@{socket.gethostname()}"
    replies = configure(Settings.from_env()).control.ping(destination=[node], timeout=timeout) or []
    if not any(node in reply for reply in replies):
        raise click.ClickException(f"{node} did not answer within {timeout:g}s")
    click.echo(f"{node} ok")


@check.command("beat")
@one_line_errors
def check_beat() -> None:
    """Has beat saved its schedule recently (within 5 minutes)?"""
    settings = Settings.from_env()
    saved = [path.stat().st_mtime for path in settings.var_dir.glob("celerybeat-schedule*")]
    age = time.time() - max(saved) if saved else None
    if age is None or age > BEAT_SYNC_GRACE:
        raise click.ClickException("beat has not saved its schedule in the last 5 minutes")
    click.echo(f"beat ok (schedule saved {age:.0f}s ago)")


COMMANDS = (projects, keys, send, digest, requeue, pause, resume, purge, check)
