"""Webhook adapter: Standard Webhooks signatures (checked with the reference package), SSRF guard,
and receivers that answer badly on purpose.

The guard's tests never leave the machine: other addresses are judged as values, and names
resolve through a resolver the test hands the session (`.test` names the system cannot
resolve, so a connection that works went where our resolver said).
"""

from __future__ import annotations

import base64
import logging
import socket
import ssl
from collections.abc import Iterator

import pytest
import requests
import trustme
from pytest_httpserver import HTTPServer
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from providers import signing
from providers.base import Outbound, Outcome
from providers.bounded import exchange
from providers.webhook import (
    UNREACHABLE,
    RefusedTarget,
    WebhookProvider,
    check_peer,
    checked_address,
    guarded_session,
    networks,
)
from tests.conftest import closed_port
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


class Resolver:
    """DNS as the test says: each name's addresses, and every lookup made."""

    def __init__(self, names: dict[str, list[str]]):
        self.names = names
        self.lookups: list[str] = []

    def __call__(self, host: str, port: int) -> list[str]:
        self.lookups.append(host)
        if host not in self.names:
            raise socket.gaierror(socket.EAI_NONAME, f"{host} is not known")
        return self.names[host]


def test_loopback_is_refused_unless_allowed(httpserver: HTTPServer):
    guarded = WebhookProvider.from_env({"WEBHOOK_SIGNING_SECRET": SECRET})
    httpserver.expect_request("/hooks").respond_with_data("ok")
    for url in (httpserver.url_for("/hooks"), f"http://127.0.0.1:{httpserver.port}/hooks"):
        [result] = guarded.send([hook(url, data={})])
        assert (result.outcome, result.error) == (Outcome.TRANSIENT, UNREACHABLE)
    assert httpserver.log == []  # nothing reached the server


def test_a_tenant_cannot_tell_a_refused_address_from_a_closed_port_or_an_unknown_name(caplog):
    resolver = Resolver({"internal.test": ["10.0.0.5"], "closed.test": ["127.0.0.1"]})
    adapter = WebhookProvider(SECRET, networks(LOOPBACK), 5, resolver)
    port = closed_port()
    urls = {
        "refused": "https://internal.test/hooks",
        "closed": f"http://closed.test:{port}/hooks",
        "unknown": "https://nowhere.test/hooks",
    }
    with caplog.at_level(logging.WARNING, logger="providers.webhook"):
        results = adapter.send([hook(url, n, data={}) for n, url in enumerate(urls.values())])
    assert {(r.outcome, r.error) for r in results} == {(Outcome.TRANSIENT, UNREACHABLE)}
    logged = [record.getMessage() for record in caplog.records]
    assert "internal.test resolves to 10.0.0.5: 10.0.0.5 is a private" in logged[0]
    assert "Connection refused" in logged[1] and "nowhere.test is not known" in logged[2]


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
        ("224.0.0.1", False),
        ("::1", False),
        ("fe80::1", False),
        ("fe80::1%eth0", False),
        ("fd00::1", False),
        ("ff02::1", False),
        ("::ffff:127.0.0.1", False),  # loopback dressed as IPv6
        ("::ffff:169.254.169.254", False),
        ("64:ff9b::a00:1", False),  # NAT64 to 10.0.0.1
        ("64:ff9b::a9fe:a9fe", False),  # NAT64 to the metadata service
        ("64:ff9b:1::7f00:1", False),  # local-use NAT64, /96 layout: 127.0.0.1
        ("64:ff9b:1:a00:0:100:808:808", False),  # 8.8.8.8 read as /96, but 10.0.0.1 in the /48 layout
        ("2002:a00:1::1", False),  # 6to4 from 10.0.0.1
        ("2002:c0a8:101::", False),  # 6to4 from 192.168.1.1
        ("93.184.216.34", True),  # public, but plain http
        ("64:ff9b::808:808", True),
    ],
)
def test_refused_peers(address, plain_http):
    with pytest.raises(RefusedTarget):
        check_peer(address, [], plain_http=plain_http)


@pytest.mark.parametrize(
    "address",
    ["93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946", "::ffff:8.8.8.8", "64:ff9b::808:808", "2002:808:808::1"],
)
def test_public_https_peers_pass(address):
    check_peer(address, [], plain_http=False)


