"""Webhook endpoints through the API: the secret shown once and stored encrypted, rotation, bad input."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from standardwebhooks import Webhook

from app.crypto import decrypt
from providers import signing
from providers.webhook import signed_headers
from tests.conftest import create_project

HOOK = {"url": "https://hooks.example.com/tidings", "event_types": ["sent", "failed"], "description": "ops"}


def test_create_shows_the_secret_once_and_stores_it_encrypted(project, engine):
    created = project.call("POST", "/v1/webhooks", HOOK)
    assert created.status_code == 201
    body = created.get_json()
    assert body["secret"].startswith("whsec_")
    assert (body["url"], body["event_types"], body["enabled"], body["batch"]) == (
        HOOK["url"],
        ["sent", "failed"],
        True,
        False,
    )
    fetched = project.call("GET", f"/v1/webhooks/{body['id']}").get_json()
    assert "secret" not in fetched
    assert "secret" not in project.call("GET", "/v1/webhooks").get_json()["items"][0]
    with engine.connect() as connection:
        stored = connection.execute(
            text("SELECT secret FROM webhook_endpoints WHERE id = :id"), {"id": body["id"]}
        ).scalar()
    assert body["secret"] not in stored
    assert decrypt(stored) == body["secret"]


def test_patch_changes_what_is_given_and_delete_removes(project):
    endpoint = project.call("POST", "/v1/webhooks", HOOK).get_json()
    patched = project.call("PATCH", f"/v1/webhooks/{endpoint['id']}", {"batch": True, "event_types": []})
    assert patched.status_code == 200
    assert (patched.get_json()["batch"], patched.get_json()["event_types"], patched.get_json()["url"]) == (
        True,
        [],
        HOOK["url"],
    )
    off = project.call("PATCH", f"/v1/webhooks/{endpoint['id']}", {"enabled": False}).get_json()
    assert (off["enabled"], off["disabled_reason"]) == (False, "disabled by hand")
    on = project.call("PATCH", f"/v1/webhooks/{endpoint['id']}", {"enabled": True}).get_json()
    assert (on["enabled"], on["disabled_reason"]) == (True, None)
    assert project.call("DELETE", f"/v1/webhooks/{endpoint['id']}").status_code == 204
    assert project.call("GET", f"/v1/webhooks/{endpoint['id']}").status_code == 404


def test_rotation_signs_with_both_secrets_for_a_day(project, engine):
    endpoint = project.call("POST", "/v1/webhooks", HOOK).get_json()
    rotated = project.call("POST", f"/v1/webhooks/{endpoint['id']}/rotate").get_json()
    assert rotated["secret"] != endpoint["secret"]
    assert rotated["previous_secret_expires_at"] is not None
    with engine.connect() as connection:
        row = connection.execute(
            text(
                "SELECT secret, previous_secret, previous_secret_expires_at - now() > interval '23 hours' AS day "
                "FROM webhook_endpoints WHERE id = :id"
            ),
            {"id": endpoint["id"]},
        ).one()
    assert row.day
    assert (decrypt(row.secret), decrypt(row.previous_secret)) == (rotated["secret"], endpoint["secret"])
    body = '{"type":"sent"}'
    headers = signed_headers(
        "msg_1",
        body,
        [signing.secret_key(rotated["secret"], "secret"), signing.secret_key(endpoint["secret"], "secret")],
    )
    for secret in (rotated["secret"], endpoint["secret"]):  # a receiver with either secret verifies
        assert Webhook(secret).verify(body, headers) == {"type": "sent"}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"url": "ftp://example.com/x"}, "url"),
        ({"url": "not a url"}, "url"),
        ({"url": "https://user:pw@example.com/x"}, "url"),
        ({}, "url"),
        ({"url": "https://example.com", "event_types": ["exploded"]}, "event_types"),
        ({"url": "https://example.com", "batch": "sometimes"}, "batch"),
    ],
)
def test_bad_endpoints_are_422_and_write_nothing(project, engine, body, field):
    answer = project.call("POST", "/v1/webhooks", body)
    assert answer.status_code == 422
    assert field in answer.get_json()["errors"]["json"]
    with engine.connect() as connection:
        count = connection.execute(
            text("SELECT count(*) FROM webhook_endpoints WHERE project_id = :p"), {"p": project.id}
        )
        assert count.scalar() == 0


def test_another_projects_endpoint_is_404(client, project):
    endpoint = project.call("POST", "/v1/webhooks", HOOK).get_json()
    other = create_project(client)
    for method, path in (
        ("GET", f"/v1/webhooks/{endpoint['id']}"),
        ("PATCH", f"/v1/webhooks/{endpoint['id']}"),
        ("DELETE", f"/v1/webhooks/{endpoint['id']}"),
        ("POST", f"/v1/webhooks/{endpoint['id']}/rotate"),
        ("GET", f"/v1/webhooks/{endpoint['id']}/deliveries"),
        ("GET", "/v1/webhooks/not-a-uuid"),
    ):
        assert other.call(method, path, {} if method == "PATCH" else None).status_code == 404, (method, path)


def test_a_project_rotates_its_own_webhook_signing_secret_only(client, project, engine):
    other = create_project(client)
    answer = project.call("POST", "/v1/webhook-signing-secret/rotate")
    assert answer.status_code == 200
    body = answer.get_json()
    assert set(body) == {"webhook_signing_secret", "previous_secret_expires_at"}
    assert body["webhook_signing_secret"] not in (project.webhook_signing_secret, other.webhook_signing_secret)
    with engine.connect() as connection:
        stored = dict(
            connection.execute(
                text("SELECT id, webhook_signing_secret FROM projects WHERE id IN (:a, :b)"),
                {"a": project.id, "b": other.id},
            ).all()
        )
    assert decrypt(stored[project.id]) == body["webhook_signing_secret"]
    assert decrypt(stored[other.id]) == other.webhook_signing_secret
    unauthenticated = client.post("/v1/webhook-signing-secret/rotate")
    assert unauthenticated.status_code == 401
