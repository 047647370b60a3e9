"""The `fake` adapter against a local server: payload shape and status → error mapping."""

from __future__ import annotations

import pytest
from pytest_httpserver import HTTPServer

from providers.base import (
    ConfigurationError,
    Outbound,
    Outcome,
    PermanentError,
    RateLimited,
    TransientError,
)
from providers.fake import FakeProvider

MESSAGES = [
    Outbound("m1", "email", "a@example.com", "Hi", "text", None),
    Outbound("m2", "email", "b@example.com", "Hi", "text", "<p>html</p>"),
]


@pytest.fixture
def adapter(httpserver: HTTPServer) -> FakeProvider:
    return FakeProvider.from_env({"FAKE_PROVIDER_URL": httpserver.url_for(""), "FAKE_PROVIDER_TIMEOUT": "2"})


def test_one_request_per_batch_with_a_result_per_message(httpserver, adapter):
    httpserver.expect_oneshot_request(
        "/messages",
        method="POST",
        json={
            "messages": [
                {
                    "id": "m1",
                    "channel": "email",
                    "to": "a@example.com",
                    "subject": "Hi",
                    "text": "text",
                    "html": None,
                },
                {
                    "id": "m2",
                    "channel": "email",
                    "to": "b@example.com",
                    "subject": "Hi",
                    "text": "text",
                    "html": "<p>html</p>",
                },
            ]
        },
    ).respond_with_json(
        {
            "results": [
                {"id": "m1", "status": "accepted", "provider_id": "p1"},
                {"id": "m2", "status": "rejected", "error": "bad mailbox"},
            ]
        }
    )
    results = adapter.send(MESSAGES)
    assert [(r.message_id, r.outcome, r.provider_message_id, r.error) for r in results] == [
        ("m1", Outcome.SENT, "p1", None),
        ("m2", Outcome.PERMANENT, None, "bad mailbox"),
    ]


def test_a_message_missing_from_the_answer_is_transient(httpserver, adapter):
    httpserver.expect_oneshot_request("/messages").respond_with_json({"results": []})
    assert {r.outcome for r in adapter.send(MESSAGES)} == {Outcome.TRANSIENT}


def test_429_is_rate_limited_with_retry_after(httpserver, adapter):
    httpserver.expect_oneshot_request("/messages").respond_with_data("slow down", 429, {"Retry-After": "7"})
    with pytest.raises(RateLimited) as raised:
        adapter.send(MESSAGES)
    assert raised.value.retry_after == 7.0
    assert raised.value.retryable


@pytest.mark.parametrize("status", [500, 502, 503, 408])
def test_server_errors_are_transient(httpserver, adapter, status):
    httpserver.expect_oneshot_request("/messages").respond_with_data("oops", status)
    with pytest.raises(TransientError):
        adapter.send(MESSAGES)


@pytest.mark.parametrize("status", [401, 403])
def test_credential_errors_are_configuration_errors(httpserver, adapter, status):
    httpserver.expect_oneshot_request("/messages").respond_with_data("who are you", status)
    with pytest.raises(ConfigurationError):
        adapter.send(MESSAGES)


@pytest.mark.parametrize("status", [400, 404, 422])
def test_client_errors_are_permanent(httpserver, adapter, status):
    httpserver.expect_oneshot_request("/messages").respond_with_data("no", status)
    with pytest.raises(PermanentError) as raised:
        adapter.send(MESSAGES)
    assert not raised.value.retryable
    assert str(raised.value) == f"HTTP {status}: no"


def test_connection_refused_is_transient():
    adapter = FakeProvider.from_env({"FAKE_PROVIDER_URL": "http://127.0.0.1:9"})
    with pytest.raises(TransientError):
        adapter.send(MESSAGES)


def test_missing_url_is_a_setting_error():
    with pytest.raises(ValueError, match="FAKE_PROVIDER_URL is not set"):
        FakeProvider.from_env({})
