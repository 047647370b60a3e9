"""What deliver does beyond sending: suppress refused recipients, drop dead push tokens, hand
adapters the structured content prepare rendered, and record what a hostile receiver answered
without holding up its batch. Real adapters against local servers speaking Postmark, Twilio,
FCM and a webhook receiver; the worker prepares, the test delivers.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from app.enums import Channel
from providers import signing
from providers.webhook import UNREACHABLE
from tasks.deliver import deliver
from tests.conftest import WEBHOOK_ENVIRON, create_project, email, rerouted
from tests.fcm_server import SEND, fcm_error, serve_tokens, service_account
from tests.hostile_server import HostileServer

pytestmark = pytest.mark.usefixtures("worker")


@pytest.fixture(scope="module")
def key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture
def real_providers(settings, httpserver: HTTPServer, key) -> Iterator[None]:
    """Every channel routed to a real adapter whose API is `httpserver`. No worker listens on
    their deliver lanes, so prepare runs in the worker and each test calls deliver itself."""
    account = service_account(key, httpserver)
    serve_tokens(key, httpserver)
    url = httpserver.url_for("")
    chains = {
        Channel.EMAIL: ("postmark",),
        Channel.SMS: ("twilio",),
        Channel.PUSH: ("fcm",),
        Channel.WEBHOOK: ("webhook",),
    }
    with rerouted(
        settings,
        chains,
        EMAIL_FROM="hello@acme.test",
        POSTMARK_SERVER_TOKEN="server-token",
        POSTMARK_BASE_URL=url,
        TWILIO_ACCOUNT_SID="AC123",
        TWILIO_AUTH_TOKEN="auth-token",
        TWILIO_FROM="+15005550006",
        TWILIO_BASE_URL=url,
        FCM_CREDENTIALS_JSON=json.dumps(account),
        FCM_BASE_URL=url,
        **WEBHOOK_ENVIRON,
    ):
        yield


def prepared(project, body: dict) -> str:
    message_id = project.send(body).get_json()["id"]
    assert project.wait_for(message_id, {"ready", "failed", "suppressed"})["status"] == "ready"
    return message_id


def test_an_inactive_recipient_fails_and_is_suppressed_for_the_project(project, httpserver, real_providers):
    httpserver.expect_request("/email", method="POST").respond_with_json(
        {"ErrorCode": 406, "Message": "You tried to send to a recipient that has been marked as inactive."},
        status=422,
    )
    message_id = prepared(project, email(to="Gone@Example.com"))
    deliver("postmark", [message_id])
    message = project.get(message_id).get_json()
    assert message["status"] == "failed"
    failed = message["events"][-1]
    assert failed["type"] == "failed"
    assert failed["data"]["follow_up"] == "suppressed"
    assert failed["data"]["suppression_reason"] == "bounce"
    listed = project.call("GET", "/v1/suppressions").get_json()["items"]
    assert [(s["channel"], s["address"], s["reason"]) for s in listed] == [("email", "gone@example.com", "bounce")]
    # The next message to the address never reaches a provider.
    again = project.send(email(to="gone@example.com")).get_json()["id"]
    assert project.wait_for(again)["status"] == "suppressed"


def test_an_sms_stop_is_suppressed_as_an_unsubscribe(project, httpserver, real_providers):
    httpserver.expect_request("/2010-04-01/Accounts/AC123/Messages.json", method="POST").respond_with_json(
        {"code": 21610, "message": "Attempt to send to unsubscribed recipient", "status": 400}, status=400
    )
    body = {"channel": "sms", "to": {"phone": "+4915112345678"}, "content": {"text": "Your code is 1234"}}
    message_id = prepared(project, body)
    deliver("twilio", [message_id])
    failed = project.get(message_id).get_json()["events"][-1]
    assert (failed["type"], failed["data"]["follow_up"], failed["data"]["suppression_reason"]) == (
        "failed",
        "suppressed",
        "unsubscribe",
    )
    listed = project.call("GET", "/v1/suppressions").get_json()["items"]
    assert [(s["channel"], s["address"], s["reason"]) for s in listed] == [("sms", "+4915112345678", "unsubscribe")]


def test_an_unregistered_push_token_is_removed_from_its_subscriber(project, httpserver, real_providers):
    sent: list[dict] = []

    def answer(request: Request) -> Response:
        sent.append(request.get_json())
        if request.get_json()["message"]["token"] == "token-old":
            return fcm_error(404, "NOT_FOUND", "UNREGISTERED")
        return Response(json.dumps({"name": "projects/p/messages/1"}), 200, content_type="application/json")

    httpserver.expect_request(SEND, method="POST").respond_with_handler(answer)
    template = {
        "key": "order",
        "channel": "push",
        "title": "Order {{ n }}",
        "body": "On its way",
        "data": {"n": "{{ n }}"},
    }
    assert project.call("POST", "/v1/templates", template).status_code == 201
    tokens = {"push_tokens": ["token-old", "token-new", "token-tablet"]}
    assert project.call("PUT", "/v1/subscribers/u1", tokens).status_code == 201
    body = {"channel": "push", "to": {"subscriber_id": "u1"}, "template": "order", "data": {"n": 17}}
    message_id = prepared(project, body)
    deliver("fcm", [message_id])
    # Every device got the template's data (push data travels as strings).
    assert sent == [
        {
            "message": {
                "token": token,
                "notification": {"title": "Order 17", "body": "On its way"},
                "data": {"n": "17"},
            }
        }
        for token in tokens["push_tokens"]
    ]
    message = project.get(message_id).get_json()
    assert message["status"] == "sent"
    removed = [e["data"]["token"] for e in message["events"] if e["data"].get("follow_up") == "token_removed"]
    assert removed == ["token-old"]
    subscriber = project.call("GET", "/v1/subscribers/u1").get_json()
    assert subscriber["push_tokens"] == ["token-new", "token-tablet"]


def test_a_push_to_a_raw_token_fails_without_touching_any_subscriber(project, httpserver, real_providers):
    httpserver.expect_request(SEND, method="POST").respond_with_response(fcm_error(404, "NOT_FOUND", "UNREGISTERED"))
    assert project.call("PUT", "/v1/subscribers/u2", {"push_tokens": ["token-raw"]}).status_code == 201
    body = {"channel": "push", "to": {"device_token": "token-raw"}, "content": {"title": "Hi", "text": "there"}}
    message_id = prepared(project, body)
    deliver("fcm", [message_id])
    failed = project.get(message_id).get_json()["events"][-1]
    assert failed["type"] == "failed"
    assert "follow_up" not in failed["data"]
    assert project.call("GET", "/v1/subscribers/u2").get_json()["push_tokens"] == ["token-raw"]


def test_a_webhook_template_posts_its_rendered_json_as_the_body(project, httpserver, real_providers):
    received: list[Request] = []

    def receive(request: Request) -> Response:
        received.append(request)
        return Response("", 204)

    httpserver.expect_request("/hook", method="POST").respond_with_handler(receive)
    template = {"key": "order-hook", "channel": "webhook", "payload": {"order": "{{ n }}", "tags": ["{{ n }}", 3]}}
    assert project.call("POST", "/v1/templates", template).status_code == 201
    body = {
        "channel": "webhook",
        "to": {"url": httpserver.url_for("/hook")},
        "template": "order-hook",
        "data": {"n": 7},
    }
    message_id = prepared(project, body)
    deliver("webhook", [message_id])
    assert project.get(message_id).get_json()["status"] == "sent"
    [request] = received
    assert request.get_json() == {"order": "7", "tags": ["7", 3]}
    key = signing.secret_key(project.webhook_signing_secret, "secret")
    headers = request.headers
    assert signing.verify(
        key, headers["webhook-id"], headers["webhook-timestamp"], request.get_data(), headers["webhook-signature"]
    )


def webhook(url: str) -> dict:
    return {"channel": "webhook", "to": {"url": url}, "content": {"text": "hello"}}


@pytest.mark.parametrize(
    ("behaviour", "error"),
    [
        ("endless", "HTTP 500 from the receiver: endless endless "),
        ("bomb", "HTTP 500 from the receiver: bomb bomb "),
        ("drip", "ambiguous: no complete answer within 1s"),
        ("nul", "HTTP 500 from the receiver: refused\ufffd\ufffd by the receiver"),
    ],
)
def test_a_hostile_receiver_costs_its_message_one_attempt_and_the_batch_goes_on(
    project, hostile: HostileServer, real_providers, behaviour, error
):
    bad = prepared(project, webhook(hostile.url(behaviour, 500)))
    good = prepared(project, webhook(hostile.url("good")))
    deliver("webhook", [bad, good])
    retrying = project.get(bad).get_json()
    assert (retrying["status"], retrying["attempts"]) == ("retrying", 1)
    assert retrying["error"].startswith(error) and len(retrying["error"]) <= len("HTTP 500 from the receiver: ") + 300
    assert project.get(good).get_json()["status"] == "sent"
    assert (hostile.stats(behaviour).requests, hostile.stats("good").requests) == (1, 1)


@pytest.fixture
def other_loopback() -> Iterator[HTTPServer]:
    """A receiver on 127.0.0.2: loopback, but outside the deployment's 127.0.0.1/32."""
    server = HTTPServer(host="127.0.0.2", port=0)
    server.expect_request("/hook", method="POST").respond_with_data("ok")
    server.start()
    yield server
    server.clear()
    server.stop()


def test_a_webhook_reaches_the_networks_its_project_is_allowed(client, project, other_loopback, real_providers):
    allowed = create_project(client, settings={"webhook_allowed_networks": ["127.0.0.2/32"]})
    url = other_loopback.url_for("/hook")
    ours, theirs = prepared(allowed, webhook(url)), prepared(project, webhook(url))
    deliver("webhook", [ours, theirs])
    assert allowed.get(ours).get_json()["status"] == "sent"
    refused = project.get(theirs).get_json()
    assert (refused["status"], refused["error"]) == ("retrying", UNREACHABLE)
    assert len(other_loopback.log) == 1