@pytest.mark.parametrize("address", ["10.1.2.3", "::ffff:10.1.2.3", "64:ff9b::a01:203", "2002:a01:203::1"])
def test_an_allowed_network_allows_the_ipv4_address_inside_too(address):
    check_peer(address, networks("10.0.0.0/8"), plain_http=True)


def test_one_refused_address_refuses_the_name():
    resolver = Resolver({"mixed.test": ["93.184.216.34", "10.0.0.1"], "public.test": ["2606:4700::1111", "1.1.1.1"]})
    with pytest.raises(RefusedTarget, match=r"mixed\.test resolves to 10\.0\.0\.1: 10\.0\.0\.1 is a private"):
        checked_address("mixed.test", 443, [], False, resolver)
    assert checked_address("public.test", 443, [], False, resolver) == "2606:4700::1111"


def test_a_name_with_one_refused_address_is_never_connected_to(httpserver: HTTPServer):
    httpserver.expect_request("/hooks").respond_with_data("ok")
    resolver = Resolver({"mixed.test": ["127.0.0.1", "10.0.0.1"]})
    session = guarded_session(networks("127.0.0.0/8"), resolver)
    with pytest.raises(RefusedTarget, match=r"10\.0\.0\.1"):
        exchange(session, "POST", f"http://mixed.test:{httpserver.port}/hooks", 5)
    assert httpserver.log == []


@pytest.fixture
def tls_receiver(tmp_path) -> Iterator[tuple[HTTPServer, list[str], str]]:
    """An https server on 127.0.0.1 whose certificate names only receiver.test, the names
    clients asked for in SNI, and the CA file that trusts it."""
    ca = trustme.CA()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("receiver.test").configure_cert(context)
    names: list[str] = []
    context.sni_callback = lambda _socket, name, _context: names.append(name)
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    server = HTTPServer(host="127.0.0.1", port=0, ssl_context=context)
    server.start()
    yield server, names, str(ca_file)
    server.clear()
    server.stop()


def test_the_connection_goes_to_the_checked_address_and_tls_to_the_name(tls_receiver):
    server, names, ca_file = tls_receiver
    server.expect_request("/hooks").respond_with_data("ok")
    resolver = Resolver({"receiver.test": ["127.0.0.1"]})
    session = guarded_session(networks("127.0.0.0/8"), resolver)
    session.verify = ca_file
    answer = exchange(session, "POST", f"https://receiver.test:{server.port}/hooks", 5, data=b"{}")
    assert answer.status_code == 200
    assert resolver.lookups == ["receiver.test"]  # once: nothing below us resolved it again
    [(request, _)] = server.log
    assert request.headers["Host"] == f"receiver.test:{server.port}"
    assert request.remote_addr == "127.0.0.1"
    assert names == ["receiver.test"]


def test_the_certificate_is_verified_against_the_name(tls_receiver):
    server, names, ca_file = tls_receiver
    resolver = Resolver({"impostor.test": ["127.0.0.1"]})
    session = guarded_session(networks("127.0.0.0/8"), resolver)
    session.verify = ca_file
    with pytest.raises(requests.exceptions.SSLError, match=r"impostor\.test"):
        exchange(session, "POST", f"https://impostor.test:{server.port}/hooks", 5)
    assert names == ["impostor.test"] and server.log == []


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


def test_a_message_reaches_the_networks_its_project_adds(httpserver: HTTPServer, caplog):
    adapter = WebhookProvider(SECRET, [], 5)
    httpserver.expect_request("/hooks").respond_with_data("ok")
    url = httpserver.url_for("/hooks")
    with caplog.at_level(logging.WARNING, logger="providers.webhook"):
        results = adapter.send(
            [
                hook(url, 1, data={}, allowed_networks=["127.0.0.0/8"]),
                hook(url, 2, data={}),
                hook(url, 3, data={}, allowed_networks="127.0.0.0/8"),  # not a list: adds nothing
            ]
        )
    assert [(r.outcome, r.error) for r in results] == [
        (Outcome.SENT, None),
        (Outcome.TRANSIENT, UNREACHABLE),
        (Outcome.TRANSIENT, UNREACHABLE),
    ]
    assert len(httpserver.log) == 1
    assert "message msg_3: its project's webhook_allowed_networks ignored" in caplog.text
