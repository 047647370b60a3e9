"""Projects and keys through the admin API."""

from __future__ import annotations

from sqlalchemy import text

from app.crypto import decrypt
from tests.conftest import ADMIN_KEY, bearer

ADMIN = bearer(ADMIN_KEY)


def test_create_project_with_defaults(client):
    answer = client.post("/v1/admin/projects", json={"name": "Acme"}, headers=ADMIN)
    assert answer.status_code == 201
    body = answer.get_json()
    assert body["id"].startswith("p-")
    assert body["channels"] == ["email", "sms", "push", "webhook", "in_app"]
    assert body["rate_limit_per_min"] is None


def test_taken_project_id_is_409(client):
    body = {"id": "acme-taken", "name": "Acme"}
    client.post("/v1/admin/projects", json=body, headers=ADMIN)
    assert client.post("/v1/admin/projects", json=body, headers=ADMIN).status_code == 409


def test_bad_project_id_is_422(client):
    answer = client.post("/v1/admin/projects", json={"id": "Not Valid!", "name": "x"}, headers=ADMIN)
    assert answer.status_code == 422
    assert answer.get_json()["errors"]["json"] == {"id": ["Use 1 to 64 of a-z, 0-9 and -."]}


def test_list_get_update_delete_project(client):
    client.post("/v1/admin/projects", json={"id": "crud-1", "name": "Before"}, headers=ADMIN)
    assert "crud-1" in [p["id"] for p in client.get("/v1/admin/projects", headers=ADMIN).get_json()]
    updated = client.patch("/v1/admin/projects/crud-1", json={"name": "After", "rate_limit_per_min": 10}, headers=ADMIN)
    assert updated.get_json()["name"] == "After"
    assert client.get("/v1/admin/projects/crud-1", headers=ADMIN).get_json()["rate_limit_per_min"] == 10
    assert client.delete("/v1/admin/projects/crud-1", headers=ADMIN).status_code == 204
    assert client.get("/v1/admin/projects/crud-1", headers=ADMIN).status_code == 404


def test_key_is_shown_once_and_stored_as_a_hash(client, engine):
    client.post("/v1/admin/projects", json={"id": "keys-1", "name": "Keys"}, headers=ADMIN)
    answer = client.post("/v1/admin/projects/keys-1/keys", json={"name": "backend"}, headers=ADMIN)
    assert answer.status_code == 201
    key = answer.get_json()
    assert key["kind"] == "live"
    assert key["key"].startswith("tid_live_")
    assert key["prefix"] == key["key"][:13]
    with engine.connect() as connection:
        stored = connection.execute(text("SELECT * FROM api_keys WHERE project_id = 'keys-1'")).mappings().one()
    assert key["key"] not in {str(value) for value in stored.values()}
    assert len(stored["key_hash"]) == 64


def test_key_for_an_unknown_project_is_404(client):
    assert client.post("/v1/admin/projects/nope/keys", json={"name": "k"}, headers=ADMIN).status_code == 404


def test_key_kind_must_be_live_or_test(client):
    client.post("/v1/admin/projects", json={"id": "keys-2", "name": "Keys"}, headers=ADMIN)
    answer = client.post("/v1/admin/projects/keys-2/keys", json={"name": "k", "kind": "prod"}, headers=ADMIN)
    assert answer.status_code == 422
    assert "kind" in answer.get_json()["errors"]["json"]


def test_a_new_project_has_its_webhook_signing_secret_shown_once_and_stored_encrypted(client, engine):
    created = client.post("/v1/admin/projects", json={"name": "Acme"}, headers=ADMIN).get_json()
    secret = created["webhook_signing_secret"]
    assert secret.startswith("whsec_")
    assert "webhook_signing_secret" not in client.get(f"/v1/admin/projects/{created['id']}", headers=ADMIN).get_json()
    listed = client.get("/v1/admin/projects", headers=ADMIN).get_json()
    assert [p for p in listed if p["id"] == created["id"]] and all(secret not in str(p) for p in listed)
    with engine.connect() as connection:
        stored = connection.execute(
            text("SELECT webhook_signing_secret FROM projects WHERE id = :id"), {"id": created["id"]}
        ).scalar()
    assert secret not in stored
    assert decrypt(stored) == secret


def test_the_admin_rotates_a_projects_webhook_signing_secret(client, project, engine):
    answer = client.post(f"/v1/admin/projects/{project.id}/webhook-signing-secret/rotate", headers=ADMIN)
    assert answer.status_code == 200
    body = answer.get_json()
    assert body["webhook_signing_secret"].startswith("whsec_")
    assert body["previous_secret_expires_at"] is not None
    with engine.connect() as connection:
        row = connection.execute(
            text(
                "SELECT webhook_signing_secret, webhook_signing_previous_secret,"
                " webhook_signing_previous_expires_at - now() > interval '23 hours' AS overlap FROM projects"
                " WHERE id = :id"
            ),
            {"id": project.id},
        ).one()
    assert (decrypt(row[0]), decrypt(row[1]), row.overlap) == (
        body["webhook_signing_secret"],
        project.webhook_signing_secret,
        True,
    )
    missing = client.post("/v1/admin/projects/no-such-project/webhook-signing-secret/rotate", headers=ADMIN)
    assert missing.status_code == 404
    assert missing.get_json()["code"] == 404
