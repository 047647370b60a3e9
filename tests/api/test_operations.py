"""Operator routes: requeue dead letters, pause and resume providers, metrics."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from app.services import operations
from tests.conftest import ADMIN_KEY, bearer, email

ADMIN = bearer(ADMIN_KEY)


@pytest.fixture(autouse=True)
def _no_pauses_left_over(client):
    yield
    for name in ("fake", "log"):
        client.post(f"/v1/admin/providers/{name}/resume", headers=ADMIN)


def make_dead(project, engine, count: int, status: str = "dead") -> list[str]:
    """`count` messages that ended `status` (dead letters by default) after 5 attempts."""
    later = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    ids = [project.send(email(scheduled_at=later)).get_json()["id"] for _ in range(count)]
    with engine.begin() as connection:
        connection.execute(
            text(
                "UPDATE messages SET status = :status, attempts = 5, error = 'HTTP 503' "
                "WHERE id = ANY(CAST(:ids AS uuid[]))"
            ),
            {"ids": ids, "status": status},
        )
    return ids


@pytest.mark.usefixtures("worker")
def test_requeue_by_ids_sends_again_with_fresh_attempts(client, project, engine, fake_provider):
    dead, untouched = make_dead(project, engine, 2)
    answer = client.post("/v1/admin/messages/requeue", json={"ids": [dead], "requested_by": "ops@acme"}, headers=ADMIN)
    assert answer.get_json() == {"requeued": 1}
    message = project.wait_for(dead)
    assert message["status"] == "sent"
    assert message["attempts"] == 1
    requeued = next(e for e in message["events"] if e["type"] == "requeued")
    assert requeued["data"] == {"by": "ops@acme", "previous_attempts": 5}
    assert fake_provider.count(dead) == 1
    assert project.get(untouched).get_json()["status"] == "dead"


@pytest.mark.usefixtures("worker")
def test_unknown_messages_are_requeued_only_when_asked_for_and_with_a_warning(client, project, engine, fake_provider):
    unknown, dead = make_dead(project, engine, 1, "unknown") + make_dead(project, engine, 1)
    by_default = client.post("/v1/admin/messages/requeue", json={"ids": [unknown, dead]}, headers=ADMIN)
    assert by_default.get_json() == {"requeued": 1}  # the dead letter only
    assert project.get(unknown).get_json()["status"] == "unknown"
    answer = client.post(
        "/v1/admin/messages/requeue",
        json={"ids": [unknown], "status": "unknown", "requested_by": "ops@acme"},
        headers=ADMIN,
    )
    assert answer.status_code == 200
    assert answer.get_json() == {"requeued": 1, "warning": operations.MAY_ARRIVE_TWICE}
    message = project.wait_for(unknown)
    assert (message["status"], message["attempts"]) == ("sent", 1)
    requeued = next(e for e in message["events"] if e["type"] == "requeued")
    assert requeued["data"] == {"by": "ops@acme", "previous_attempts": 5, "warning": operations.MAY_ARRIVE_TWICE}
    assert fake_provider.count(unknown) == 1


def test_requeue_takes_dead_or_unknown_and_nothing_else(client, project):
    answer = client.post("/v1/admin/messages/requeue", json={"project": project.id, "status": "sent"}, headers=ADMIN)
    assert answer.status_code == 422
    assert "status" in answer.get_json()["errors"]["json"]


def test_requeue_by_project_takes_only_dead_letters_of_that_project(client, project, engine):
    from tests.conftest import create_project

    other = create_project(client)
    make_dead(project, engine, 3)
    other_dead = make_dead(other, engine, 1)
    answer = client.post("/v1/admin/messages/requeue", json={"project": project.id}, headers=ADMIN)
    assert answer.get_json() == {"requeued": 3}
    assert other.get(other_dead[0]).get_json()["status"] == "dead"


def test_requeue_needs_criteria_and_the_admin_key(client, project):
    answer = client.post("/v1/admin/messages/requeue", json={}, headers=ADMIN)
    assert answer.status_code == 422
    assert "_schema" in answer.get_json()["errors"]["json"]
    assert (
        client.post(
            "/v1/admin/messages/requeue", json={"project": project.id}, headers=bearer(project.live_key)
        ).status_code
        == 403
    )


def test_pause_and_resume_a_provider_by_hand(client):
    paused = client.post("/v1/admin/providers/fake/pause", json={"seconds": 120, "reason": "outage"}, headers=ADMIN)
    assert paused.status_code == 200
    state = paused.get_json()
    assert state["paused"] is True
    assert state["paused_reason"] == "outage"
    assert 110 < state["paused_seconds_left"] <= 120
    listed = {p["name"]: p for p in client.get("/v1/admin/providers", headers=ADMIN).get_json()}
    assert listed["fake"]["paused"] is True
    assert listed["fake"]["channels"] == ["email"]
    assert listed["log"]["paused"] is False
    resumed = client.post("/v1/admin/providers/fake/resume", headers=ADMIN)
    assert resumed.get_json()["paused"] is False


def test_a_pause_without_seconds_lasts_until_resumed(client):
    state = client.post("/v1/admin/providers/log/pause", json={}, headers=ADMIN).get_json()
    assert state["paused"] is True
    assert state["paused_seconds_left"] is None


def test_pausing_an_unknown_provider_is_404(client):
    assert client.post("/v1/admin/providers/pigeon/pause", json={}, headers=ADMIN).status_code == 404


def test_metrics_expose_the_shared_counters(client):
    from app.observability.counters import increment

    increment(client.application.extensions["tidings"].redis, "sweeper_recovered", 2, outcome="unknown")
    body = client.get("/metrics").get_data(as_text=True)
    assert "# TYPE tidings_sweeper_recovered_total counter" in body
    assert 'tidings_sweeper_recovered_total{outcome="unknown"}' in body
