"""Webhook adapter: Standard Webhooks signatures (checked with the reference package), SSRF guard,
and receivers that answer badly on purpose."""

from __future__ import annotations

import base64

import pytest
from pytest_httpserver import HTTPServer
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from providers import signing
from providers.base import Outbound, Outcome
from providers.webhook import RefusedTarget, WebhookProvider, check_peer, networks
from tests.hostile_server import ENDLESS_CHUNK, HostileServer

SECRET = "whsec_" + base64.b64encode(b"a-32-byte-secret-for-the-tests!!").decode()
LOOPBACK = "127.0.0.0/8,::1/128"


def hook(url: str, n: int = 1, **fields) -> Outbound:
    return Outbound(f"msg_{n}", "webhook", url, **fields)


@pytest.fixture
def adapter() -> WebhookProvider:
    return WebhookProvider.from_env({"WEBHOOK_SIGNING_SECRET": SECRET, "WEBHOOK_ALLOWED_NETWORKS": LOOPBACK})


def test_the_body_is_signed_as_standard_webhooks(httpserver: HTTPServer, adapter):
    httpserver.expect_request("/hooks", method="POST", headers={"Content-Type": "application/json"}).respond_with_data(
        "", 204
    )
    data = {"type": "order.shipped", "order": {"id": 17, "items": ["tea", "cups"]}, "note": "ünïcode"}
    [result] = adapter.send([hook(httpserver.url_for("/hooks"), data=data)])
    assert (result.outcome, result.provider_message_id) == (Outcome.SENT, "msg_1")
    request = httpserver.log[0][0]
    assert request.headers["webhook-id"] == "msg_1"
    verified = Webhook(SECRET).verify(request.get_data(), dict(request.headers))
    assert verified == data


def test_a_messages_own_keys_sign_instead_of_the_configured_one(httpserver: HTTPServer, adapter):
    own = "whsec_" + base64.b64encode(b"the project's own 32-byte secret").decode()
    key = signing.secret_key(own, "own")
    httpserver.expect_request("/hooks").respond_with_data("ok")
    adapter.send([hook(httpserver.url_for("/hooks"), data={}, signing_keys=(key,))])
    adapter.send([hook(httpserver.url_for("/hooks"), 2, data={}, signing_keys=(key, None))])  # None: the configured
    alone, both = (entry[0] for entry in httpserver.log)
    Webhook(own).verify(alone.get_data(), dict(alone.headers))
    with pytest.raises(WebhookVerificationError):
        Webhook(SECRET).verify(alone.get_data(), dict(alone.headers))
    for secret in (own, SECRET):
        Webhook(secret).verify(both.get_data(), dict(both.headers))


def test_without_data_the_rendered_content_is_sent(httpserver: HTTPServer, adapter):
    httpserver.expect_request("/hooks").respond_with_data("ok")
    adapter.send([hook(httpserver.url_for("/hooks"), subject="Hi", text="Body")])
    request = httpserver.log[0][0]
    assert Webhook(SECRET).verify(request.get_data(), dict(request.headers)) == {
        "subject": "Hi",
        "text": "Body",
    }


def test_a_tampered_body_does_not_verify(httpserver: HTTPServer, adapter):
    httpserver.expect_request("/hooks").respond_with_data("ok")
    adapter.send([hook(httpserver.url_for("/hooks"), data={"amount": 1})])
    request = httpserver.log[0][0]
    with pytest.raises(WebhookVerificationError, match="signature"):
        Webhook(SECRET).verify(b'{"amount":1000}', dict(request.headers))


def test_loopback_is_refused_unless_allowed(httpserver: HTTPServer):
    guarded = WebhookProvider.from_env({"WEBHOOK_SIGNING_SECRET": SECRET})
    httpserver.expect_request("/hooks").respond_with_data("ok")
    for url in (httpserver.url_for("/hooks"), f"http://127.0.0.1:{httpserver.port}/hooks"):
        [result] = guarded.send([hook(url, data={})])
        assert result.outcome is Outcome.PERMANENT
        assert "refused target" in result.error
    assert httpserver.log == []  # nothing reached the server


