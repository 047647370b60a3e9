"""Topics through the API: the topic, its members, a subscriber's topics, and a send to a topic."""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from app.db import session_scope
from app.models import Batch
from app.services import intake
from providers.log import LogProvider
from tasks.fanout import MEMBERS_PER_TASK, fan_out
from tasks.maintenance import redispatch_stalled_fanouts
from tests.api.test_batches import post_batch, wait_for_counts
from tests.api.test_errors import assert_error_shape
from tests.conftest import create_project


def make_topic(project, key: str = "apollo", members: list[str] | None = None) -> None:
    """The topic `key`, and `members` made subscribers (with a phone each) and added to it."""
    assert project.call("PUT", f"/v1/topics/{key}", {"name": key.title()}).status_code in (200, 201)
    for index, member in enumerate(members or []):
        project.call("PUT", f"/v1/subscribers/{member}", {"phone": f"+49151{index:07}"})
    if members:
        assert project.call("POST", f"/v1/topics/{key}/subscribers", {"subscriber_ids": members}).status_code == 200


def members_of(project, key: str) -> list[str]:
    """Every member, read page by page through the cursor."""
    found, cursor = [], None
    while True:
        page = project.call("GET", f"/v1/topics/{key}/subscribers?limit=2" + (f"&cursor={cursor}" if cursor else ""))
        assert page.status_code == 200
        body = page.get_json()
        found += [item["subscriber_id"] for item in body["items"]]
        cursor = body["next_cursor"]
        if cursor is None:
            return found


def test_a_topic_is_created_then_updated_and_counts_its_subscribers(project):
    created = project.call("PUT", "/v1/topics/apollo", {"name": "Apollo", "description": "The board"})
    assert created.status_code == 201
    assert {k: created.get_json()[k] for k in ("key", "name", "description")} == {
        "key": "apollo",
        "name": "Apollo",
        "description": "The board",
    }
    updated = project.call("PUT", "/v1/topics/apollo", {"name": "Apollo 11"})
    assert (updated.status_code, updated.get_json()["name"], updated.get_json()["description"]) == (
        200,
        "Apollo 11",
        None,
    )
    for member in ("u1", "u2"):
        project.call("PUT", f"/v1/subscribers/{member}", {"email": f"{member}@example.com"})
    project.call("POST", "/v1/topics/apollo/subscribers", {"subscriber_ids": ["u1", "u2"]})
    assert project.call("GET", "/v1/topics/apollo").get_json()["subscribers"] == 2


@pytest.mark.parametrize(
    ("method", "path", "body", "errors"),
    [
        (
            "PUT",
            "/v1/topics/no%20spaces",
            {"name": "x"},
            {"path": {"topic_key": ["Use 1 to 128 of A-Z, a-z, 0-9, _ . and -."]}},
        ),
        ("PUT", "/v1/topics/apollo", {}, {"json": {"name": ["Missing data for required field."]}}),
        ("PUT", "/v1/topics/apollo", {"name": ""}, {"json": {"name": ["Length must be between 1 and 200."]}}),
        (
            "POST",
            "/v1/topics/apollo/subscribers",
            {"subscriber_ids": []},
            {"json": {"subscriber_ids": ["Give 1 to 10,000 subscriber ids."]}},
        ),
        (
            "POST",
            "/v1/topics/apollo/subscribers",
            {"subscriber_ids": [f"u{i}" for i in range(10_001)]},
            {"json": {"subscriber_ids": ["Give 1 to 10,000 subscriber ids."]}},
        ),
        (
            "DELETE",
            "/v1/topics/apollo/subscribers",
            {"subscriber_ids": [7]},
            {"json": {"subscriber_ids": {"0": ["Not a valid string."]}}},
        ),
    ],
)
def test_bad_input_is_422_with_field_errors(project, engine, method, path, body, errors):
    answer = project.call(method, path, body)
    assert assert_error_shape(answer, 422)["errors"] == errors
    with engine.connect() as connection:
        assert (
            connection.execute(text("SELECT count(*) FROM topics WHERE project_id = :p"), {"p": project.id}).scalar()
            == 0
        )


def test_members_are_added_once_removed_and_listed_in_order(project):
    make_topic(project, members=["u3", "u1", "u2"])
    again = project.call("POST", "/v1/topics/apollo/subscribers", {"subscriber_ids": ["u1", "u1", "u2"]})
    assert again.get_json() == {"added": 0}
    assert members_of(project, "apollo") == ["u1", "u2", "u3"]
    removed = project.call("DELETE", "/v1/topics/apollo/subscribers", {"subscriber_ids": ["u2", "u2", "nobody"]})
    assert removed.get_json() == {"removed": 1}
    assert members_of(project, "apollo") == ["u1", "u3"]


