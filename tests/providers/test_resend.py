"""Resend against a local server speaking its API: request shape, batches, error names."""

from __future__ import annotations

import json

import pytest
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from providers import registry
from providers.base import (
    ConfigurationError,
    Outcome,
    PermanentError,
    ProviderError,
    RateLimited,
    TransientError,
)
from providers.resend import ResendProvider
from tests.providers.helpers import FILES, email, emails
from tests.providers.resend_server import ResendServer, resend_error

SETTINGS = {"RESEND_API_KEY": "re_test_123", "EMAIL_FROM": "Acme <hello@acme.test>"}


@pytest.fixture
def adapter(httpserver: HTTPServer) -> ResendProvider:
    return ResendProvider.from_env({**SETTINGS, "RESEND_BASE_URL": httpserver.url_for("")})


def test_one_email_posts_to_emails_with_our_id_as_idempotency_key(httpserver, adapter):
    httpserver.expect_oneshot_request(
        "/emails",
        method="POST",
        headers={"Authorization": "Bearer re_test_123", "Idempotency-Key": "m1"},
        json={
            "from": "Acme <hello@acme.test>",
            "to": ["user1@example.com"],
            "subject": "Hello 1",
            "text": "Hi there",
            "html": "<p>Hi there</p>",
            "reply_to": ["help@acme.test"],
            "headers": {"List-Unsubscribe": "<https://acme.test/u/1>"},
            "tags": [{"name": "tidings_message_id", "value": "m1"}],
        },
    ).respond_with_json({"id": "49a3999c-0ce1-4ea6-ab68-afcd6dc2e794"})
    message = email(1, reply_to="help@acme.test", headers={"List-Unsubscribe": "<https://acme.test/u/1>"})
    [result] = adapter.send([message])
    assert (result.outcome, result.provider_message_id) == (
        Outcome.SENT,
        "49a3999c-0ce1-4ea6-ab68-afcd6dc2e794",
    )
    httpserver.check_assertions()


def test_a_batch_is_one_permissive_call_with_a_stable_idempotency_key(httpserver, adapter):
    seen: list[Request] = []

    def answer(request: Request) -> Response:
        seen.append(request)
        body = request.get_json()
        return Response(json.dumps({"data": [{"id": f"r-{i}"} for i in range(len(body))]}), 200)

    httpserver.expect_request("/emails/batch", method="POST").respond_with_handler(answer)
    batch = emails(3, from_address="other@acme.test")
    first = adapter.send(batch)
    adapter.send(batch)
    assert [(r.message_id, r.outcome, r.provider_message_id) for r in first] == [
        ("m1", Outcome.SENT, "r-0"),
        ("m2", Outcome.SENT, "r-1"),
        ("m3", Outcome.SENT, "r-2"),
    ]
    body = seen[0].get_json()
    assert [e["to"] for e in body] == [["user1@example.com"], ["user2@example.com"], ["user3@example.com"]]
    assert {e["from"] for e in body} == {"other@acme.test"}
    # Each email's own tag names its message in Resend's webhooks.
    assert [e["tags"] for e in body] == [[{"name": "tidings_message_id", "value": f"m{n}"}] for n in (1, 2, 3)]
    assert seen[0].headers["x-batch-validation"] == "permissive"
    # The same messages again carry the same key: Resend answers instead of sending twice.
    assert seen[0].headers["Idempotency-Key"] == seen[1].headers["Idempotency-Key"]
    assert seen[0].headers["Idempotency-Key"].startswith("batch-")


def test_a_permissive_batch_fails_only_the_invalid_emails(httpserver, adapter):
    httpserver.expect_oneshot_request("/emails/batch").respond_with_json(
        {
            "data": [{"id": "r-a"}, {"id": "r-c"}],
            "errors": [{"index": 1, "message": "Invalid `to` field."}],
        }
    )
    results = adapter.send(emails(3))
    assert [(r.message_id, r.outcome, r.provider_message_id, r.error) for r in results] == [
        ("m1", Outcome.SENT, "r-a", None),
        ("m2", Outcome.PERMANENT, None, "Invalid `to` field."),
        ("m3", Outcome.SENT, "r-c", None),
    ]


def test_an_email_missing_from_the_batch_answer_is_transient(httpserver, adapter):
    httpserver.expect_oneshot_request("/emails/batch").respond_with_json({"data": [{"id": "r-a"}]})
    assert [r.outcome for r in adapter.send(emails(2))] == [Outcome.SENT, Outcome.TRANSIENT]


def test_max_batch_is_resends_limit():
    assert ResendProvider.max_batch == 100


