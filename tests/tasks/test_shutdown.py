"""A worker told to stop hands back the part of its batch it has not sent yet."""

from __future__ import annotations

import multiprocessing
import os
import uuid
from collections.abc import Iterator

import pytest
import redis
from celery.signals import worker_process_init, worker_shutting_down
from sqlalchemy import text

from app.config import current_settings
from app.db import session_scope
from app.delivery import store
from app.delivery.adapters import provider_instance
from app.enums import MessageStatus
from tasks.deliver import decide_all, deliver, send_all, waiting_groups
from tasks.shutdown import STOPPING, stopping
from tests.faults.stack import ready_messages
from tests.waiting import wait_until


@pytest.fixture
def stopping_cleared(migrated) -> Iterator[None]:
    """Undo what a shutdown signal leaves: the event, and the flag for pool children."""
    yield
    STOPPING.clear()
    client = redis.Redis.from_url(migrated.redis_url)
    for key in client.scan_iter(match=f"tidings:stopping:*:{os.getpid()}"):
        client.delete(key)


def shutdown_during_the_first_call(request):
    """The fake provider's answer hook: SIGTERM arrives while a provider call is in flight."""
    worker_shutting_down.send(sender="celery@test", sig="SIGTERM", how="Warm", exitcode=0)
    return None  # and the call is answered normally


def test_sigterm_mid_batch_hands_back_the_unsent_rest_at_once(engine, fake_provider, stopping_cleared, client):
    ids = ready_messages(engine, 150)  # the fake provider takes 100 per call: two calls
    fake_provider.override = shutdown_during_the_first_call
    with session_scope(client.application.extensions["tidings"].settings.database_url) as session:
        claimed = store.claim(session, "fake", ids, "test-worker", str(uuid.uuid4()))
    run = send_all(provider_instance("fake"), claimed, {})
    assert run.stopped
    assert (len(run.results), len(run.unsent)) == (100, 50)
    outcomes = decide_all(current_settings(), [(claimed, run)])
    handed_back = [o for o in outcomes if o.status is MessageStatus.READY]
    assert len(handed_back) == 50 and all(o.refund_attempt for o in handed_back)
    ((countdown, group),) = waiting_groups(outcomes)
    assert countdown < 1 and {o.message_id for o in group} == {o.message_id for o in handed_back}


def test_a_stopped_deliver_loses_nothing_and_sends_nothing_twice(engine, fake_provider, stopping_cleared, client):
    """End to end through deliver: whoever picks the handed-back messages up (this test, or
    the session's worker), each reaches the provider once and keeps one attempt."""
    ids = ready_messages(engine, 150)
    fake_provider.override = shutdown_during_the_first_call
    deliver("fake", ids)
    assert len(mine(fake_provider, ids)) == 100
    STOPPING.clear()
    fake_provider.override = None
    deliver("fake", ids)
    wait_until(lambda: outcome(engine, ids), lambda final: final == [("sent", 1, 150)], 20, "all 150 sent once")
    assert sorted(mine(fake_provider, ids)) == sorted(ids)


def mine(provider, ids: list[str]) -> list[str]:
    """This test's deliveries, repeats included: the session's worker may deliver another
    test's late retry to the same provider meanwhile."""
    wanted = set(ids)
    return [r.message_id for r in provider.delivered() if r.message_id in wanted]


def outcome(engine, ids: list[str]) -> list[tuple]:
    with engine.connect() as connection:
        return [
            tuple(row)
            for row in connection.execute(
                text(
                    "SELECT status, attempts, count(*) FROM messages "
                    "WHERE id = ANY(CAST(:ids AS uuid[])) GROUP BY 1, 2 ORDER BY 1, 2"
                ),
                {"ids": ids},
            )
        ]


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
