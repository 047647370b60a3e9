"""Resend of an abandoned claim: the very same calls again, so the provider's key answers them."""

from __future__ import annotations

import uuid
from collections import Counter
from dataclasses import replace

import pytest
import redis
from sqlalchemy import text

from app.db import session_scope
from app.delivery import adapters, store
from app.enums import MessageStatus
from tasks import isolation
from tasks.celery_app import configure
from tasks.resend import resend
from tests.faults.stack import insert_accepted, new_project, statuses
from tests.providers.resend_server import ResendServer


@pytest.fixture
def resend_server(settings, migrated):
    """Resend's adapter pointed at a local server shaped like it, for this test."""
    server = ResendServer().start()
    resend_env = {"RESEND_BASE_URL": server.url, "RESEND_API_KEY": "re_test_123", "EMAIL_FROM": "hi@tidings.test"}
    configure(replace(settings, environ={**settings.environ, **resend_env}))
    adapters.clear()
    yield server
    configure(settings)
    adapters.clear()
    server.stop()


def handed_back(engine, ids: list[str], claim_id: str, dead_worker: str | None = None) -> None:
    """The messages `sending` in one claim the sweeper handed back (or that `dead_worker` still holds)."""
    with engine.begin() as connection:
        connection.execute(
            text(
                "UPDATE messages SET status = 'sending', provider = 'resend', attempts = 1, claimed_at = now(), "
                "claimed_by = :by, claim_id = CAST(:claim AS uuid) WHERE id = ANY(CAST(:ids AS uuid[]))"
            ),
            {"ids": ids, "claim": claim_id, "by": dead_worker or store.HANDED_BACK},
        )


def events(engine, ids: list[str]) -> Counter:
    with engine.connect() as connection:
        return Counter(
            connection.execute(
                text("SELECT type FROM events WHERE message_id = ANY(CAST(:ids AS uuid[]))"), {"ids": ids}
            ).scalars()
        )


def test_a_claim_sent_again_makes_the_same_call_and_the_provider_answers_it(engine, resend_server):
    ids = insert_accepted(engine, new_project(engine), 3)
    claim_id = str(uuid.uuid4())
    handed_back(engine, ids, claim_id)
    resend("resend", claim_id, "bulk")  # the first run's call, as it reached the provider
    handed_back(engine, ids, claim_id)  # its worker died before writing the answer
    resend("resend", claim_id, "bulk")
    assert set(statuses(engine, ids).values()) == {"sent"}
    assert resend_server.deliveries() == Counter({i: 1 for i in ids})
    assert (resend_server.requests, resend_server.replays) == (2, 1)


def test_a_claim_its_dead_worker_still_partly_holds_is_not_taken_over(engine, resend_server):
    ids = insert_accepted(engine, new_project(engine), 3)
    claim_id = str(uuid.uuid4())
    handed_back(engine, ids[:2], claim_id)
    handed_back(engine, ids[2:], claim_id, dead_worker="dead:1:abc")  # the next sweep hands it back
    resend("resend", claim_id, "bulk")
    assert set(statuses(engine, ids).values()) == {"sending"}
    assert resend_server.requests == 0


def test_a_claim_whose_resend_died_too_becomes_unknown_and_is_not_sent_a_third_time(engine, resend_server, migrated):
    ids = insert_accepted(engine, new_project(engine), 2)
    claim_id = str(uuid.uuid4())
    handed_back(engine, ids, claim_id)
    deaths = isolation.UnfinishedRuns(redis.Redis.from_url(migrated.redis_url), "deliver")
    deaths.start(ids)  # the first run, killed
    deaths.start(ids)  # its resend, killed too
    resend("resend", claim_id, "bulk")
    assert set(statuses(engine, ids).values()) == {"unknown"}
    assert events(engine, ids)["unknown"] == 2
    assert resend_server.requests == 0


def test_a_worker_taken_for_dead_writes_nothing_over_the_claim_taken_from_it(engine, settings):
    """Cut off rather than killed, it comes back after the sweeper handed its claim on."""
    ids = insert_accepted(engine, new_project(engine), 1)
    handed_back(engine, ids, str(uuid.uuid4()), dead_worker="resender:2:def")  # no longer the cut-off one's
    with session_scope(settings.database_url) as session:
        written = store.finalise(session, [store.Finalised(ids[0], MessageStatus.FAILED, error="late")], "cut:1:abc")
    assert written == [] and statuses(engine, ids) == {ids[0]: "sending"}
    with session_scope(settings.database_url) as session:
        store.finalise(session, [store.Finalised(ids[0], MessageStatus.FAILED, error="on time")], "resender:2:def")
    assert statuses(engine, ids) == {ids[0]: "failed"}