def test_an_unknown_subscriber_adds_no_one_and_is_named(project):
    make_topic(project, members=["u1"])
    project.call("PUT", "/v1/subscribers/u2", {"email": "u2@example.com"})
    answer = project.call("POST", "/v1/topics/apollo/subscribers", {"subscriber_ids": ["u2", "ghost", "u1"]})
    assert assert_error_shape(answer, 422)["errors"] == {"json": {"subscriber_ids": ["1 unknown: 'ghost'"]}}
    assert members_of(project, "apollo") == ["u1"]


def test_a_subscriber_shows_its_topics_and_erasure_ends_its_memberships(project):
    make_topic(project, "zeta", members=["ada"])
    make_topic(project, "alpha")
    project.call("POST", "/v1/topics/alpha/subscribers", {"subscriber_ids": ["ada"]})
    assert project.call("GET", "/v1/subscribers/ada").get_json()["topics"] == ["alpha", "zeta"]
    assert project.call("DELETE", "/v1/subscribers/ada").status_code == 204
    assert project.call("GET", "/v1/topics/zeta").get_json()["subscribers"] == 0
    assert members_of(project, "alpha") == []


def test_deleting_a_topic_deletes_its_memberships(project, engine):
    make_topic(project, members=["u1", "u2"])
    assert project.call("DELETE", "/v1/topics/apollo").status_code == 204
    assert project.call("GET", "/v1/topics/apollo").status_code == 404
    assert project.call("DELETE", "/v1/topics/apollo").status_code == 404
    assert project.call("GET", "/v1/subscribers/u1").get_json()["topics"] == []
    with engine.connect() as connection:
        left = connection.execute(text("SELECT count(*) FROM topic_members WHERE project_id = :p"), {"p": project.id})
        assert left.scalar() == 0


def test_another_projects_topic_is_404(client, project):
    make_topic(project, members=["u1"])
    other = create_project(client)
    assert other.call("GET", "/v1/topics/apollo").status_code == 404
    assert other.call("GET", "/v1/topics/apollo/subscribers").status_code == 404
    assert other.call("POST", "/v1/topics/apollo/subscribers", {"subscriber_ids": ["u1"]}).status_code == 404
    assert other.call("DELETE", "/v1/topics/apollo").status_code == 404
    assert members_of(project, "apollo") == ["u1"]


@pytest.mark.usefixtures("worker")
def test_a_send_to_a_topic_reaches_each_member_once(project):
    members = [f"m{i:02}" for i in range(30)]
    make_topic(project, members=members)
    project.call("PUT", "/v1/subscribers/outsider", {"phone": "+4915199999999"})
    answer = post_batch(project, {"channel": "sms", "content": {"text": "Liftoff"}, "recipients": {"topic": "apollo"}})
    assert answer.status_code == 202
    body = answer.get_json()
    assert (body["accepted"], body["rejected"]) == (30, [])
    assert wait_for_counts(project, body["batch_id"], {"sent": 30})["counts"] == {"sent": 30}
    ids = {
        m["id"] for m in project.call("GET", f"/v1/messages?batch_id={body['batch_id']}&limit=100").get_json()["items"]
    }
    delivered = Counter(outbound.to for outbound in LogProvider.record if outbound.message_id in ids)
    assert delivered == Counter({f"+49151{index:07}": 1 for index in range(30)})


def test_a_topic_send_is_idempotent_and_refuses_copies(project, engine):
    make_topic(project, members=["u1"])
    body = {"channel": "sms", "content": {"text": "Hi"}, "recipients": {"topic": "apollo"}}
    first = post_batch(project, body, **{"Idempotency-Key": "launch-1"})
    again = post_batch(project, body, **{"Idempotency-Key": "launch-1"})
    assert again.get_json() == first.get_json()
    assert post_batch(project, {**body, "data": {"x": 1}}, **{"Idempotency-Key": "launch-1"}).status_code == 409
    copies = post_batch(
        project,
        {
            "channel": "email",
            "content": {"subject": "s", "text": "t"},
            "cc": ["c@example.com"],
            **{"recipients": {"topic": "apollo"}},
        },
    )
    assert assert_error_shape(copies, 422)["errors"]["json"] == {
        "recipients": ["cc and bcc go with a list of recipients, not a topic."]
    }
    with engine.connect() as connection:
        batches = connection.execute(text("SELECT count(*) FROM batches WHERE project_id = :p"), {"p": project.id})
        assert batches.scalar() == 1


