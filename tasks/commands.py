"""`tidings worker` and `tidings beat`: the commands that run this package's tasks.

They live beside the tasks because app/ never imports tasks/; the `tidings` command
(app/runtime/cli.py) finds them through the package's `tidings.commands` entry points.
"""

from __future__ import annotations

import click

from app.delivery.queues import all_queues, transactional_queues
from app.runtime.cli_base import load_settings, one_line_errors
from tasks.celery_app import configure


@click.command(context_settings={"ignore_unknown_options": True})
@click.option("--transactional", is_flag=True, help="Only the transactional lanes, which bulk work never occupies.")
@click.argument("celery_args", nargs=-1, type=click.UNPROCESSED)
@one_line_errors
def worker(transactional: bool, celery_args: tuple[str, ...]) -> None:
    """Run a Celery worker on every queue, or on the transactional ones (extra arguments go to `celery worker`)."""
    settings = load_settings()
    queues = transactional_queues(settings) if transactional else all_queues(settings)
    defaults = ["-Q", ",".join(queues), "--pool", "threads", "--concurrency", "8"]
    configure(settings).worker_main(["worker", "--loglevel", "INFO", *defaults, *celery_args])


@click.command()
@one_line_errors
def beat() -> None:
    """Run Celery beat: release due messages, sweep stalled ones."""
    settings = load_settings()
    settings.var_dir.mkdir(parents=True, exist_ok=True)
    schedule = str(settings.var_dir / "celerybeat-schedule")
    configure(settings).start(["beat", "--loglevel", "INFO", "--schedule", schedule])
