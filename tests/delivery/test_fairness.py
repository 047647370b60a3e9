"""Bulk work in turn per project: a campaign of 100,000 does not hold another project's 200 behind it."""

from __future__ import annotations

import time

import pytest
import redis
from sqlalchemy import text

from app.delivery import dispatch, fairness
from tests.conftest import bearer, create_project
from tests.faults.stack import insert_accepted, new_project

LANE = "prepare.test-fairness"


@pytest.fixture
def ring(settings):
    client = redis.Redis.from_url(settings.redis_url)
    client.delete(*client.keys(f"{fairness.PREFIX}{LANE}:*") or ["-"])
    yield client
    client.delete(*client.keys(f"{fairness.PREFIX}{LANE}:*") or ["-"])


def test_projects_take_turns_and_each_keeps_its_own_order(ring):
    fairness.deposit(ring, LANE, "a", [["a1"], ["a2"], ["a3"], ["a4"]])
    fairness.deposit(ring, LANE, "b", [["b1"], ["b2"]])
    fairness.deposit(ring, LANE, "c", [["c1"]])
    taken = []
    while (chunk := fairness.withdraw(ring, LANE)) is not None:
        taken.extend(chunk)
        assert len(taken) <= 7, "a withdrawal repeated a chunk"
    assert taken == ["a1", "b1", "c1", "a2", "b2", "a3", "a4"]
    assert ring.keys(f"{fairness.PREFIX}{LANE}:*") == []


def test_a_project_that_comes_back_rejoins_at_the_end(ring):
    fairness.deposit(ring, LANE, "a", [["a1"], ["a2"]])
    assert fairness.withdraw(ring, LANE) == ["a1"]
    fairness.deposit(ring, LANE, "b", [["b1"]])
    fairness.deposit(ring, LANE, "a", [["a3"]])
    assert [fairness.withdraw(ring, LANE) for _ in range(4)] == [["a2"], ["b1"], ["a3"], None]


def sent(engine, project_id: str) -> int:
    with engine.connect() as connection:
        return connection.execute(
            text("SELECT count(*) FROM messages WHERE project_id = :p AND status = 'sent'"), {"p": project_id}
        ).scalar_one()


def send_200_and_wait(client, engine, project, timeout: float = 120) -> float:
    """Seconds until all of a 200-recipient bulk batch of `project` are sent."""
    recipients = [{"email": f"b{i}@example.com"} for i in range(200)]
    body = {"channel": "email", "content": {"subject": "Hi", "text": "Hello"}, "recipients": recipients}
    started = time.monotonic()
    answer = client.post("/v1/messages/batch", json=body, headers=bearer(project.live_key))
    assert answer.status_code == 202, answer.get_json()
    deadline = started + timeout
    while sent(engine, project.id) < 200:
        assert time.monotonic() < deadline, f"only {sent(engine, project.id)} of 200 sent"
        time.sleep(0.05)
    return time.monotonic() - started


@pytest.mark.usefixtures("worker")
def test_a_campaign_of_100000_does_not_hold_another_projects_200_behind_it(client, engine, fake_provider, capsys):
    idle_seconds = send_200_and_wait(client, engine, create_project(client))
    campaign = new_project(engine)
    ids = insert_accepted(engine, campaign, 100_000)
    for chunks in dispatch.prepare(ids, "bulk", project=campaign):
        chunks.apply_async()
    try:
        before = sent(engine, campaign)
        busy_seconds = send_200_and_wait(client, engine, create_project(client))
        campaign_sent = sent(engine, campaign) - before
    finally:
        with engine.begin() as connection:  # the rest of the campaign is not this test's business
            connection.execute(
                text("UPDATE messages SET status = 'cancelled' WHERE project_id = :p AND status = 'accepted'"),
                {"p": campaign},
            )
    with capsys.disabled():
        print(
            f"\nfairness: 200 bulk sent in {idle_seconds:.2f} s idle, {busy_seconds:.2f} s behind a campaign of "
            f"100,000 ({busy_seconds / idle_seconds:.1f}x); {campaign_sent} of the campaign sent meanwhile"
        )
    # First in, first out, all of the campaign still waiting would go first; in turn, what it
    # had in flight and a chunk or two.
    assert campaign_sent < 10_000