def scheduled_topic_send(project, engine, members: int) -> str:
    """A send to a topic of `members` subscribers (made set-based), scheduled for tomorrow so
    that its messages wait where the fan-out writes them; its batch id."""
    project.call("PUT", "/v1/topics/crowd", {"name": "Crowd"})
    with engine.begin() as connection:
        connection.execute(
            text(
                """
                INSERT INTO subscribers (project_id, external_id, phone)
                SELECT :p, 's' || lpad(n::text, 6, '0'), '+49151' || lpad(n::text, 7, '0')
                FROM generate_series(1, :n) AS n;
                INSERT INTO topic_members (project_id, topic_key, subscriber_id)
                SELECT :p, 'crowd', external_id FROM subscribers WHERE project_id = :p
                """
            ),
            {"p": project.id, "n": members},
        )
    tomorrow = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    body = {"channel": "sms", "content": {"text": "Hi"}, "recipients": {"topic": "crowd"}, "scheduled_at": tomorrow}
    answer = post_batch(project, body)
    assert answer.get_json()["accepted"] == members
    return answer.get_json()["batch_id"]


def written(engine, batch_id: str) -> tuple[int, int]:
    """(messages, distinct subscribers) the batch has."""
    with engine.connect() as connection:
        return tuple(
            connection.execute(
                text("SELECT count(*), count(DISTINCT subscriber_id) FROM messages WHERE batch_id = :b"),
                {"b": batch_id},
            ).one()
        )


def copy_of_batch(engine, batch_id: str) -> str:
    """A new batch with the same topic send, fan-out not begun, whose task nobody was given."""
    with engine.begin() as connection:
        return connection.execute(
            text(
                """
                INSERT INTO batches (project_id, channel, priority, accepted, rejected, topic, fanout, fanout_at,
                                     created_at)
                SELECT project_id, channel, priority, accepted, rejected, topic, fanout, now(), created_at
                FROM batches WHERE id = :b
                RETURNING id::text
                """
            ),
            {"b": batch_id},
        ).scalar_one()


def test_each_chunk_writes_the_next_members_and_the_last_marks_the_batch_done(project, engine, migrated):
    batch_id = copy_of_batch(engine, scheduled_topic_send(project, engine, 10))
    chunks = []
    for _ in range(3):
        with session_scope(migrated.database_url) as session:
            batch = session.get(Batch, uuid.UUID(batch_id), with_for_update=True)
            assert batch.fanout_done_at is None
            chunks.append(len(intake.write_topic_chunk(session, batch, 4)))
    assert chunks == [4, 4, 2]
    assert fan_out(batch_id) == 0  # done: a repeated task message writes nothing
    assert written(engine, batch_id) == (10, 10)


@pytest.mark.usefixtures("worker")
def test_copies_of_the_fan_out_task_at_once_write_each_member_once(project, engine):
    """The worker runs the links the API and each chunk publish, while two threads here run
    the same task too: three copies of every link, at once."""
    members = 2 * MEMBERS_PER_TASK + 7
    batch_id = scheduled_topic_send(project, engine, members)
    counts: list[int] = []

    def run_until_done() -> None:
        while (wrote := fan_out(batch_id)) > 0:
            counts.append(wrote)

    runners = [threading.Thread(target=run_until_done) for _ in range(2)]
    for runner in runners:
        runner.start()
    for runner in runners:
        runner.join(timeout=120)
    assert not any(runner.is_alive() for runner in runners)
    assert all(count in (MEMBERS_PER_TASK, 7) for count in counts)
    assert written(engine, batch_id) == (members, members)


def test_the_sweeper_takes_up_a_fan_out_that_stopped(project, engine, migrated):
    sent = scheduled_topic_send(project, engine, 3)
    stalled, finished = copy_of_batch(engine, sent), copy_of_batch(engine, sent)
    assert fan_out(finished) == 3
    with engine.begin() as connection:
        connection.execute(
            text("UPDATE batches SET fanout_at = now() - interval '1 hour' WHERE id IN (:a, :b)"),
            {"a": stalled, "b": finished},
        )
    with session_scope(migrated.database_url) as session:
        taken = [str(row.id) for row in redispatch_stalled_fanouts(session, 60)]
    assert stalled in taken
    assert finished not in taken
