"""The admin digest: its numbers against direct SQL counts, its window, its guards."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from app.services.digest import hour_floor
from tasks.rollup import fold_counts
from tests.conftest import ADMIN_KEY, bearer, email
from tests.provider_server import json_response

ADMIN = bearer(ADMIN_KEY)


def digest(client, **query: str) -> dict:
    answer = client.get("/v1/admin/digest", query_string=query, headers=ADMIN)
    assert answer.status_code == 200, answer.get_json()
    return answer.get_json()


def sql_counts(engine, project_id: str, since: datetime | None = None) -> dict[tuple[str, str], int]:
    with engine.connect() as connection:
        rows = connection.execute(
            text(
                "SELECT channel, status, count(*) FROM messages "
                "WHERE project_id = :project AND (CAST(:since AS timestamptz) IS NULL OR created_at >= :since) "
                "GROUP BY channel, status"
            ),
            {"project": project_id, "since": since},
        ).all()
    return {(channel, status): count for channel, status, count in rows}


def digest_counts(answer: dict) -> dict[tuple[str, str], int]:
    return {(row["channel"], row["status"]): row["count"] for row in answer["counts"]}


@pytest.mark.usefixtures("worker")
def test_counts_equal_direct_sql_before_and_after_folding(client, project, engine, fake_provider):
    sent = [project.send(email()).get_json()["id"] for _ in range(4)]
    sms = project.send({"channel": "sms", "to": {"phone": "+4915112345678"}, "content": {"text": "Hi"}})
    later = (datetime.now(UTC) + timedelta(days=2)).isoformat()
    project.send(email(scheduled_at=later))
    cancelled = project.send(email(scheduled_at=later)).get_json()["id"]
    project.call("POST", f"/v1/messages/{cancelled}/cancel")
    # Sent before the provider starts rejecting: they may still be on their way.
    for message_id in [*sent, sms.get_json()["id"]]:
        assert project.wait_for(message_id)["status"] == "sent"
    fake_provider.override = lambda request: json_response(
        {"results": [{"id": m["id"], "status": "rejected", "error": "no"} for m in request.get_json()["messages"]]}
    )
    failed = project.wait_for(project.send(email()).get_json()["id"])
    fake_provider.override = None
    assert failed["status"] == "failed"

    expected = sql_counts(engine, project.id)
    assert expected[("email", "sent")] == 4
    assert digest_counts(digest(client, project=project.id)) == expected
    fold_counts()
    answer = digest(client, project=project.id)
    assert digest_counts(answer) == expected
    assert answer["totals"] == {status: n for (_, status), n in expected.items() if status != "sent"} | {"sent": 5}
    assert answer["throughput"] == {"last_minute": 5, "last_hour": 5}
    assert answer["project"] == project.id
    assert {p["name"]: p["breaker"] for p in answer["providers"]} == {
        "fake": "closed",
        "fake2": "closed",
        "log": "closed",
        "simulator": "closed",
    }
    assert {q["name"] for q in answer["queues"]} >= {"prepare.transactional", "deliver.fake.bulk", "beat"}


@pytest.mark.usefixtures("worker")
def test_since_is_cut_to_the_hour_and_matches_sql(client, project, engine):
    assert project.wait_for(project.send(email()).get_json()["id"])["status"] == "sent"
    with engine.begin() as connection:
        connection.execute(
            text(
                """
                WITH old AS (
                    INSERT INTO messages (project_id, channel, status, priority, to_address, created_at)
                    SELECT :project, 'email', 'sent', 'bulk', 'old@example.com', now() - interval '5 hours'
                    FROM generate_series(1, 3)
                    RETURNING id
                ) INSERT INTO message_contents (message_id) SELECT id FROM old
                """
            ),
            {"project": project.id},
        )
    recent = datetime.now(UTC) - timedelta(minutes=30)
    answer = digest(client, project=project.id, since=recent.isoformat())
    assert answer["since"] == hour_floor(recent).isoformat()
    assert digest_counts(answer) == sql_counts(engine, project.id, hour_floor(recent))
    everything = digest(client, project=project.id, since=(datetime.now(UTC) - timedelta(hours=6)).isoformat())
    assert digest_counts(everything) == sql_counts(engine, project.id)
    assert digest_counts(answer)[("email", "sent")] == 1
    assert digest_counts(everything)[("email", "sent")] == 4


def test_dead_letters_and_waiting_lanes(client, project, engine):
    later = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    ids = [project.send(email(scheduled_at=later)).get_json()["id"] for _ in range(3)]
    with engine.begin() as connection:
        connection.execute(
            text(
                "UPDATE messages SET status = CASE WHEN id = :waiting THEN 'accepted' ELSE 'dead' END, "
                "scheduled_at = NULL, created_at = now() - interval '90 seconds' WHERE id = ANY(CAST(:ids AS uuid[]))"
            ),
            {"ids": ids, "waiting": ids[0]},
        )
    answer = digest(client, project=project.id)
    assert answer["dead_letters"] == {"total": 2, "by_project": [{"project": project.id, "count": 2}]}
    (lane,) = answer["lanes"]
    assert (lane["name"], lane["status"], lane["count"]) == ("prepare.transactional", "accepted", 1)
    assert 90 <= lane["oldest_age_seconds"] < 600
    with engine.begin() as connection:
        connection.execute(text("UPDATE messages SET status = 'cancelled' WHERE id = :id"), {"id": ids[0]})


def test_a_paused_provider_shows_with_its_reason(client):
    client.post("/v1/admin/providers/log/pause", json={"reason": "maintenance"}, headers=ADMIN)
    try:
        providers = {p["name"]: p for p in digest(client)["providers"]}
    finally:
        client.post("/v1/admin/providers/log/resume", headers=ADMIN)
    assert providers["log"]["paused"] is True
    assert providers["log"]["paused_reason"] == "maintenance"


def test_bad_input_is_a_422_naming_the_field(client):
    answer = client.get("/v1/admin/digest?since=yesterday&project=Not%20Valid", headers=ADMIN)
    assert answer.status_code == 422
    assert set(answer.get_json()["errors"]["query"]) == {"since", "project"}
    naive = client.get("/v1/admin/digest?since=2030-01-01T00:00:00", headers=ADMIN)
    assert naive.status_code == 422
    assert client.get("/v1/admin/digest?project=no-such-project", headers=ADMIN).status_code == 404


def test_the_digest_needs_the_admin_key(client, project):
    assert client.get("/v1/admin/digest").status_code == 401
    assert client.get("/v1/admin/digest", headers=bearer(project.live_key)).status_code == 403
