"""Beat work: scheduled messages are released on time; stalled ones are picked up again."""

from __future__ import annotations

import threading
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
import redis
from sqlalchemy import text

from app.delivery import adapters, fairness, heartbeats
from app.delivery.queues import deliver_queue
from app.enums import Priority
from tasks.celery_app import configure
from tasks.maintenance import release_due, sweep
from tests.conftest import email

pytestmark = pytest.mark.usefixtures("worker")


def test_a_scheduled_message_is_released_when_due(project, engine):
    later = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    message_id = project.send(email(scheduled_at=later)).get_json()["id"]
    release_due()
    assert project.get(message_id).get_json()["status"] == "scheduled"
    with engine.begin() as connection:  # as if it had been sent two hours ago, due a second ago
        connection.execute(
            text(
                "UPDATE messages SET created_at = created_at - interval '2 hours', "
                "scheduled_at = now() - interval '1 second' WHERE id = :id"
            ),
            {"id": message_id},
        )
    release_due()
    message = project.wait_for(message_id)
    assert message["status"] == "sent"
    assert [e["type"] for e in message["events"]] == ["scheduled", "ready", "sending", "sent"]


def test_a_message_whose_task_was_lost_is_swept(project, engine, fake_provider):
    later = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    message_id = project.send(email(scheduled_at=later)).get_json()["id"]
    with engine.begin() as connection:  # as if the prepare task had been lost two minutes ago
        connection.execute(
            text("UPDATE messages SET status = 'accepted', updated_at = now() - interval '2 minutes' WHERE id = :id"),
            {"id": message_id},
        )
    assert sweep()["redispatched"] >= 1
    assert project.wait_for(message_id)["status"] == "sent"
    assert fake_provider.count(message_id) == 1


def abandon_claim(project, engine) -> str:
    """A message claimed an hour ago by a worker that never came back."""
    later = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    message_id = project.send(email(scheduled_at=later)).get_json()["id"]
    with engine.begin() as connection:
        connection.execute(
            text(
                "UPDATE messages SET status = 'sending', attempts = 1, provider = 'fake', "
                "to_address = 'ada@example.com', claimed_at = now() - interval '1 hour' WHERE id = :id"
            ),
            {"id": message_id},
        )
    return message_id


def test_an_abandoned_claim_is_retried_where_the_provider_deduplicates(project, engine, fake_provider):
    message_id = abandon_claim(project, engine)
    assert sweep()["retried"] >= 1
    message = project.wait_for(message_id)
    assert message["status"] == "sent"
    assert message["attempts"] == 2
    assert "retrying" in [e["type"] for e in message["events"]]
    assert fake_provider.count(message_id) == 1


@pytest.fixture
def non_deduplicating_fake(settings):
    configure(replace(settings, environ={**settings.environ, "FAKE_PROVIDER_IDEMPOTENT": "false"}))
    adapters.provider_instance.cache_clear()
    yield
    configure(settings)
    adapters.provider_instance.cache_clear()


def test_an_abandoned_claim_becomes_unknown_elsewhere(project, engine, non_deduplicating_fake, fake_provider):
    message_id = abandon_claim(project, engine)
    assert sweep()["unknown"] >= 1
    message = project.get(message_id).get_json()
    assert message["status"] == "unknown"
    assert message["events"][-1]["type"] == "unknown"
    assert fake_provider.count(message_id) == 0


def held_by(
    project,
    engine,
    worker: str,
    status: str = "sending",
    still_for: str = "0 seconds",
    priority: str = Priority.TRANSACTIONAL,
) -> str:
    """A message `status` since `still_for` ago; when sending, claimed just now by `worker`."""
    later = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    message_id = project.send(email(scheduled_at=later, priority=priority)).get_json()["id"]
    with engine.begin() as connection:
        connection.execute(
            text(
                "UPDATE messages SET status = :status, attempts = 1, provider = 'fake', "
                "to_address = 'ada@example.com', claimed_at = now(), claimed_by = :worker, "
                "claim_id = gen_random_uuid(), updated_at = now() - CAST(:still AS interval) WHERE id = :id"
            ),
            {"id": message_id, "status": status, "worker": worker, "still": still_for},
        )
    return message_id


