"""Answers a worker kept while PostgreSQL was away, written by the sweeper when the worker died."""

from __future__ import annotations

import time
import uuid

import pytest
import redis
from sqlalchemy import text

from app.delivery import store
from app.enums import EventType, MessageStatus
from tasks import kept_answers
from tasks.maintenance import write_kept_answers
from tests.faults.stack import ready_messages


def claim_as(engine, ids: list[str], worker: str) -> None:
    with engine.begin() as connection:
        connection.execute(
            text(
                "UPDATE messages SET status = 'sending', attempts = 1, claimed_by = :worker, claimed_at = now() "
                "WHERE id = ANY(CAST(:ids AS uuid[]))"
            ),
            {"ids": ids, "worker": worker},
        )


@pytest.mark.usefixtures("app")  # the process's settings, as a worker has them
def test_a_dead_workers_kept_answers_are_written_once_and_a_live_ones_are_held(engine, settings):
    """The sweeper writes what a dead worker kept (sent, failed with its event), once even
    if asked twice, and only names the messages whose answers a live worker still holds."""
    client = redis.Redis.from_url(settings.redis_url)
    dead, alive = f"gone:1:{uuid.uuid4().hex[:8]}", f"here:2:{uuid.uuid4().hex[:8]}"
    ids = ready_messages(engine, 4)
    claim_as(engine, ids[:3], dead)
    claim_as(engine, ids[3:], alive)
    with engine.connect() as connection:
        project = connection.execute(
            text("SELECT project_id FROM messages WHERE id = CAST(:id AS uuid)"), {"id": ids[0]}
        ).scalar_one()
    until = time.time() + 60
    refused = store.NewEvent(ids[2], project, EventType.FAILED, {"attempt": 1, "reason": "bad address"})
    of_dead = kept_answers.Kept(
        uuid.uuid4().hex,
        dead,
        (
            store.Finalised(ids[0], MessageStatus.SENT, provider_message_id="p-0"),
            store.Finalised(ids[1], MessageStatus.SENT, provider_message_id="p-1"),
            store.Finalised(ids[2], MessageStatus.FAILED, error="bad address"),
        ),
        (refused,),
        until,
    )
    of_alive = kept_answers.Kept(
        uuid.uuid4().hex, alive, (store.Finalised(ids[3], MessageStatus.SENT, provider_message_id="p-3"),), (), until
    )
    try:
        assert kept_answers.remember(client, of_dead) and kept_answers.remember(client, of_alive)
        written, held = write_kept_answers(settings, client, [dead])
        assert (written, held) == (3, [ids[3]])
        assert kept_answers.remember(client, of_dead)  # kept again, as a worker whose forget failed leaves it
        assert write_kept_answers(settings, client, [dead]) == (0, [ids[3]])
    finally:
        kept_answers.forget(client, [of_dead.key, of_alive.key])
    with engine.connect() as connection:
        rows = connection.execute(
            text(
                "SELECT id::text, status, provider_message_id, "
                "(SELECT count(*) FROM events e WHERE e.message_id = m.id AND e.type = 'failed') AS failures "
                "FROM messages m WHERE id = ANY(CAST(:ids AS uuid[]))"
            ),
            {"ids": ids},
        ).all()
    found = {row.id: (row.status, row.provider_message_id, row.failures) for row in rows}
    assert found == {
        ids[0]: ("sent", "p-0", 0),
        ids[1]: ("sent", "p-1", 0),
        ids[2]: ("failed", None, 1),
        ids[3]: ("sending", None, 0),
    }


@pytest.mark.usefixtures("app")
@pytest.mark.parametrize(
    "garbled",
    [
        b"{not json",
        b'"a string"',
        b'{"worker": "w", "until": 1}',
        b'{"worker": 1, "until": "x", "outcomes": [], "events": []}',
    ],
)
def test_a_garbled_kept_entry_is_dropped_alone_and_the_runs_beside_it_are_written(engine, settings, garbled):
    """One entry that is not a run (garbled, or of another shape) must not stop the sweeper
    writing every other worker's kept answers, at this sweep and every one after it."""
    client = redis.Redis.from_url(settings.redis_url)
    dead = f"gone:1:{uuid.uuid4().hex[:8]}"
    ids = ready_messages(engine, 2)
    claim_as(engine, ids, dead)
    runs = [
        kept_answers.Kept(
            uuid.uuid4().hex,
            dead,
            (store.Finalised(i, MessageStatus.SENT, provider_message_id=f"p-{i}"),),
            (),
            time.time() + 60,
        )
        for i in ids
    ]
    bad = f"garbled-{uuid.uuid4().hex}"
    try:
        assert kept_answers.remember(client, runs[0])
        client.hset(kept_answers.KEY, bad, garbled)
        assert kept_answers.remember(client, runs[1])
        assert write_kept_answers(settings, client, [dead]) == (2, [])
        assert not client.hexists(kept_answers.KEY, bad)
    finally:
        kept_answers.forget(client, [r.key for r in runs] + [bad])
    with engine.connect() as connection:
        found = dict(
            connection.execute(
                text("SELECT id::text, status FROM messages WHERE id = ANY(CAST(:ids AS uuid[]))"), {"ids": ids}
            ).all()
        )
    assert found == {ids[0]: "sent", ids[1]: "sent"}
