"""The webhook channel signs each project's messages with that project's own secret, and with
the previous one beside it during a rotation: receivers on 127.0.0.1 verify with the
`standardwebhooks` package, as a project's receiver would. The worker prepares, the test
delivers (no worker listens on the webhook provider's lanes here).
"""

from __future__ import annotations

import base64
from collections.abc import Iterator

import pytest
from pytest_httpserver import HTTPServer
from sqlalchemy import text
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError
from werkzeug import Request, Response

from app.enums import Channel
from tasks.deliver import deliver
from tests.conftest import ProjectKeys, create_project, rerouted

pytestmark = pytest.mark.usefixtures("worker")

DEPLOYMENT_SECRET = "whsec_" + base64.b64encode(b"the deployment's one signing key").decode()


@pytest.fixture
def webhook_channel(settings) -> Iterator[None]:
    """The webhook channel routed to the real webhook adapter, signing with the deployment's secret."""
    with rerouted(
        settings, {Channel.WEBHOOK: ("webhook",)}, WEBHOOK_SIGNING_SECRET=DEPLOYMENT_SECRET, WEBHOOK_TIMEOUT="2"
    ):
        yield


@pytest.fixture
def received(httpserver: HTTPServer) -> dict[str, list[Request]]:
    """Two receivers, /a and /b, each keeping what reached it."""
    seen: dict[str, list[Request]] = {"/a": [], "/b": []}
    for path, requests in seen.items():

        def keep(request: Request, requests: list[Request] = requests) -> Response:
            requests.append(request)
            return Response("", 204)

        httpserver.expect_request(path, method="POST").respond_with_handler(keep)
    return seen


def delivered(project: ProjectKeys, url: str) -> str:
    """Send one webhook-channel message, wait until prepared, deliver it; its id."""
    answer = project.send({"channel": "webhook", "to": {"url": url}, "content": {"text": "hello"}})
    message_id = answer.get_json()["id"]
    assert project.wait_for(message_id, {"ready", "failed"})["status"] == "ready"
    deliver("webhook", [message_id])
    assert project.get(message_id).get_json()["status"] == "sent"
    return message_id


def verifies(secret: str, request: Request) -> bool:
    try:
        Webhook(secret).verify(request.get_data(), dict(request.headers))
    except WebhookVerificationError:
        return False
    return True


def test_each_project_signs_with_its_own_secret(client, httpserver, webhook_channel, received):
    a, b = create_project(client), create_project(client)
    assert a.webhook_signing_secret != b.webhook_signing_secret
    first = a.send({"channel": "webhook", "to": {"url": httpserver.url_for("/a")}, "content": {"text": "from a"}})
    second = b.send({"channel": "webhook", "to": {"url": httpserver.url_for("/b")}, "content": {"text": "from b"}})
    ids = [first.get_json()["id"], second.get_json()["id"]]
    assert a.wait_for(ids[0], {"ready"})["status"] == b.wait_for(ids[1], {"ready"})["status"] == "ready"
    deliver("webhook", ids)  # one batch, two projects
    [to_a], [to_b] = received["/a"], received["/b"]
    assert Webhook(a.webhook_signing_secret).verify(to_a.get_data(), dict(to_a.headers)) == {"text": "from a"}
    assert Webhook(b.webhook_signing_secret).verify(to_b.get_data(), dict(to_b.headers)) == {"text": "from b"}
    assert not verifies(a.webhook_signing_secret, to_b)
    assert not verifies(b.webhook_signing_secret, to_a)
    assert not verifies(DEPLOYMENT_SECRET, to_a) and not verifies(DEPLOYMENT_SECRET, to_b)


def test_after_a_rotation_both_secrets_verify_during_the_overlap(project, httpserver, webhook_channel, received):
    rotated = project.call("POST", "/v1/webhook-signing-secret/rotate")
    assert rotated.status_code == 200
    new = rotated.get_json()["webhook_signing_secret"]
    assert new.startswith("whsec_") and new != project.webhook_signing_secret
    delivered(project, httpserver.url_for("/a"))
    [request] = received["/a"]
    assert len(request.headers["webhook-signature"].split()) == 2
    assert verifies(new, request) and verifies(project.webhook_signing_secret, request)
    assert not verifies(DEPLOYMENT_SECRET, request)


def test_once_the_overlap_is_over_only_the_new_secret_signs(project, httpserver, webhook_channel, received, engine):
    new = project.call("POST", "/v1/webhook-signing-secret/rotate").get_json()["webhook_signing_secret"]
    expire_previous(engine, project.id)
    delivered(project, httpserver.url_for("/a"))
    [request] = received["/a"]
    assert verifies(new, request) and not verifies(project.webhook_signing_secret, request)


def test_a_project_from_before_signs_with_the_deployments_secret_until_it_rotates(
    project, httpserver, webhook_channel, received, engine
):
    with engine.begin() as connection:  # as the migration leaves a project that existed before it
        connection.execute(text("UPDATE projects SET webhook_signing_secret = NULL WHERE id = :id"), {"id": project.id})
    delivered(project, httpserver.url_for("/a"))
    new = project.call("POST", "/v1/webhook-signing-secret/rotate").get_json()["webhook_signing_secret"]
    delivered(project, httpserver.url_for("/a"))
    expire_previous(engine, project.id)
    delivered(project, httpserver.url_for("/a"))
    before, overlap, after = received["/a"]
    assert verifies(DEPLOYMENT_SECRET, before)
    assert verifies(DEPLOYMENT_SECRET, overlap) and verifies(new, overlap)
    assert verifies(new, after) and not verifies(DEPLOYMENT_SECRET, after)


def expire_previous(engine, project_id: str) -> None:
    """End the rotation's overlap now rather than in a day."""
    with engine.begin() as connection:
        connection.execute(
            text("UPDATE projects SET webhook_signing_previous_expires_at = now() - interval '1s' WHERE id = :id"),
            {"id": project_id},
        )