@pytest.mark.parametrize(
    ("status", "name", "kind"),
    [
        (400, "validation_error", PermanentError),
        (422, "missing_required_field", PermanentError),
        (400, "invalid_idempotency_key", PermanentError),
        (409, "invalid_idempotent_request", PermanentError),
        (409, "concurrent_idempotent_requests", TransientError),
        (401, "missing_api_key", ConfigurationError),
        (403, "invalid_api_key", ConfigurationError),
        (403, "validation_error", ConfigurationError),  # testing-only account, unverified domain
        (422, "invalid_from_address", ConfigurationError),
        (429, "daily_quota_exceeded", ConfigurationError),
        (429, "monthly_quota_exceeded", ConfigurationError),
        (429, "rate_limit_exceeded", RateLimited),
        (500, "application_error", TransientError),
        (500, "internal_server_error", TransientError),
        (451, "security_error", PermanentError),
    ],
)
def test_error_names(httpserver, adapter, status, name, kind):
    httpserver.expect_request("/emails").respond_with_response(resend_error(status, name))
    httpserver.expect_request("/emails/batch").respond_with_response(resend_error(status, name))
    if kind.provider_wide:  # the engine pauses the provider on it
        with pytest.raises(kind):
            adapter.send([email(1)])
    else:  # a single email's own error is its result
        [result] = adapter.send([email(1)])
        assert (result.outcome, name in result.error) == (kind.outcome, True)
    with pytest.raises(ProviderError) as raised:  # a batch call's error is the whole call's
        adapter.send(emails(2))
    assert type(raised.value) is kind


def test_rate_limit_waits_as_long_as_resend_says(httpserver, adapter):
    answer = resend_error(429, "rate_limit_exceeded")
    answer.headers.update({"retry-after": "2", "ratelimit-reset": "2"})
    httpserver.expect_request("/emails").respond_with_response(answer)
    with pytest.raises(RateLimited) as raised:
        adapter.send([email(1)])
    assert raised.value.retry_after == 2.0


@pytest.mark.parametrize("missing", ["RESEND_API_KEY", "EMAIL_FROM"])
def test_settings(missing):
    with pytest.raises(ValueError, match=f"{missing} is not set"):
        ResendProvider.from_env({k: v for k, v in SETTINGS.items() if k != missing})


def test_a_message_with_attachments_goes_alone_because_batches_take_none(httpserver, adapter):
    singles: list[Request] = []
    batches: list[list[dict]] = []

    def single(request: Request) -> Response:
        singles.append(request)
        return Response(json.dumps({"id": "r-files"}))

    def batch(request: Request) -> Response:
        batches.append(request.get_json())
        return Response(json.dumps({"data": [{"id": f"r{i}"} for i in range(len(request.get_json()))]}))

    httpserver.expect_request("/emails", method="POST").respond_with_handler(single)
    httpserver.expect_request("/emails/batch", method="POST").respond_with_handler(batch)
    results = adapter.send([email(1), email(2, attachments=FILES), email(3)])
    assert {r.message_id: r.provider_message_id for r in results} == {"m1": "r0", "m2": "r-files", "m3": "r1"}
    [with_files] = singles
    assert with_files.headers["Idempotency-Key"] == "m2"
    assert with_files.get_json()["attachments"] == [
        {"filename": "invoice.pdf", "content": "JVBERi0xLjQK", "content_type": "application/pdf"}
    ]
    assert [[m["to"] for m in b] for b in batches] == [[["user1@example.com"], ["user3@example.com"]]]


@pytest.fixture
def resend_server():
    server = ResendServer().start()
    yield server
    server.stop()


def test_the_same_call_made_again_is_answered_and_sent_once(resend_server):
    adapter = ResendProvider.from_env({**SETTINGS, "RESEND_BASE_URL": resend_server.url})
    for batch in (emails(3), [email(4)]):
        first = adapter.send(batch)
        again = adapter.send(batch)
        assert [r.provider_message_id for r in again] == [r.provider_message_id for r in first]
    assert resend_server.deliveries() == {"m1": 1, "m2": 1, "m3": 1, "m4": 1}
    assert resend_server.replays == 2


def test_the_same_messages_in_another_grouping_are_sent_again(resend_server):
    """Why an abandoned claim is resent as its very calls, and never retried in another grouping."""
    adapter = ResendProvider.from_env({**SETTINGS, "RESEND_BASE_URL": resend_server.url})
    adapter.send(emails(3))
    adapter.send([email(1)])
    adapter.send(emails(3)[1:])
    assert resend_server.deliveries() == {"m1": 2, "m2": 2, "m3": 2}
    assert resend_server.replays == 0


def test_a_key_used_with_another_body_is_refused_as_resend_does(resend_server):
    adapter = ResendProvider.from_env({**SETTINGS, "RESEND_BASE_URL": resend_server.url})
    adapter.send([email(1)])
    [result] = adapter.send([email(1, subject="Changed")])
    assert (result.outcome, "invalid_idempotent_request" in result.error) == (Outcome.PERMANENT, True)
    assert resend_server.deliveries() == {"m1": 1}


def test_resend_deduplicates_a_repeated_call_not_a_message():
    assert registry.deduplicates_calls("resend")
    assert not ResendProvider.idempotent
    assert not registry.deduplicates_calls("postmark")
