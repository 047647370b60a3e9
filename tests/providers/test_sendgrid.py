"""SendGrid v3 mail send against a local server: personalizations, grouping, 202, errors."""

from __future__ import annotations

import json
import time

import pytest
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from providers.base import ConfigurationError, Outcome, RateLimited, TransientError
from providers.sendgrid import SendGridProvider
from tests.providers.helpers import FILES, email, emails

SETTINGS = {"SENDGRID_API_KEY": "SG.test", "EMAIL_FROM": "Acme <hello@acme.test>"}


def accepted(message_id: str = "sg-request-1") -> Response:
    return Response("", 202, {"X-Message-Id": message_id})


@pytest.fixture
def adapter(httpserver: HTTPServer) -> SendGridProvider:
    return SendGridProvider.from_env({**SETTINGS, "SENDGRID_BASE_URL": httpserver.url_for("")})


def test_one_email_is_one_personalization(httpserver, adapter):
    httpserver.expect_oneshot_request(
        "/v3/mail/send",
        method="POST",
        headers={"Authorization": "Bearer SG.test"},
        json={
            "personalizations": [
                {
                    "to": [{"email": "user1@example.com"}],
                    "subject": "Hello 1",
                    "custom_args": {"tidings_message_id": "m1"},
                    "headers": {"List-Unsubscribe": "<https://acme.test/u/1>"},
                }
            ],
            "from": {"email": "hello@acme.test", "name": "Acme"},
            "reply_to": {"email": "help@acme.test"},
            "content": [
                {"type": "text/plain", "value": "Hi there"},
                {"type": "text/html", "value": "<p>Hi there</p>"},
            ],
        },
    ).respond_with_response(accepted("14c5d75ce93"))
    message = email(1, reply_to="help@acme.test", headers={"List-Unsubscribe": "<https://acme.test/u/1>"})
    [result] = adapter.send([message])
    # 202: accepted for delivery; the X-Message-Id names the request, events refine it.
    assert (result.outcome, result.provider_message_id) == (Outcome.SENT, "14c5d75ce93")
    httpserver.check_assertions()


def test_a_batch_is_one_request_per_distinct_content(httpserver, adapter):
    bodies: list[dict] = []

    def answer(request: Request) -> Response:
        bodies.append(request.get_json())
        return accepted(f"req-{len(bodies)}")

    httpserver.expect_request("/v3/mail/send").respond_with_handler(answer)
    campaign = emails(3, text="Same for all", html=None)
    personal = email(4, text="Just for you", html=None)
    results = adapter.send([*campaign, personal])
    assert [(r.message_id, r.provider_message_id) for r in results] == [
        ("m1", "req-1"),
        ("m2", "req-1"),
        ("m3", "req-1"),
        ("m4", "req-2"),
    ]
    assert [len(b["personalizations"]) for b in bodies] == [3, 1]
    assert bodies[0]["content"] == [{"type": "text/plain", "value": "Same for all"}]
    assert [p["subject"] for p in bodies[0]["personalizations"]] == ["Hello 1", "Hello 2", "Hello 3"]
    # Each personalization's custom_args name its message in SendGrid's events.
    assert [p["custom_args"] for b in bodies for p in b["personalizations"]] == [
        {"tidings_message_id": f"m{n}"} for n in (1, 2, 3, 4)
    ]


def test_max_batch_is_one_thousand_personalizations(httpserver, adapter):
    httpserver.expect_request("/v3/mail/send").respond_with_response(accepted())
    assert SendGridProvider.max_batch == 1000
    adapter.send(emails(1000, text="Same", html=None))
    assert len(httpserver.log) == 1
    assert len(httpserver.log[0][0].get_json()["personalizations"]) == 1000


def test_an_invalid_recipient_fails_alone_and_the_rest_goes_again(httpserver, adapter):
    calls: list[list[str]] = []

    def answer(request: Request) -> Response:
        recipients = [p["to"][0]["email"] for p in request.get_json()["personalizations"]]
        calls.append(recipients)
        if "bad@" in recipients:
            field = f"personalizations.{recipients.index('bad@')}.to.0.email"
            errors = {"errors": [{"message": "Does not contain a valid address.", "field": field, "help": None}]}
            return Response(json.dumps(errors), 400)
        return accepted()

    httpserver.expect_request("/v3/mail/send").respond_with_handler(answer)
    batch = [
        email(1, text="T", html=None),
        email(2, to="bad@", text="T", html=None),
        email(3, text="T", html=None),
    ]
    results = adapter.send(batch)
    assert [(r.message_id, r.outcome) for r in results] == [
        ("m2", Outcome.PERMANENT),
        ("m1", Outcome.SENT),
        ("m3", Outcome.SENT),
    ]
    assert "Does not contain a valid address" in results[0].error
    assert calls == [
        ["user1@example.com", "bad@", "user3@example.com"],
        ["user1@example.com", "user3@example.com"],
    ]


