"""The `tidings` command: run each process of the stack, migrate, and the dev supervisor.

Every command reads its settings first, so a missing or malformed one ends the command
with a single line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings
from importlib.metadata import entry_points

import click

from app.config import ConfigError, Settings, database_url_from_env
from app.observability import logs
from app.runtime.cli_base import check_database, fail, load_settings, one_line_errors
from app.runtime.memory import tune_malloc

# Loggers that say the same thing every second (beat's release_due) or narrate start-up.
QUIET_LOGGERS = ("pgserver", "alembic.runtime", "celery.app.trace", "celery.worker.strategy", "celery.beat")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """Tidings: notification delivery on PostgreSQL and Celery."""
    tune_malloc(os.environ)
    try:
        logs.configure()
    except ConfigError as error:
        fail(str(error))
    warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR")
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)


@main.command()
@one_line_errors
def dev() -> None:
    """The whole stack on one machine: embedded PostgreSQL and Redis unless the URLs are set."""
    from app.runtime.dev import run

    sys.exit(run(dict(os.environ)))


@main.command()
@click.option("--workers", type=int, default=lambda: int(os.environ.get("TIDINGS_API_WORKERS", "2")))
@one_line_errors
def api(workers: int) -> None:
    """Serve the HTTP API with gunicorn."""
    from app.runtime.server import serve

    serve(load_settings(), workers)


@main.command()
@one_line_errors
def flower() -> None:
    """Run Flower, the Celery monitor (persistent; basic auth from FLOWER_BASIC_AUTH)."""
    from app.delivery.broker import configure

    settings = Settings.from_env()
    if settings.flower_basic_auth is None and not settings.loopback_only:
        raise ConfigError(f"FLOWER_BASIC_AUTH is not set, and Flower would listen on {settings.host}")
    settings.var_dir.mkdir(parents=True, exist_ok=True)
    configure(settings).start(
        [
            "flower",
            f"--address={settings.host}",
            f"--port={settings.flower_port}",
            # Task history survives a restart; workers gone for 5 minutes (autoscaling) leave the list.
            "--persistent=True",
            f"--db={settings.var_dir / 'flower.db'}",
            "--purge_offline_workers=300",
        ]
    )


@main.command()
@one_line_errors
def smtp() -> None:
    """Accept email over SMTP (STARTTLS or TLS, AUTH with a project key) into the pipeline."""
    from app.smtp.server import serve
    from app.smtp.settings import SmtpSettings

    config = SmtpSettings.from_env()
    serve(load_settings(), config)


@main.command()
@one_line_errors
def mcp() -> None:
    """Serve the operator tools to an AI assistant over MCP (stdio); see the README."""
    from app.runtime.cli_ops import connect
    from app.runtime.mcp_server import build

    build(connect()).run("stdio")


@main.group()
def db() -> None:
    """Database migrations."""


@db.command()
@click.argument("revision", default="head")
@one_line_errors
def upgrade(revision: str) -> None:
    """Apply migrations up to REVISION (default: head)."""
    from app.runtime import migrate

    url = database_url_from_env()
    check_database(url)
    migrate.upgrade(url, revision)


@db.command()
@click.argument("revision")
@one_line_errors
def downgrade(revision: str) -> None:
    """Revert migrations down to REVISION."""
    from app.runtime import migrate

    url = database_url_from_env()
    check_database(url)
    migrate.downgrade(url, revision)


@db.command()
@one_line_errors
def current() -> None:
    """Show the revision the database is at."""
    from app.runtime import migrate

    url = database_url_from_env()
    check_database(url)
    migrate.current(url)


def _add_operator_commands() -> None:
    """projects, keys, send, digest, requeue, pause, resume, purge (app/runtime/cli_ops.py)."""
    from app.runtime.cli_ops import COMMANDS

    for command in COMMANDS:
        main.add_command(command)


def _add_worker_commands() -> None:
    """worker and beat live beside the tasks they run (tasks/commands.py). app/ never imports
    tasks/, so the package's metadata names them: pyproject's `tidings.commands` entry points."""
    for entry in entry_points(group="tidings.commands"):
        main.add_command(entry.load(), entry.name)


_add_operator_commands()
_add_worker_commands()

if __name__ == "__main__":
    main()
