"""Postmark against a local server speaking its API: per-message ErrorCodes in a 200 batch."""

from __future__ import annotations

import json
import uuid

import pytest
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from providers.base import ConfigurationError, Outcome, PermanentError, RateLimited, TransientError
from providers.bounded import ANSWER_LIMIT
from providers.postmark import PostmarkProvider
from tests.providers.helpers import FILES, email, emails

SETTINGS = {"POSTMARK_SERVER_TOKEN": "server-token", "EMAIL_FROM": "hello@acme.test"}
HEADERS = {"X-Postmark-Server-Token": "server-token", "Accept": "application/json"}


def ok(message_id: str, to: str) -> dict:
    return {
        "To": to,
        "SubmittedAt": "2024-05-01T10:00:00.0000000-04:00",
        "MessageID": message_id,
        "ErrorCode": 0,
        "Message": "OK",
    }


@pytest.fixture
def adapter(httpserver: HTTPServer) -> PostmarkProvider:
    return PostmarkProvider.from_env({**SETTINGS, "POSTMARK_BASE_URL": httpserver.url_for("")})


def test_one_email_posts_to_email(httpserver, adapter):
    httpserver.expect_oneshot_request(
        "/email",
        method="POST",
        headers=HEADERS,
        json={
            "From": "hello@acme.test",
            "To": "user1@example.com",
            "Subject": "Hello 1",
            "TextBody": "Hi there",
            "HtmlBody": "<p>Hi there</p>",
            "ReplyTo": "help@acme.test",
            "Headers": [{"Name": "List-Unsubscribe", "Value": "<https://acme.test/u/1>"}],
            "MessageStream": "outbound",
            "Metadata": {"tidings_message_id": "m1"},
        },
    ).respond_with_json(ok("b7bc2f4a-e38e-4336-af7d-e6c392c2f817", "user1@example.com"))
    message = email(1, reply_to="help@acme.test", headers={"List-Unsubscribe": "<https://acme.test/u/1>"})
    [result] = adapter.send([message])
    assert (result.outcome, result.provider_message_id) == (
        Outcome.SENT,
        "b7bc2f4a-e38e-4336-af7d-e6c392c2f817",
    )
    httpserver.check_assertions()


def test_the_message_stream_is_configurable(httpserver):
    adapter = PostmarkProvider.from_env(
        {**SETTINGS, "POSTMARK_BASE_URL": httpserver.url_for(""), "POSTMARK_MESSAGE_STREAM": "broadcast"}
    )
    seen: list[dict] = []

    def answer(request: Request) -> Response:
        seen.extend(request.get_json())
        return Response(json.dumps([ok(f"p{i}", m["To"]) for i, m in enumerate(request.get_json())]))

    httpserver.expect_request("/email/batch", method="POST", headers=HEADERS).respond_with_handler(answer)
    assert [r.outcome for r in adapter.send(emails(2))] == [Outcome.SENT, Outcome.SENT]
    assert [m["MessageStream"] for m in seen] == ["broadcast", "broadcast"]


def test_a_batch_maps_every_messages_error_code(httpserver, adapter):
    httpserver.expect_oneshot_request("/email/batch", method="POST").respond_with_json(
        [
            ok("p1", "user1@example.com"),
            {
                "ErrorCode": 406,
                "Message": "You tried to send to a recipient that has been marked as inactive.",
            },
            {"ErrorCode": 300, "Message": "Invalid 'To' address: 'user3@'."},
            ok("p4", "user4@example.com"),
        ]
    )
    results = adapter.send(emails(4))
    assert [(r.message_id, r.outcome, r.suppress, r.provider_message_id) for r in results] == [
        ("m1", Outcome.SENT, False, "p1"),
        ("m2", Outcome.PERMANENT, True, None),  # inactive recipient: suppress the address
        ("m3", Outcome.PERMANENT, False, None),
        ("m4", Outcome.SENT, False, "p4"),
    ]
    assert "406" in results[1].error


def test_a_batch_of_500_is_one_call(httpserver, adapter):
    def answer(request: Request) -> Response:
        return Response(json.dumps([ok(f"p{i}", m["To"]) for i, m in enumerate(request.get_json())]))

    httpserver.expect_oneshot_request("/email/batch").respond_with_handler(answer)
    batch = emails(PostmarkProvider.max_batch)
    assert PostmarkProvider.max_batch == 500
    assert {r.outcome for r in adapter.send(batch)} == {Outcome.SENT}
    assert len(httpserver.log) == 1
    # Each message's own Metadata names it in Postmark's webhooks.
    sent = httpserver.log[0][0].get_json()
    assert [m["Metadata"] for m in sent] == [{"tidings_message_id": m.message_id} for m in batch]