def test_a_request_wide_400_fails_its_group_only(httpserver, adapter):
    def answer(request: Request) -> Response:
        if request.get_json()["content"][0]["value"] == "broken":
            errors = {"errors": [{"message": "The content value must be a string.", "field": "content.0.value"}]}
            return Response(json.dumps(errors), 400)
        return accepted()

    httpserver.expect_request("/v3/mail/send").respond_with_handler(answer)
    results = adapter.send([email(1, text="broken", html=None), email(2, text="fine", html=None)])
    assert [(r.message_id, r.outcome) for r in results] == [("m1", Outcome.PERMANENT), ("m2", Outcome.SENT)]


@pytest.mark.parametrize(
    ("status", "body", "kind"),
    [
        (
            401,
            {"errors": [{"message": "The provided authorization grant is invalid, expired, or revoked"}]},
            ConfigurationError,
        ),
        (
            403,
            {
                "errors": [
                    {
                        "message": "The from address does not match a verified Sender Identity.",
                        "field": "from",
                    }
                ]
            },
            ConfigurationError,
        ),
        (500, {"errors": [{"message": "Internal server error"}]}, TransientError),
    ],
)
def test_account_and_server_errors(httpserver, adapter, status, body, kind):
    httpserver.expect_request("/v3/mail/send").respond_with_json(body, status=status)
    if kind.provider_wide:
        with pytest.raises(kind, match=body["errors"][0]["message"][:20]):
            adapter.send(emails(2))
    else:
        assert {r.outcome for r in adapter.send(emails(2))} == {kind.outcome}


def test_429_waits_until_x_ratelimit_reset(httpserver, adapter):
    reset = str(int(time.time()) + 30)
    httpserver.expect_request("/v3/mail/send").respond_with_json(
        {"errors": [{"message": "too many requests"}]}, status=429, headers={"X-RateLimit-Reset": reset}
    )
    with pytest.raises(RateLimited) as raised:
        adapter.send(emails(2))
    assert 25 <= raised.value.retry_after <= 30


def test_a_rate_limit_after_a_first_group_went_out_keeps_it_sent(httpserver, adapter):
    httpserver.expect_ordered_request("/v3/mail/send").respond_with_response(accepted("first"))
    httpserver.expect_ordered_request("/v3/mail/send").respond_with_json(
        {"errors": [{"message": "too many requests"}]}, status=429, headers={"Retry-After": "5"}
    )
    results = adapter.send([email(1, text="a"), email(2, text="b"), email(3, text="c")])
    assert [(r.message_id, r.outcome, r.retry_after) for r in results] == [
        ("m1", Outcome.SENT, None),
        ("m2", Outcome.RATE_LIMITED, 5.0),
        ("m3", Outcome.RATE_LIMITED, 5.0),
    ]
    assert len(httpserver.log) == 2


@pytest.mark.parametrize("missing", ["SENDGRID_API_KEY", "EMAIL_FROM"])
def test_settings(missing):
    with pytest.raises(ValueError, match=f"{missing} is not set"):
        SendGridProvider.from_env({k: v for k, v in SETTINGS.items() if k != missing})


def test_attachments_belong_to_the_request_and_recipients_of_the_same_files_share_it(httpserver, adapter):
    bodies: list[dict] = []

    def answer(request: Request) -> Response:
        bodies.append(request.get_json())
        return accepted(f"req-{len(bodies)}")

    httpserver.expect_request("/v3/mail/send").respond_with_handler(answer)
    same = dict(text="Your invoice", html=None, attachments=FILES, cc="zoe@example.com")
    results = adapter.send([email(1, **same), email(2, **same), email(3, text="Your invoice", html=None)])
    assert [(r.message_id, r.provider_message_id) for r in results] == [
        ("m1", "req-1"),
        ("m2", "req-1"),
        ("m3", "req-2"),
    ]
    with_files, without = bodies
    assert with_files["attachments"] == [
        {"content": "JVBERi0xLjQK", "type": "application/pdf", "filename": "invoice.pdf", "disposition": "attachment"}
    ]
    assert len(with_files["personalizations"]) == 2
    assert all("cc" not in p and "Cc" not in p.get("headers", {}) for p in with_files["personalizations"])
    assert "attachments" not in without


def test_several_reply_to_addresses_go_in_reply_to_list(httpserver, adapter):
    bodies: list[dict] = []

    def answer(request: Request) -> Response:
        bodies.append(request.get_json())
        return accepted()

    httpserver.expect_request("/v3/mail/send").respond_with_handler(answer)
    adapter.send([email(1, reply_to="help@acme.test, Acme Orders <orders@acme.test>")])
    [body] = bodies
    assert "reply_to" not in body
    assert body["reply_to_list"] == [{"email": "help@acme.test"}, {"email": "orders@acme.test", "name": "Acme Orders"}]