@pytest.mark.parametrize(
    ("address", "plain_http"),
    [
        ("127.0.0.1", False),
        ("10.1.2.3", False),
        ("172.16.0.9", False),
        ("192.168.1.1", False),
        ("169.254.169.254", False),  # the cloud metadata service
        ("100.64.0.1", False),  # carrier-grade NAT
        ("0.0.0.0", False),
        ("::1", False),
        ("fe80::1", False),
        ("fd00::1", False),
        ("::ffff:127.0.0.1", False),  # loopback dressed as IPv6
        ("93.184.216.34", True),  # public, but plain http
    ],
)
def test_refused_peers(address, plain_http):
    with pytest.raises(RefusedTarget):
        check_peer(address, [], plain_http=plain_http)


def test_public_https_peers_and_allowed_networks_pass():
    check_peer("93.184.216.34", [], plain_http=False)
    check_peer("2606:2800:220:1:248:1893:25c8:1946", [], plain_http=False)
    check_peer("10.1.2.3", networks("10.0.0.0/8"), plain_http=True)


@pytest.mark.parametrize(
    ("status", "outcome"),
    [
        (200, Outcome.SENT),
        (202, Outcome.SENT),
        (410, Outcome.PERMANENT),
        (400, Outcome.PERMANENT),
        (401, Outcome.PERMANENT),  # the receiver's own problem: never pauses the channel
        (302, Outcome.PERMANENT),  # redirects are not followed
        (429, Outcome.TRANSIENT),  # one slow receiver must not pause every webhook
        (408, Outcome.TRANSIENT),
        (500, Outcome.TRANSIENT),
        (503, Outcome.TRANSIENT),
    ],
)
def test_receiver_answers(httpserver: HTTPServer, adapter, status, outcome):
    httpserver.expect_request("/hooks").respond_with_data("", status, {"Location": "http://127.0.0.1:1/"})
    [result] = adapter.send([hook(httpserver.url_for("/hooks"), data={})])
    assert result.outcome is outcome


def test_a_target_that_is_not_a_url_fails(adapter):
    [result] = adapter.send([hook("ftp://example.com/x", data={})])
    assert result.outcome is Outcome.PERMANENT


def test_one_message_per_call():
    assert WebhookProvider.max_batch == 1


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({}, "WEBHOOK_SIGNING_SECRET is not set"),
        ({"WEBHOOK_SIGNING_SECRET": "plain"}, "must start with whsec_"),
        ({"WEBHOOK_SIGNING_SECRET": "whsec_not*base64"}, "whsec_ followed by base64"),
        (
            {"WEBHOOK_SIGNING_SECRET": SECRET, "WEBHOOK_ALLOWED_NETWORKS": "10.0.0.0/33"},
            "WEBHOOK_ALLOWED_NETWORKS",
        ),
    ],
)
def test_settings(env, message):
    with pytest.raises(ValueError, match=message):
        WebhookProvider.from_env(env)


@pytest.mark.parametrize(
    ("behaviour", "error"),
    [
        ("endless", "HTTP 500 from the receiver: " + ENDLESS_CHUNK[:300].decode()),
        ("bomb", "HTTP 500 from the receiver: " + "bomb " * 60),
        ("drip", "ambiguous: no complete answer within 1s"),
        ("nul", "HTTP 500 from the receiver: refused\ufffd\ufffd by the receiver"),
    ],
)
def test_a_hostile_receiver_fails_its_own_message_and_the_next_one_goes(hostile: HostileServer, behaviour, error):
    adapter = WebhookProvider.from_env(
        {"WEBHOOK_SIGNING_SECRET": SECRET, "WEBHOOK_ALLOWED_NETWORKS": LOOPBACK, "WEBHOOK_TIMEOUT": "1"}
    )
    bad, good = adapter.send([hook(hostile.url(behaviour, 500), 1, data={}), hook(hostile.url("good"), 2, data={})])
    assert (bad.outcome, bad.error) == (Outcome.TRANSIENT, error)
    assert good.outcome is Outcome.SENT
    assert (hostile.stats(behaviour).requests, hostile.stats("good").requests) == (1, 1)


@pytest.mark.parametrize("behaviour", ["endless", "bomb"])
def test_the_status_decides_however_long_the_body(hostile: HostileServer, adapter, behaviour):
    [result] = adapter.send([hook(hostile.url(behaviour, 200), data={})])
    assert result.outcome is Outcome.SENT
