"""Bring your own account: a project's own settings for a provider, sealed, checked, never
answered, and used by the worker for that project's messages alone."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import text

from app.vault import seal, unseal
from tests.conftest import ADMIN_KEY, bearer, create_project, email
from tests.provider_server import FakeProviderServer, json_response

ADMIN = bearer(ADMIN_KEY)


@pytest.fixture
def own_server() -> FakeProviderServer:
    server = FakeProviderServer().start()
    yield server
    server.stop()


def own_account(client, project_id: str) -> dict:
    return client.get(f"/v1/admin/projects/{project_id}/providers/fake", headers=ADMIN).get_json()


def wait_until_paused(client, project_id: str) -> dict:
    deadline = time.monotonic() + 15
    while not (account := own_account(client, project_id))["paused"]:
        assert time.monotonic() < deadline, "the project's account was never paused"
        time.sleep(0.05)
    return account


def put(client, project_id: str, provider: str, settings: dict):
    return client.put(
        f"/v1/admin/projects/{project_id}/providers/{provider}", json={"settings": settings}, headers=ADMIN
    )


def test_set_read_replace_and_remove_without_ever_answering_a_value(client, project, engine, settings, own_server):
    created = put(client, project.id, "fake", {"FAKE_PROVIDER_URL": own_server.url})
    assert created.status_code == 201
    body = created.get_json()
    assert (body["provider"], body["keys"], body["readable"], body["paused"]) == (
        "fake",
        ["FAKE_PROVIDER_URL"],
        True,
        False,
    )
    assert own_server.url not in created.get_data(as_text=True)
    listed = client.get(f"/v1/admin/projects/{project.id}/providers", headers=ADMIN)
    assert [a["provider"] for a in listed.get_json()] == ["fake"]
    assert own_server.url not in listed.get_data(as_text=True)
    with engine.connect() as connection:
        sealed = connection.execute(
            text("SELECT sealed FROM project_providers WHERE project_id = :p"), {"p": project.id}
        ).scalar_one()
    assert own_server.url not in sealed
    assert unseal(settings.secret_key, sealed) == {"FAKE_PROVIDER_URL": own_server.url}
    replaced = put(client, project.id, "fake", {"FAKE_PROVIDER_URL": own_server.url + "v2/"})
    assert replaced.status_code == 200
    assert replaced.get_json()["updated_at"] > body["updated_at"]
    assert client.delete(f"/v1/admin/projects/{project.id}/providers/fake", headers=ADMIN).status_code == 204
    assert client.get(f"/v1/admin/projects/{project.id}/providers/fake", headers=ADMIN).status_code == 404
    assert client.delete(f"/v1/admin/projects/{project.id}/providers/fake", headers=ADMIN).status_code == 404


@pytest.mark.parametrize(
    ("provider", "given", "errors"),
    [
        (
            "fake",
            {"FAKE_PROVIDER_URL": "http://127.0.0.1:9", "FAKE_PROVIDER_TIMEOUT": "1"},
            {"settings": {"FAKE_PROVIDER_TIMEOUT": ["Not an account setting of fake; it takes FAKE_PROVIDER_URL."]}},
        ),
        ("fake", {}, {"settings": ["Give at least one setting."]}),
        (
            "fake",
            {"FAKE_PROVIDER_URL": ""},
            {"settings": {"FAKE_PROVIDER_URL": {"value": ["Length must be between 1 and 16384."]}}},
        ),
        ("fake", {"FAKE_PROVIDER_URL": 7}, {"settings": {"FAKE_PROVIDER_URL": {"value": ["Not a valid string."]}}}),
        ("log", {"LOG_ANYTHING": "x"}, {"settings": ["log has no account a project could bring."]}),
    ],
)
def test_bad_settings_are_422_and_write_nothing(client, project, engine, provider, given, errors):
    answer = put(client, project.id, provider, given)
    assert answer.status_code == 422
    assert answer.get_json()["errors"]["json"] == errors
    with engine.connect() as connection:
        stored = connection.execute(
            text("SELECT count(*) FROM project_providers WHERE project_id = :p"), {"p": project.id}
        ).scalar_one()
    assert stored == 0


def test_unknown_provider_or_project_is_404_and_a_project_key_is_403(client, project):
    assert put(client, project.id, "pigeon", {"X": "y"}).status_code == 404
    assert put(client, "no-such-project", "fake", {"FAKE_PROVIDER_URL": "http://127.0.0.1:9"}).status_code == 404
    assert client.get("/v1/admin/projects/no-such-project/providers", headers=ADMIN).status_code == 404
    answer = client.put(
        f"/v1/admin/projects/{project.id}/providers/fake",
        json={"settings": {"FAKE_PROVIDER_URL": "http://127.0.0.1:9"}},
        headers=bearer(project.live_key),
    )
    assert answer.status_code == 403


@pytest.mark.usefixtures("worker")
def test_a_project_s_messages_go_out_through_its_own_account(
    client, project, fake_provider, backup_provider, own_server
):
    other = create_project(client)
    assert put(client, project.id, "fake", {"FAKE_PROVIDER_URL": own_server.url}).status_code == 201
    mine = project.wait_for(project.send(email("mine")).get_json()["id"])
    theirs = other.wait_for(other.send(email("theirs")).get_json()["id"])
    assert (mine["status"], mine["provider"]) == ("sent", "fake")
    # The deployment's providers serve the whole session, so they are asked about these
    # messages alone; the project's own server serves this test only.
    assert [r.message_id for r in own_server.delivered()] == [mine["id"]]
    assert (fake_provider.count(mine["id"]), fake_provider.count(theirs["id"])) == (0, 1)
    # Changed: the worker's cached adapter is rebuilt with the new settings.
    assert put(client, project.id, "fake", {"FAKE_PROVIDER_URL": backup_provider.url}).status_code == 200
    moved = project.wait_for(project.send(email("moved")).get_json()["id"])
    assert (backup_provider.count(moved["id"]), fake_provider.count(moved["id"])) == (1, 0)
    # Removed: the deployment's account again.
    assert client.delete(f"/v1/admin/projects/{project.id}/providers/fake", headers=ADMIN).status_code == 204
    again = project.wait_for(project.send(email("again")).get_json()["id"])
    assert again["status"] == "sent"
    assert (fake_provider.count(again["id"]), backup_provider.count(again["id"])) == (1, 0)
    assert len(own_server.delivered()) == 1


@pytest.mark.usefixtures("worker")
def test_a_project_s_broken_account_pauses_that_account_alone(client, project, fake_provider, own_server):
    own_server.override = lambda request: json_response({"error": "bad api key"}, status=401)
    other = create_project(client)
    assert put(client, project.id, "fake", {"FAKE_PROVIDER_URL": own_server.url}).status_code == 201
    mine = project.send(email("mine")).get_json()["id"]
    account = wait_until_paused(client, project.id)
    assert "bad api key" in account["paused_reason"]
    message = project.wait_for(mine, {"ready"})  # the pause is set just before the batch is finalised
    assert (message["status"], message["attempts"]) == ("ready", 0)  # waiting, its attempt given back
    # Everyone else sends as usual through the deployment's account.
    theirs = other.wait_for(other.send(email("theirs")).get_json()["id"])
    assert theirs["status"] == "sent"
    deployment = {p["name"]: p for p in client.get("/v1/admin/providers", headers=ADMIN).get_json()}
    assert deployment["fake"]["paused"] is False
    # New settings lift the pause at once.
    own_server.override = None
    assert put(client, project.id, "fake", {"FAKE_PROVIDER_URL": own_server.url}).status_code == 200
    assert own_account(client, project.id)["paused"] is False


@pytest.mark.usefixtures("worker")
def test_settings_sealed_under_another_secret_key_pause_that_account_and_say_so(client, project, engine):
    with engine.begin() as connection:
        connection.execute(
            text("INSERT INTO project_providers (project_id, provider, sealed) VALUES (:p, 'fake', :sealed)"),
            {"p": project.id, "sealed": seal("the-secret-key-before-rotation", {"FAKE_PROVIDER_URL": "http://x"})},
        )
    account = own_account(client, project.id)
    assert (account["readable"], account["keys"]) == (False, [])
    project.send(email())
    account = wait_until_paused(client, project.id)
    assert "cannot be read with this TIDINGS_SECRET_KEY" in account["paused_reason"]


def test_the_openapi_spec_documents_own_accounts_and_inbound_webhooks(client):
    paths = client.get("/openapi.json").get_json()["paths"]
    assert {"put", "get", "delete"} <= set(paths["/v1/admin/projects/{project_id}/providers/{name}"])
    assert "post" in paths["/v1/inbound/{provider}"]
    assert "post" in paths["/v1/inbound/{provider}/{project_id}"]
