"""Bad input: a clear 4xx in one JSON shape, with field errors, and nothing written."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from tests.conftest import bearer, email


def assert_error_shape(answer, code: int) -> dict:
    body = answer.get_json()
    assert answer.status_code == code
    assert answer.content_type == "application/json"
    assert body["code"] == code
    assert body["status"]
    assert body["message"]
    return body


def message_count(engine, project_id: str) -> int:
    with engine.connect() as connection:
        return connection.execute(
            text("SELECT count(*) FROM messages WHERE project_id = :p"), {"p": project_id}
        ).scalar_one()


@pytest.mark.parametrize(
    ("body", "errors"),
    [
        (
            {"to": {"email": "a@example.com"}, "content": {"subject": "s", "text": "t"}},
            {"channel": ["Missing data for required field."]},
        ),
        (email(channel="fax"), {"channel": ["Must be one of: email, sms, push, webhook, in_app."]}),
        (email(channel=5), {"channel": ["Must be one of: email, sms, push, webhook, in_app."]}),
        (
            {"channel": "email", "content": {"subject": "s", "text": "t"}},
            {"to": ["Missing data for required field."]},
        ),
        (email(to="not-an-email"), {"to": {"email": ["Not a valid email address."]}}),
        (email(to=42), {"to": {"email": ["Not a valid email address."]}}),
        ({**email(), "to": "ada@example.com"}, {"to": {"_schema": ["Invalid input type."]}}),
        (
            {**email(), "to": {"email": "a@example.com", "phone": "+4915112345678"}},
            {"to": {"_schema": ["Give exactly one of subscriber_id, email, phone, device_token, url."]}},
        ),
        (
            {**email(), "to": {"phone": "+4915112345678"}},
            {"to": ["A email message goes to a subscriber_id or email, not phone."]},
        ),
        (
            {"channel": "sms", "to": {"phone": "0151 123"}, "content": {"text": "t"}},
            {"to": {"phone": ["Not a valid E.164 phone number."]}},
        ),
        (
            {"channel": "email", "to": {"email": "a@example.com"}},
            {"content": ["Give either template or content, not both and not neither."]},
        ),
        ({**email(), "content": {"text": "no subject"}}, {"content": ["An email needs a subject."]}),
        (email(priority="urgent"), {"priority": ["Must be one of: transactional, bulk."]}),
        (email(scheduled_at="2030-01-01T00:00:00"), {"scheduled_at": ["Not a valid aware datetime."]}),
        (email(metadata=["x"]), {"metadata": ["Not a valid mapping type."]}),
        (email(surprise=True), {"surprise": ["Unknown field."]}),
        (
            {"channel": "email", "to": {"email": "a@example.com"}, "template": "welcome"},
            {"template": ["Unknown template 'welcome'."]},
        ),
        (
            {"channel": "in_app", "to": {"email": "a@example.com"}, "content": {"text": "t"}},
            {"to": ["A in_app message goes to a subscriber_id (its inbox), not email."]},
        ),
    ],
)
def test_invalid_send_is_422_with_field_errors(project, engine, body, errors):
    answer = project.send(body)
    payload = assert_error_shape(answer, 422)
    assert payload["message"] == "Invalid request."
    assert payload["errors"]["json"] == errors
    assert message_count(engine, project.id) == 0


def test_channel_not_enabled_for_the_project_is_422(client):
    from tests.conftest import create_project

    email_only = create_project(client, channels=["email"])
    answer = email_only.send({"channel": "sms", "to": {"phone": "+4915112345678"}, "content": {"text": "t"}})
    assert assert_error_shape(answer, 422)["errors"]["json"] == {
        "channel": ["The sms channel is not enabled for this project."]
    }


def test_body_over_one_mebibyte_is_413(project, engine):
    body = email()
    body["content"]["text"] = "x" * (1024 * 1024 + 1)
    assert_error_shape(project.send(body), 413)
    assert message_count(engine, project.id) == 0


def test_malformed_json_is_400(client, project):
    answer = client.post(
        "/v1/messages", data="{not json", content_type="application/json", headers=bearer(project.live_key)
    )
    assert assert_error_shape(answer, 400)["errors"] == {"json": ["Invalid JSON body."]}


def test_a_body_that_is_not_json_is_415(client, project):
    answer = client.post("/v1/messages", data="channel=email", headers=bearer(project.live_key))
    assert_error_shape(answer, 415)


def test_unknown_route_is_404_json(client):
    assert_error_shape(client.get("/v1/nothing-here"), 404)


def test_wrong_method_is_405_json(client, project):
    answer = client.delete("/v1/messages", headers=bearer(project.live_key))
    assert_error_shape(answer, 405)
    assert "POST" in answer.headers["Allow"]


def test_unknown_or_malformed_message_id_is_404(project):
    assert_error_shape(project.get("00000000-0000-0000-0000-000000000000"), 404)
    assert_error_shape(project.get("not-a-uuid"), 404)


def test_overlong_idempotency_key_is_422(project):
    answer = project.send(email(), **{"Idempotency-Key": "k" * 256})
    assert assert_error_shape(answer, 422)["errors"] == {"headers": {"Idempotency-Key": ["Use 1 to 255 characters."]}}