def test_a_batch_answer_longer_than_one_answers_cap_is_read_whole(httpserver, adapter):
    answers: list[bytes] = []

    def answer(request: Request) -> Response:
        # Postmark's MessageIDs are UUIDs: 500 answers take about 75 KB.
        body = [ok(str(uuid.UUID(int=i)), m["To"]) for i, m in enumerate(request.get_json())]
        answers.append(json.dumps(body).encode())
        return Response(answers[-1], content_type="application/json")

    httpserver.expect_oneshot_request("/email/batch").respond_with_handler(answer)
    results = adapter.send(emails(500))
    assert len(answers[0]) > ANSWER_LIMIT
    assert [r.provider_message_id for r in results] == [str(uuid.UUID(int=i)) for i in range(500)]


def test_an_endless_batch_answer_is_ambiguous(httpserver, adapter):
    httpserver.expect_oneshot_request("/email/batch").respond_with_data("[" + '{"ErrorCode": 0}, ' * 200_000)
    with pytest.raises(TransientError, match="answer over 66 KiB") as raised:
        adapter.send(emails(2))
    assert raised.value.ambiguous


def test_messages_missing_from_a_short_answer_are_transient(httpserver, adapter):
    httpserver.expect_oneshot_request("/email/batch").respond_with_json([ok("p1", "user1@example.com")])
    assert [r.outcome for r in adapter.send(emails(2))] == [Outcome.SENT, Outcome.TRANSIENT]


@pytest.mark.parametrize(
    ("code", "kind", "suppress"),
    [
        (300, PermanentError, False),
        (402, PermanentError, False),
        (406, PermanentError, True),
        (411, PermanentError, False),
        (100, TransientError, False),
        (400, ConfigurationError, False),
        (401, ConfigurationError, False),
        (405, ConfigurationError, False),
        (412, ConfigurationError, False),
        (413, ConfigurationError, False),
        (429, RateLimited, False),
        (9999, PermanentError, False),  # unknown code: the HTTP status (422) decides
    ],
)
def test_error_codes_of_a_single_send(httpserver, adapter, code, kind, suppress):
    httpserver.expect_request("/email").respond_with_json({"ErrorCode": code, "Message": "details"}, status=422)
    if kind.provider_wide:
        with pytest.raises(kind):
            adapter.send([email(1)])
        return
    [result] = adapter.send([email(1)])
    assert (result.outcome, result.suppress) == (kind.outcome, suppress)
    assert result.error == f"Postmark {code}: details"


def test_a_bad_token_fails_the_whole_batch_call(httpserver, adapter):
    httpserver.expect_request("/email/batch").respond_with_json(
        {
            "ErrorCode": 10,
            "Message": "The Server Token you provided in the X-Postmark-Server-Token request header was invalid.",
        },
        status=401,
    )
    with pytest.raises(ConfigurationError, match="Postmark 10"):
        adapter.send(emails(2))


def test_server_errors_are_transient(httpserver, adapter):
    httpserver.expect_request("/email/batch").respond_with_data("<html>down</html>", 503)
    with pytest.raises(TransientError):
        adapter.send(emails(2))


@pytest.mark.parametrize("missing", ["POSTMARK_SERVER_TOKEN", "EMAIL_FROM"])
def test_settings(missing):
    with pytest.raises(ValueError, match=f"{missing} is not set"):
        PostmarkProvider.from_env({k: v for k, v in SETTINGS.items() if k != missing})


def test_a_message_with_attachments_has_a_request_of_its_own(httpserver, adapter):
    singles: list[dict] = []
    batches: list[list[dict]] = []

    def single(request: Request) -> Response:
        singles.append(request.get_json())
        return Response(json.dumps(ok("p-files", request.get_json()["To"])))

    def batch(request: Request) -> Response:
        batches.append(request.get_json())
        return Response(json.dumps([ok(f"p{i}", m["To"]) for i, m in enumerate(request.get_json())]))

    httpserver.expect_request("/email", method="POST").respond_with_handler(single)
    httpserver.expect_request("/email/batch", method="POST").respond_with_handler(batch)
    results = adapter.send([email(1), email(2, attachments=FILES, cc="zoe@example.com"), email(3)])
    assert {r.message_id: r.provider_message_id for r in results} == {"m1": "p0", "m2": "p-files", "m3": "p1"}
    [with_files] = singles
    assert with_files["Attachments"] == [
        {"Name": "invoice.pdf", "Content": "JVBERi0xLjQK", "ContentType": "application/pdf"}
    ]
    assert "Cc" not in with_files  # Postmark's Cc would send to it; that address has its own message
    assert [[m["To"] for m in b] for b in batches] == [["user1@example.com", "user3@example.com"]]
    assert all("Attachments" not in m for m in batches[0])