def test_a_silent_workers_claim_is_settled_long_before_the_claim_timeout(
    project, engine, migrated, non_deduplicating_fake, fake_provider
):
    client = redis.Redis.from_url(migrated.redis_url)
    ghost, alive = f"ghost:1:{uuid.uuid4().hex[:8]}", f"alive:2:{uuid.uuid4().hex[:8]}"
    now, micros = client.time()
    client.hset(heartbeats.KEY, ghost, now * 1000 + micros // 1000 - 30_000)  # it died 30 s ago
    heartbeats.beat(client, alive)
    abandoned, held = held_by(project, engine, ghost), held_by(project, engine, alive)
    taken = held_by(project, engine, ghost, status="ready", still_for="45 seconds")  # its task died with it
    counts = sweep()
    assert counts["unknown"] >= 1 and counts["silent_workers"] >= 1 and counts["redispatched"] >= 1
    message = project.get(abandoned).get_json()
    assert (message["status"], message["events"][-1]["type"]) == ("unknown", "unknown")
    assert project.get(held).get_json()["status"] == "sending"  # its worker beats: not the sweeper's
    assert project.wait_for(taken)["status"] == "sent"
    assert fake_provider.count(abandoned) == 0 and fake_provider.count(taken) == 1
    assert ghost.encode() not in client.hkeys(heartbeats.KEY)
    heartbeats.forget(client, [alive])


def test_a_silent_workers_lost_tokens_leave_no_chunk_of_their_lane_behind(project, engine, migrated, fake_provider):
    """Bulk lane tokens the dead worker had taken (two, as a worker holds several) leave
    their chunks on the lane; the sweep queues those rows again as one chunk, and the
    abandoned claim's, each with a token. Without more tokens the lane holds more chunks
    than tokens, the copy finds its rows sent, and the chunk behind it would wait for
    STALLED_AFTER_SECONDS."""
    client = redis.Redis.from_url(migrated.redis_url)
    ghost, lane = f"ghost:1:{uuid.uuid4().hex[:8]}", deliver_queue("fake", Priority.BULK)
    client.delete(*client.keys(f"{fairness.PREFIX}{lane}:*") or ["-"])  # no chunk an earlier test left
    now, micros = client.time()
    client.hset(heartbeats.KEY, ghost, now * 1000 + micros // 1000 - 30_000)  # it died 30 s ago
    taken = [held_by(project, engine, ghost, status="ready", still_for="45 seconds", priority=Priority.BULK)]
    taken.append(held_by(project, engine, ghost, status="ready", still_for="45 seconds", priority=Priority.BULK))
    fairness.deposit(client, lane, [(project.id, [i]) for i in taken])  # their chunks; the tokens died with the ghost
    abandoned = held_by(project, engine, ghost, priority=Priority.BULK)
    counts = sweep()
    assert counts["redispatched"] >= 2 and counts["retried"] >= 1  # other tests' rows may stand still too
    assert [project.wait_for(i)["status"] for i in (*taken, abandoned)] == ["sent"] * 3
    assert [fake_provider.count(i) for i in (*taken, abandoned)] == [1] * 3


def test_a_silent_workers_lost_tokens_leave_no_young_chunk_behind(project, engine, migrated, fake_provider):
    """The tokens a dead worker held take no chunk of their own: the lane's next tokens
    take its oldest chunks, so what their loss leaves behind is the youngest, deposited
    after the death (another worker's prepare went on). No row has stood still, so no
    copy is queued; every chunk waiting in the lane still gets a token, or those rows
    would wait for STALLED_AFTER_SECONDS (1 run in 3 of a SIGKILL between calls)."""
    client = redis.Redis.from_url(migrated.redis_url)
    ghost, lane = f"ghost:1:{uuid.uuid4().hex[:8]}", deliver_queue("fake", Priority.BULK)
    client.delete(*client.keys(f"{fairness.PREFIX}{lane}:*") or ["-"])  # no chunk an earlier test left
    now, micros = client.time()
    client.hset(heartbeats.KEY, ghost, now * 1000 + micros // 1000 - 30_000)  # it died 30 s ago
    young = [held_by(project, engine, ghost, status="ready", priority=Priority.BULK) for _ in range(2)]
    fairness.deposit(client, lane, [(project.id, [i]) for i in young])  # made ready just now; no token left for them
    counts = sweep()
    assert counts["silent_workers"] >= 1
    assert [project.wait_for(i)["status"] for i in young] == ["sent"] * 2
    assert [fake_provider.count(i) for i in young] == [1] * 2


def test_two_beats_releasing_at_once_release_each_message_once(client, engine):
    """Two release_due runs at the same moment, as two beat processes would start them."""
    from tests.faults.stack import new_project

    project_id = new_project(engine)
    with engine.begin() as connection:
        connection.execute(
            text(
                """
                INSERT INTO messages (project_id, channel, status, priority, to_address, scheduled_at, created_at)
                SELECT :p, 'email', 'scheduled', 'bulk', 'due' || g || '@example.com',
                       now() - interval '1 second', now() - interval '1 hour'
                FROM generate_series(1, 3000) AS g
                """
            ),
            {"p": project_id},
        )
    start = threading.Barrier(2)
    released: list[int] = []

    def beat() -> None:
        start.wait()
        released.append(release_due()["scheduled"])

    threads = [threading.Thread(target=beat) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    with engine.connect() as connection:
        left = connection.execute(
            text("SELECT count(*) FROM messages WHERE project_id = :p AND status = 'scheduled'"), {"p": project_id}
        ).scalar_one()
    assert left == 0
    assert sum(released) == 3000
    with engine.begin() as connection:  # bare rows with no content: no worker could ever send them
        connection.execute(text("DELETE FROM projects WHERE id = :p"), {"p": project_id})


def test_the_sweep_forgets_webhook_receipts_too_old_to_be_replayed(client, engine):
    with engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO inbound_receipts (source, key, received_at) VALUES "
                "('sweep-test', 'old', now() - interval '15 days'), ('sweep-test', 'recent', now() - interval '1 day')"
            )
        )
    sweep()
    with engine.connect() as connection:
        left = connection.execute(text("SELECT key FROM inbound_receipts WHERE source = 'sweep-test'")).scalars().all()
    assert left == ["recent"]
