"""Accepting a send and reading it back, idempotency included."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from sqlalchemy import text

from app.access.limits import send_limits
from app.config import Settings
from tests.api.test_errors import assert_error_shape
from tests.conftest import ADMIN_KEY, bearer, create_project, email


def test_send_answers_202_with_the_id(project):
    answer = project.send(email())
    assert answer.status_code == 202
    body = answer.get_json()
    assert body["status"] == "accepted"
    assert set(body) == {"id", "status", "created_at"}
    assert body["created_at"].endswith("+00:00")


def test_send_records_the_message_as_given(project):
    message_id = project.send(email(to=" Ada@Example.COM ", category="account", metadata={"order": "A-17"})).get_json()[
        "id"
    ]
    message = project.get(message_id).get_json()
    assert message["to"] == {"email": "ada@example.com"}
    assert message["category"] == "account"
    assert message["metadata"] == {"order": "A-17"}
    assert message["priority"] == "transactional"
    assert message["events"][0]["type"] == "accepted"


def test_send_to_a_subscriber_keeps_the_subscriber_id(project):
    body = {"channel": "email", "to": {"subscriber_id": "u42"}, "content": {"subject": "s", "text": "t"}}
    message = project.get(project.send(body).get_json()["id"]).get_json()
    assert message["subscriber_id"] == "u42"


def test_future_scheduled_at_answers_scheduled(project):
    later = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    answer = project.send(email(scheduled_at=later))
    assert answer.status_code == 202
    assert answer.get_json()["status"] == "scheduled"
    assert project.get(answer.get_json()["id"]).get_json()["events"][0]["type"] == "scheduled"


def test_same_idempotency_key_and_body_replays_the_original_answer(project, engine):
    first = project.send(email(), **{"Idempotency-Key": "order-17"})
    again = project.send(email(), **{"Idempotency-Key": "order-17"})
    assert first.status_code == again.status_code == 202
    assert again.get_json() == first.get_json()
    assert again.headers["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first.headers
    with engine.connect() as connection:
        count = connection.execute(
            text("SELECT count(*) FROM messages WHERE project_id = :p"), {"p": project.id}
        ).scalar_one()
    assert count == 1


def test_same_idempotency_key_with_another_body_is_409(project):
    assert project.send(email("One"), **{"Idempotency-Key": "k1"}).status_code == 202
    conflict = project.send(email("Two"), **{"Idempotency-Key": "k1"})
    assert conflict.status_code == 409
    assert conflict.get_json()["message"] == "This Idempotency-Key was used with a different request body."


def test_idempotency_keys_are_per_project(client, project):
    from tests.conftest import create_project

    other = create_project(client)
    first = project.send(email(), **{"Idempotency-Key": "shared"}).get_json()["id"]
    second = other.send(email(), **{"Idempotency-Key": "shared"}).get_json()["id"]
    assert first != second


def test_the_test_key_and_the_live_key_have_their_own_idempotency_keys(project, engine):
    """One key with both kinds of key is two requests: a test neither replays nor blocks a live send."""
    key = {"Idempotency-Key": "order-18"}
    live = project.send(email(), **key)
    test = project.send(email(), key=project.test_key, **key)
    assert live.status_code == test.status_code == 202
    assert "Idempotent-Replayed" not in test.headers
    assert live.get_json()["id"] != test.get_json()["id"]
    assert project.send(email(), **key).get_json() == live.get_json()
    assert project.send(email(), key=project.test_key, **key).get_json() == test.get_json()
    assert project.send(email("Other"), key=project.test_key, **{"Idempotency-Key": "order-19"}).status_code == 202
    assert project.send(email(), **{"Idempotency-Key": "order-19"}).status_code == 202
    with engine.connect() as connection:
        kinds = connection.execute(
            text("SELECT test, count(*) FROM messages WHERE project_id = :p GROUP BY test"), {"p": project.id}
        ).all()
    assert dict(kinds) == {False: 2, True: 2}


def test_openapi_spec_describes_the_routes(client):
    spec = client.get("/openapi.json").get_json()
    assert {"/v1/messages", "/v1/messages/{message_id}", "/v1/admin/projects"} <= set(spec["paths"])
    assert client.get("/docs").status_code == 200


def test_a_send_above_the_projects_transactional_rate_is_served_as_bulk_with_an_event(client):
    """Priority is earned: a send whose messages do not all fit the project's transactional
    messages a minute is written as bulk, each message saying why; one that fits keeps it."""
    project = create_project(client, settings={"transactional_per_min": 2})
    over = project.send(email(cc=["bo@example.com"], bcc=["cy@example.com"])).get_json()  # 3 messages
    fits = project.send(email()).get_json()
    demoted = [project.get(i).get_json() for i in [over["id"], *(copy["id"] for copy in over["copies"])]]
    assert [message["priority"] for message in demoted] == ["bulk"] * 3
    for message in demoted:
        (event,) = [e for e in message["events"] if e["type"] == "demoted"]
        assert event["data"] == {"reason": "transactional_rate", "priority": "bulk", "limit_per_min": 2}
    kept = project.get(fits["id"]).get_json()
    assert kept["priority"] == "transactional"
    assert "demoted" not in {e["type"] for e in kept["events"]}


def test_bulk_sends_and_projects_with_no_transactional_rate_are_not_demoted(client):
    unlimited = create_project(client)
    message = unlimited.get(unlimited.send(email(cc=["bo@example.com"])).get_json()["id"]).get_json()
    assert message["priority"] == "transactional"
    limited = create_project(client, settings={"transactional_per_min": 1})
    bulk = limited.get(limited.send(email(priority="bulk", cc=["bo@example.com"])).get_json()["id"]).get_json()
    assert bulk["priority"] == "bulk"
    assert "demoted" not in {e["type"] for e in bulk["events"]}


def test_the_transactional_rate_is_a_project_setting_with_the_deployments_default(client, settings):
    refused = client.post(
        "/v1/admin/projects", json={"name": "R", "settings": {"transactional_per_min": 0}}, headers=bearer(ADMIN_KEY)
    )
    assert refused.status_code == 422
    assert "transactional_per_min" in refused.get_json()["errors"]["json"]["settings"]
    created = client.post(
        "/v1/admin/projects", json={"name": "R", "settings": {"transactional_per_min": 20}}, headers=bearer(ADMIN_KEY)
    )
    assert created.get_json()["settings"]["transactional_per_min"] == 20
    deployment = replace(settings, transactional_per_min=500)
    assert Settings.from_env({**settings.environ, "TRANSACTIONAL_PER_MINUTE": "500"}).transactional_per_min == 500
    assert send_limits({}, deployment).transactional_per_min == 500
    assert send_limits({"transactional_per_min": 20}, deployment).transactional_per_min == 20
    assert send_limits({"transactional_per_min": None}, deployment).transactional_per_min is None


def test_data_nested_deeper_than_32_is_422_naming_its_field_and_writes_nothing(client, engine):
    """Free-form data went as deep as the JSON parser allowed (about 990 levels), for every
    worker and encoder after it to recurse through; now 32, as a workflow trigger's."""
    project = create_project(client)
    deep = '{"a": ' + "[" * 32 + "]" * 32 + "}"  # the object itself is one level: 33 in all
    one = '{"channel": "email", "to": {"email": "a@example.com"}, "content": {"subject": "s", "text": "t"}'
    too_deep = ["Objects and lists nested at most 32 deep."]
    cases = [
        ("POST", "/v1/messages", f'{one}, "data": {deep}}}', {"data": too_deep}),
        ("POST", "/v1/messages", f'{one}, "metadata": {deep}}}', {"metadata": too_deep}),
        ("PUT", "/v1/subscribers/deep", f'{{"email": "a@example.com", "data": {deep}}}', {"data": too_deep}),
    ]
    headers = {**bearer(project.live_key), "Content-Type": "application/json"}
    for method, path, body, errors in cases:
        answer = client.open(path, method=method, data=body, headers=headers)
        assert assert_error_shape(answer, 422)["errors"]["json"] == errors, (path, body[-80:])
    rows = '[{"email": "a@example.com", "data": ' + deep + '}, {"email": "b@example.com"}]'
    batch = '{"channel": "email", "content": {"subject": "s", "text": "t"}, "recipients": ' + rows + "}"
    answer = client.post("/v1/messages/batch", data=batch, headers=headers).get_json()  # a row alone is refused
    assert (answer["accepted"], answer["rejected"]) == (1, [{"index": 0, "errors": {"data": too_deep}}])
    with engine.connect() as connection:
        for table in ("messages", "subscribers"):
            written = connection.execute(text(f"SELECT count(*) FROM {table} WHERE project_id = :p"), {"p": project.id})
            assert written.scalar() == (table == "messages"), table  # the batch's good row
    shallow = '{"a": ' + "[" * 31 + "]" * 31 + "}"
    assert client.post("/v1/messages", data=f'{one}, "data": {shallow}}}', headers=headers).status_code == 202
