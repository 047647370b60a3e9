"""Who may call what: project keys, the admin key, revocation, tenant isolation."""

from __future__ import annotations

from tests.conftest import ADMIN_KEY, bearer, create_project, email


def test_project_route_without_a_key_is_401(client, project):
    answer = client.post("/v1/messages", json=email())
    assert answer.status_code == 401
    assert answer.get_json()["code"] == 401
    assert answer.headers["WWW-Authenticate"] == "Bearer"


def test_unknown_key_is_401(project):
    answer = project.send(email(), key="tid_live_not-a-real-key")
    assert answer.status_code == 401


def test_malformed_authorization_header_is_401(client, project):
    answer = client.post("/v1/messages", json=email(), headers={"Authorization": project.live_key})
    assert answer.status_code == 401


def test_revoked_key_is_401_at_once(client, project):
    assert project.send(email()).status_code == 202
    revoked = client.delete(f"/v1/admin/projects/{project.id}/keys/{project.live_key_id}", headers=bearer(ADMIN_KEY))
    assert revoked.status_code == 204
    assert project.send(email()).status_code == 401
    assert project.send(email(), key=project.test_key).status_code == 202


def test_revoking_an_unknown_key_is_404(client, project):
    for key_id in ("not-a-uuid", "00000000-0000-0000-0000-000000000000"):
        answer = client.delete(f"/v1/admin/projects/{project.id}/keys/{key_id}", headers=bearer(ADMIN_KEY))
        assert answer.status_code == 404


def test_project_key_on_an_admin_route_is_403(client, project):
    answer = client.get("/v1/admin/projects", headers=bearer(project.live_key))
    assert answer.status_code == 403
    assert answer.get_json()["message"] == "This route needs the admin key, not a project key."


def test_admin_route_without_or_with_a_wrong_key_is_401(client):
    assert client.get("/v1/admin/projects").status_code == 401
    assert client.get("/v1/admin/projects", headers=bearer("wrong-admin-key")).status_code == 401


def test_admin_key_is_not_a_project_key(client):
    assert client.post("/v1/messages", json=email(), headers=bearer(ADMIN_KEY)).status_code == 401


def test_another_projects_message_is_404_and_shows_nothing(client, project):
    message_id = project.send(email(to="secret@example.com")).get_json()["id"]
    other = create_project(client)
    answer = other.get(message_id)
    assert answer.status_code == 404
    assert "secret@example.com" not in answer.get_data(as_text=True)
    assert project.get(message_id).status_code == 200


def test_test_key_sees_the_projects_messages(project):
    message_id = project.send(email()).get_json()["id"]
    assert project.get(message_id, key=project.test_key).status_code == 200


def test_a_project_change_applies_to_a_key_already_in_use(client, project):
    assert project.send(email()).status_code == 202
    changed = client.patch(f"/v1/admin/projects/{project.id}", json={"channels": ["sms"]}, headers=bearer(ADMIN_KEY))
    assert changed.status_code == 200
    refused = project.send(email())
    assert refused.status_code == 422
    assert "channel" in refused.get_json()["errors"]["json"]


def test_a_deleted_projects_key_is_401_at_once(client, project):
    assert project.send(email()).status_code == 202
    assert client.delete(f"/v1/admin/projects/{project.id}", headers=bearer(ADMIN_KEY)).status_code == 204
    assert project.send(email()).status_code == 401
