"""Subscribers over HTTP: upsert, read, list, import, erasure; scoped to the calling project."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from tests.conftest import create_project

ADA = {
    "email": " Ada@Example.COM ",
    "phone": "+4915112345678",
    "push_tokens": ["tok-1"],
    "locale": "de-AT",
    "timezone": "Europe/Vienna",
    "data": {"first_name": "Ada"},
}


def test_put_creates_then_updates(project):
    created = project.call("PUT", "/v1/subscribers/u1", ADA)
    assert created.status_code == 201
    body = created.get_json()
    assert body["external_id"] == "u1"
    assert body["email"] == "ada@example.com"
    assert (body["phone"], body["push_tokens"], body["locale"], body["timezone"]) == (
        "+4915112345678",
        ["tok-1"],
        "de-AT",
        "Europe/Vienna",
    )
    updated = project.call("PUT", "/v1/subscribers/u1", {"email": "ada@new.example"})
    assert updated.status_code == 200
    assert updated.get_json()["email"] == "ada@new.example"
    assert updated.get_json()["phone"] is None, "PUT replaces the profile whole"
    assert project.call("GET", "/v1/subscribers/u1").get_json()["email"] == "ada@new.example"


def test_put_keeps_preferences(project):
    project.call("PUT", "/v1/subscribers/u1", ADA)
    project.call("PUT", "/v1/subscribers/u1/preferences", {"channels": {"sms": False}})
    project.call("PUT", "/v1/subscribers/u1", ADA)
    assert project.call("GET", "/v1/subscribers/u1/preferences").get_json()["channels"] == {"sms": False}


def test_an_external_id_longer_than_255_is_422(project):
    answer = project.call("PUT", "/v1/subscribers/" + "x" * 256, {})
    assert answer.status_code == 422
    assert answer.get_json()["errors"] == {"path": {"external_id": ["Use 1 to 255 characters."]}}


def test_bad_profiles_are_422_and_write_nothing(project):
    answer = project.call(
        "PUT", "/v1/subscribers/u1", {"email": "nope", "phone": "123", "timezone": "Mars/Olympus", "x": 1}
    )
    assert answer.status_code == 422
    assert answer.get_json()["errors"]["json"] == {
        "email": ["Not a valid email address."],
        "phone": ["Not a valid E.164 phone number."],
        "timezone": ["Not an IANA time zone like Europe/Berlin."],
        "x": ["Unknown field."],
    }
    assert project.call("GET", "/v1/subscribers/u1").status_code == 404


def test_push_tokens_are_one_per_device_and_at_most_20(project):
    """Each token gets every push message, so each is kept once and the list is bounded."""
    twice = project.call("PUT", "/v1/subscribers/u1", {"push_tokens": ["phone", "tablet", "phone"]})
    assert twice.get_json()["push_tokens"] == ["phone", "tablet"]
    too_many = {"push_tokens": [f"device-{n}" for n in range(21)]}
    answer = project.call("PUT", "/v1/subscribers/u1", too_many)
    assert answer.status_code == 422
    assert answer.get_json()["errors"] == {"json": {"push_tokens": ["At most 20 push tokens, one per device."]}}
    imported = project.call("POST", "/v1/subscribers/import", {"subscribers": [{"external_id": "u2", **too_many}]})
    assert imported.get_json()["rejected"] == [
        {"index": 0, "errors": {"push_tokens": ["At most 20 push tokens, one per device."]}}
    ]
    assert project.call("GET", "/v1/subscribers/u1").get_json()["push_tokens"] == ["phone", "tablet"]


def test_list_pages_with_a_cursor(project):
    for external_id in ("c", "a", "b"):
        project.call("PUT", f"/v1/subscribers/{external_id}", {})
    first = project.call("GET", "/v1/subscribers?limit=2").get_json()
    assert [s["external_id"] for s in first["items"]] == ["a", "b"]
    second = project.call("GET", f"/v1/subscribers?limit=2&cursor={first['next_cursor']}").get_json()
    assert [s["external_id"] for s in second["items"]] == ["c"]
    assert second["next_cursor"] is None
    bad = project.call("GET", "/v1/subscribers?cursor=garbage")
    assert bad.status_code == 400
    assert bad.get_json()["errors"] == {"query": {"cursor": ["Not a cursor this list gave out."]}}


def test_another_projects_subscriber_is_404(client, project):
    other = create_project(client)
    project.call("PUT", "/v1/subscribers/u1", ADA)
    assert other.call("GET", "/v1/subscribers/u1").status_code == 404
    assert other.call("DELETE", "/v1/subscribers/u1").status_code == 404
    assert other.call("GET", "/v1/subscribers/u1/preferences").status_code == 404
    assert other.call("PUT", "/v1/subscribers/u1/preferences", {}).status_code == 404
    assert other.call("GET", "/v1/subscribers").get_json()["items"] == []
    assert project.call("GET", "/v1/subscribers/u1").status_code == 200


def test_import_writes_the_good_rows_and_reports_the_bad_by_index(project, engine):
    project.call("PUT", "/v1/subscribers/existing", {"email": "old@example.com"})
    rows = [
        {"external_id": "i1", "email": "I1@example.com"},
        {"external_id": "i2", "phone": "not a phone"},
        {"external_id": "existing", "email": "new@example.com", "push_tokens": ["a", "b"]},
        {"email": "no-id@example.com"},
        "not an object",
        {"external_id": "i1", "email": "again@example.com"},
        {"external_id": "i3", "timezone": "America/New_York", "data": {"plan": "pro"}},
    ]
    answer = project.call("POST", "/v1/subscribers/import", {"subscribers": rows})
    assert answer.status_code == 200
    assert answer.get_json() == {
        "created": 2,
        "updated": 1,
        "rejected": [
            {"index": 1, "errors": {"phone": ["Not a valid E.164 phone number."]}},
            {"index": 3, "errors": {"external_id": ["Missing data for required field."]}},
            {"index": 4, "errors": {"_schema": ["Give an object."]}},
            {"index": 5, "errors": {"external_id": ["Given already at index 0."]}},
        ],
    }
    with engine.connect() as connection:
        stored = dict(
            connection.execute(
                text("SELECT external_id, email FROM subscribers WHERE project_id = :p"), {"p": project.id}
            ).all()
        )
    assert stored == {"existing": "new@example.com", "i1": "i1@example.com", "i3": None}
    assert project.call("GET", "/v1/subscribers/existing").get_json()["push_tokens"] == ["a", "b"]


def test_import_of_10000_rows_is_one_call_over_1_mib(project, engine):
    rows = [
        {"external_id": f"bulk-{i:05}", "email": f"b{i}@example.com", "data": {"bio": "x" * 150}} for i in range(10_000)
    ]
    assert len(json.dumps({"subscribers": rows})) > 2 * 1024 * 1024
    answer = project.call("POST", "/v1/subscribers/import", {"subscribers": rows})
    assert answer.get_json() == {"created": 10_000, "updated": 0, "rejected": []}
    too_many = project.call("POST", "/v1/subscribers/import", {"subscribers": [*rows, rows[0]]})
    assert too_many.status_code == 422
    assert too_many.get_json()["errors"]["json"]["subscribers"] == ["Length must be between 1 and 10000."]


def test_import_with_only_bad_rows_writes_nothing(project, engine):
    answer = project.call("POST", "/v1/subscribers/import", {"subscribers": [{"external_id": ""}]})
    assert answer.get_json()["created"] == 0
    assert answer.get_json()["rejected"][0]["index"] == 0
    assert project.call("GET", "/v1/subscribers").get_json()["items"] == []


@pytest.mark.usefixtures("worker")
def test_erasure_removes_the_subscriber_and_redacts_its_messages(project, engine):
    project.call("PUT", "/v1/subscribers/u1", ADA)
    project.call("POST", "/v1/suppressions", {"channel": "email", "address": "ada@example.com"})
    sent = project.send(
        {"channel": "sms", "to": {"subscriber_id": "u1"}, "content": {"text": "Hi Ada"}, "metadata": {"o": 1}}
    ).get_json()["id"]
    suppressed = project.send(
        {"channel": "email", "to": {"subscriber_id": "u1"}, "content": {"subject": "s", "text": "t"}}
    ).get_json()["id"]
    later = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    pending = project.send(
        {"channel": "sms", "to": {"subscriber_id": "u1"}, "content": {"text": "Later"}, "scheduled_at": later}
    ).get_json()["id"]
    assert project.wait_for(sent)["status"] == "sent"
    assert project.wait_for(suppressed)["status"] == "suppressed"
    with engine.begin() as connection:  # as if the provider had echoed the address in an error
        connection.execute(
            text("UPDATE messages SET error = 'rejected +4915112345678 twice' WHERE id = :id"), {"id": sent}
        )

    assert project.call("DELETE", "/v1/subscribers/u1").status_code == 204

    assert project.call("GET", "/v1/subscribers/u1").status_code == 404
    assert project.call("DELETE", "/v1/subscribers/u1").status_code == 404
    message = project.get(sent).get_json()
    assert (message["status"], message["to"], message["subscriber_id"]) == ("sent", {}, "u1")
    assert message["error"] == "rejected [erased] twice"
    assert message["metadata"] == {"o": 1}
    assert [e["type"] for e in message["events"]] == ["accepted", "ready", "sending", "sent"]
    assert project.get(suppressed).get_json()["events"][-1]["type"] == "suppressed"
    cancelled = project.get(pending).get_json()
    assert cancelled["status"] == "cancelled"
    assert cancelled["events"][-1]["data"] == {"reason": "subscriber erased"}
    with engine.connect() as connection:
        contents = connection.execute(
            text(
                "SELECT c.subject, c.text, c.html, c.data, m.to_address FROM message_contents c "
                "JOIN messages m ON m.id = c.message_id WHERE m.project_id = :p"
            ),
            {"p": project.id},
        ).all()
        suppressions = (
            connection.execute(text("SELECT address FROM suppressions WHERE project_id = :p"), {"p": project.id})
            .scalars()
            .all()
        )
    assert [tuple(row) for row in contents] == [(None, None, None, {}, None)] * 3
    assert suppressions == ["ada@example.com"], "a suppression outlives the subscriber"


@pytest.mark.usefixtures("worker")
def test_erasure_redacts_the_tokens_of_its_push_devices(project):
    project.call("PUT", "/v1/subscribers/u1", {"push_tokens": ["tok-phone", "tok-tablet"]})
    body = {"channel": "push", "to": {"subscriber_id": "u1"}, "content": {"title": "Hi", "text": "Ada"}}
    sent = project.wait_for(project.send(body).get_json()["id"])
    assert [e["data"]["token"] for e in sent["events"] if e["type"] == "device"] == ["tok-phone", "tok-tablet"]
    assert project.call("DELETE", "/v1/subscribers/u1").status_code == 204
    message = project.get(sent["id"]).get_json()
    assert (message["status"], message["to"]) == ("sent", {})
    devices = [(e["data"]["token"], e["data"]["status"]) for e in message["events"] if e["type"] == "device"]
    assert devices == [("[erased]", "sent"), ("[erased]", "sent")]


def test_openapi_documents_push_devices(client):
    schemas = client.get("/openapi.json").get_json()["components"]["schemas"]
    tokens = schemas["Subscriber"]["properties"]["push_tokens"]
    assert (tokens["type"], tokens["maxItems"]) == ("array", 20)
    assert tokens["description"].startswith("One per device")
    assert "`device`" in schemas["Event"]["properties"]["type"]["description"]
    assert "`token`" in schemas["Event"]["properties"]["data"]["description"]
