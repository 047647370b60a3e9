"""A worker told to stop hands back the part of its batch it has not sent yet."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Iterator

import pytest
import redis
from celery.signals import worker_process_init, worker_shutting_down
from sqlalchemy import text

from tasks.deliver import deliver
from tasks.shutdown import STOPPING, stopping
from tests.faults.stack import insert_accepted, new_project


@pytest.fixture
def stopping_cleared(migrated) -> Iterator[None]:
    """Undo what a shutdown signal leaves: the event, and the flag for pool children."""
    yield
    STOPPING.clear()
    client = redis.Redis.from_url(migrated.redis_url)
    for key in client.scan_iter(match=f"tidings:stopping:*:{os.getpid()}"):
        client.delete(key)


def ready_messages(engine, count: int) -> list[str]:
    ids = insert_accepted(engine, new_project(engine), count)
    with engine.begin() as connection:
        connection.execute(
            text("UPDATE messages SET status = 'ready', provider = 'fake' WHERE id = ANY(CAST(:ids AS uuid[]))"),
            {"ids": ids},
        )
    return ids


def test_sigterm_mid_batch_returns_the_unsent_rest_with_its_attempt(engine, fake_provider, stopping_cleared, client):
    ids = ready_messages(engine, 150)  # the fake provider takes 100 per call: two calls

    def shutdown_during_the_first_call(request):
        worker_shutting_down.send(sender="celery@test", sig="SIGTERM", how="Warm", exitcode=0)
        return None  # and answer it normally

    fake_provider.override = shutdown_during_the_first_call
    deliver("fake", ids)
    with engine.connect() as connection:
        rows = connection.execute(
            text(
                "SELECT status, attempts, next_attempt_at <= now() AS due, count(*) FROM messages "
                "WHERE id = ANY(CAST(:ids AS uuid[])) GROUP BY 1, 2, 3"
            ),
            {"ids": ids},
        ).all()
    assert sorted(map(tuple, rows)) == [("ready", 0, True, 50), ("sent", 1, None, 100)]
    assert len(fake_provider.delivered()) == 100

    STOPPING.clear()
    fake_provider.override = None
    deliver("fake", ids)
    assert sorted(r.message_id for r in fake_provider.delivered()) == sorted(ids)


def _child_sees(queue: multiprocessing.Queue) -> None:
    worker_process_init.send(sender=None)
    queue.put(stopping())


def test_a_prefork_child_learns_of_its_parents_shutdown(client, stopping_cleared):
    context = multiprocessing.get_context("fork")

    def ask_a_child() -> bool:
        queue = context.Queue()
        child = context.Process(target=_child_sees, args=(queue,))
        child.start()
        child.join(timeout=30)
        return queue.get(timeout=5)

    assert ask_a_child() is False
    worker_shutting_down.send(sender="celery@test", sig="SIGTERM", how="Warm", exitcode=0)
    assert ask_a_child() is True
