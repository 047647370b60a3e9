"""Twilio Messages against a local server: form encoding, Basic auth, error codes."""

from __future__ import annotations

import base64
import json

import pytest
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from providers.base import STATUS_CALLBACK_URL, ConfigurationError, Outbound, Outcome, PermanentError, RateLimited
from providers.twilio import TwilioProvider

SID = "AC0123456789abcdef0123456789abcdef"
SETTINGS = {"TWILIO_ACCOUNT_SID": SID, "TWILIO_AUTH_TOKEN": "secret-token", "TWILIO_FROM": "+15005550006"}
PATH = f"/2010-04-01/Accounts/{SID}/Messages.json"
BASIC = "Basic " + base64.b64encode(f"{SID}:secret-token".encode()).decode()


def sms(n: int = 1, **fields) -> Outbound:
    return Outbound(f"m{n}", "sms", f"+1415555{n:04d}", None, f"Your code is {n}", None, **fields)


def created(sid: str = "SM1a2b3c4d5e6f708192a3b4c5d6e7f801") -> dict:
    return {
        "sid": sid,
        "status": "queued",
        "to": "+14155550001",
        "from": "+15005550006",
        "body": "Your code is 1",
    }


def twilio_error(code: int, status: int = 400) -> Response:
    body = {
        "code": code,
        "message": "details",
        "more_info": f"https://www.twilio.com/docs/errors/{code}",
        "status": status,
    }
    return Response(json.dumps(body), status, content_type="application/json")


@pytest.fixture
def adapter(httpserver: HTTPServer) -> TwilioProvider:
    return TwilioProvider.from_env({**SETTINGS, "TWILIO_BASE_URL": httpserver.url_for("")})


def test_a_message_is_a_form_post_with_basic_auth(httpserver, adapter):
    seen: list[Request] = []

    def answer(request: Request) -> Response:
        seen.append(request)
        return Response(json.dumps(created()), 201, content_type="application/json")

    httpserver.expect_request(PATH, method="POST", headers={"Authorization": BASIC}).respond_with_handler(answer)
    [result] = adapter.send([sms(1)])
    assert (result.outcome, result.provider_message_id) == (
        Outcome.SENT,
        "SM1a2b3c4d5e6f708192a3b4c5d6e7f801",
    )
    assert seen[0].content_type == "application/x-www-form-urlencoded"
    assert seen[0].form.to_dict() == {"To": "+14155550001", "From": "+15005550006", "Body": "Your code is 1"}


def test_a_messaging_service_replaces_the_from_number(httpserver):
    adapter = TwilioProvider.from_env(
        {
            "TWILIO_ACCOUNT_SID": SID,
            "TWILIO_AUTH_TOKEN": "secret-token",
            "TWILIO_MESSAGING_SERVICE_SID": "MG0123",
            "TWILIO_BASE_URL": httpserver.url_for(""),
        }
    )
    httpserver.expect_request(PATH).respond_with_json(created(), status=201)
    adapter.send([sms(1)])
    form = httpserver.log[0][0].form
    assert (form.get("MessagingServiceSid"), form.get("From")) == ("MG0123", None)


def test_each_message_asks_for_its_status_at_our_url_with_its_id(httpserver):
    """Twilio echoes no metadata: the status callback URL carries our id back, signed with it."""
    callback = "https://tidings.example.com/v1/inbound/twilio/acme"
    adapter = TwilioProvider.from_env(
        {**SETTINGS, "TWILIO_BASE_URL": httpserver.url_for(""), STATUS_CALLBACK_URL: callback}
    )
    httpserver.expect_request(PATH).respond_with_json(created(), status=201)
    adapter.send([sms(1), sms(2)])
    forms = [request.form for request, _ in httpserver.log]
    assert [form.get("StatusCallback") for form in forms] == [
        callback + "?tidings_message_id=m1",
        callback + "?tidings_message_id=m2",
    ]


def test_a_callback_url_with_a_query_keeps_it():
    adapter = TwilioProvider.from_env({**SETTINGS, STATUS_CALLBACK_URL: "https://t.example.com/hook?a=1"})
    assert adapter.form(sms(7))["StatusCallback"] == "https://t.example.com/hook?a=1&tidings_message_id=m7"


def test_without_a_callback_url_twilio_reports_where_it_was_configured(adapter):
    """No StatusCallback: the messaging service's (or number's) own callback stays in force."""
    assert "StatusCallback" not in adapter.form(sms(1))


def test_one_request_per_message():
    assert TwilioProvider.max_batch == 1


@pytest.mark.parametrize(
    ("code", "status", "kind", "suppress"),
    [
        (21211, 400, PermanentError, False),  # invalid To
        (21614, 400, PermanentError, False),  # not a mobile number
        (21610, 400, PermanentError, True),  # the recipient replied STOP
        (21408, 400, PermanentError, False),
        (20003, 401, ConfigurationError, False),
        (21606, 400, ConfigurationError, False),
        (20404, 404, ConfigurationError, False),
        (20429, 429, RateLimited, False),
        (21611, 400, RateLimited, False),
    ],
)
def test_error_codes(httpserver, adapter, code, status, kind, suppress):
    httpserver.expect_request(PATH).respond_with_response(twilio_error(code, status))
    if kind.provider_wide:
        with pytest.raises(kind, match=f"Twilio {code}"):
            adapter.send([sms(1)])
        return
    [result] = adapter.send([sms(1)])
    assert (result.outcome, result.suppress) == (kind.outcome, suppress)
    assert result.error.startswith(f"Twilio {code}")


def test_server_errors_are_transient(httpserver, adapter):
    httpserver.expect_request(PATH).respond_with_data("upstream unavailable", 503)
    assert adapter.send([sms(1)])[0].outcome is Outcome.TRANSIENT


@pytest.mark.parametrize("missing", ["TWILIO_ACCOUNT_SID", "TWILIO_AUTH_TOKEN", "TWILIO_FROM"])
def test_settings(missing):
    with pytest.raises(ValueError, match=f"{missing} is not set"):
        TwilioProvider.from_env({k: v for k, v in SETTINGS.items() if k != missing})
