"""The delivery log: stored events and derived `sent` entries, merged, filtered and paged."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from tests.conftest import create_project, email

pytestmark = pytest.mark.usefixtures("worker")

LATER = (datetime.now(UTC) + timedelta(days=1)).isoformat()


def log(project, **query) -> dict:
    answer = project.client.get(
        "/v1/events", query_string=query, headers={"Authorization": f"Bearer {project.live_key}"}
    )
    assert answer.status_code == 200, answer.get_json()
    return answer.get_json()


@pytest.fixture
def history(project):
    """A sent email, a failed one (no address) and a cancelled scheduled one."""
    sent = project.send(email("Sent")).get_json()["id"]
    no_address = {"channel": "email", "to": {"subscriber_id": "ghost"}, "content": {"subject": "s", "text": "t"}}
    failed = project.send(no_address).get_json()["id"]
    cancelled = project.send(email(scheduled_at=LATER)).get_json()["id"]
    assert project.call("POST", f"/v1/messages/{cancelled}/cancel").status_code == 200
    assert project.wait_for(sent)["status"] == "sent"
    assert project.wait_for(failed)["status"] == "failed"
    return {"sent": sent, "failed": failed, "cancelled": cancelled}


def test_the_log_merges_derived_sent_with_stored_events_newest_first(project, history):
    items = log(project)["items"]
    assert {(i["type"], i["message_id"]) for i in items} == {
        ("sent", history["sent"]),
        ("failed", history["failed"]),
        ("cancelled", history["cancelled"]),
    }
    assert [i["at"] for i in items] == sorted((i["at"] for i in items), reverse=True)
    sent = next(i for i in items if i["type"] == "sent")
    assert sent["id"] == f"sent_{history['sent']}"
    assert sent["channel"] == "email"
    assert sent["data"]["provider"] == "fake"
    failed = next(i for i in items if i["type"] == "failed")
    assert failed["id"].startswith("evt_")
    assert failed["subscriber_id"] == "ghost"
    assert failed["data"]["reason"] == "subscriber 'ghost' has no email address"


def test_the_log_filters_by_message_subscriber_type_and_time(project, history):
    assert [i["type"] for i in log(project, message_id=history["sent"])["items"]] == ["sent"]
    assert [i["message_id"] for i in log(project, subscriber_id="ghost")["items"]] == [history["failed"]]
    both = log(project, type="sent,cancelled")["items"]
    assert {i["type"] for i in both} == {"sent", "cancelled"}
    newest = log(project)["items"][0]["at"]
    assert log(project, since=newest)["items"][0]["at"] == newest
    assert log(project, until=newest)["items"] == log(project)["items"][1:]
    assert log(project, until="2000-01-01T00:00:00Z")["items"] == []


def test_the_log_filters_by_batch(project, engine, history):
    batch = uuid.uuid4()
    with engine.begin() as connection:
        connection.execute(
            text("UPDATE messages SET batch_id = :batch WHERE id = ANY(CAST(:ids AS uuid[]))"),
            {"batch": batch, "ids": [history["sent"], history["failed"]]},
        )
    items = log(project, batch_id=str(batch))["items"]
    assert {(i["type"], i["batch_id"]) for i in items} == {("sent", str(batch)), ("failed", str(batch))}


def test_cursor_pages_through_both_kinds_without_repeats(project, history):
    seen, cursor = [], None
    for _ in range(5):
        page = log(project, limit=1, **({"cursor": cursor} if cursor else {}))
        seen += [i["id"] for i in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == [i["id"] for i in log(project)["items"]]
    assert len(seen) == 3


def test_another_projects_log_is_not_visible(client, project, history):
    other = create_project(client)
    assert log(other)["items"] == []
    assert log(other, message_id=history["sent"])["items"] == []


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"type": "sent,exploded"}, "type"),
        ({"type": "accepted"}, "type"),
        ({"limit": 0}, "limit"),
        ({"message_id": "nope"}, "message_id"),
        ({"since": "yesterday"}, "since"),
    ],
)
def test_bad_queries_are_422_with_field_errors(project, query, field):
    answer = project.client.get(
        "/v1/events", query_string=query, headers={"Authorization": f"Bearer {project.live_key}"}
    )
    assert answer.status_code == 422
    assert field in answer.get_json()["errors"]["query"]


def test_the_log_needs_a_project_key(client):
    assert client.get("/v1/events").status_code == 401


def test_openapi_documents_the_event_routes(client):
    paths = set(client.get("/openapi.json").get_json()["paths"])
    assert {
        "/v1/events",
        "/v1/events/stream",
        "/v1/webhooks",
        "/v1/webhooks/{endpoint_id}/deliveries",
        "/v1/webhooks/{endpoint_id}/deliveries/{delivery_id}/replay",
        "/v1/subscribers/{subscriber_id}/inbox",
        "/v1/subscribers/{external_id}/token",
        "/v1/inbox/stream",
        "/t/o/{token}",
        "/t/c/{token}",
        "/u/{token}",
    } <= paths
