"""Twilio's status callbacks (X-Twilio-Signature over the public URL and the form): good,
bad and replayed. Twilio sends no timestamp, so there is no staleness to check."""

from __future__ import annotations

import uuid
from dataclasses import replace
from urllib.parse import urlsplit

import pytest
from pytest_httpserver import HTTPServer

from app.delivery import adapters
from providers.base import Outbound
from tasks.celery_app import configure
from tests.api.inbound.conftest import (
    PUBLIC_URL,
    TWILIO_TOKEN,
    inbound_events,
    left_unknown,
    resolved,
    sent,
    suppressions,
    twilio_signature,
)

PATH = "/v1/inbound/twilio"
PHONE = "+4915112345678"


@pytest.fixture
def sid() -> str:
    return "SM" + uuid.uuid4().hex


@pytest.fixture
def message(project, engine, sid) -> str:
    return sent(project, engine, "twilio", sid, {"channel": "sms", "to": {"phone": PHONE}, "content": {"text": "Hi"}})


def callback(sid: str, status: str, **extra: str) -> dict[str, str]:
    return {
        "AccountSid": "AC123",
        "ApiVersion": "2010-04-01",
        "From": "+15005550006",
        "MessageSid": sid,
        "MessageStatus": status,
        "SmsSid": sid,
        "SmsStatus": status,
        "To": PHONE,
        **extra,
    }


def post(inbound, form: dict[str, str], url: str = PUBLIC_URL + PATH, token: str | None = None):
    signature = twilio_signature(url, form, token) if token else twilio_signature(url, form)
    return inbound.post(path_of(url), data=form, headers={"X-Twilio-Signature": signature})


def path_of(url: str) -> str:
    """What the test client is asked for: the path and query of the URL Twilio called."""
    parts = urlsplit(url)
    return f"{parts.path}?{parts.query}" if parts.query else parts.path


def our_callback(message_id: str) -> str:
    """The StatusCallback the adapter names for a message (providers/twilio.py)."""
    return f"{PUBLIC_URL}{PATH}?tidings_message_id={message_id}"


@pytest.fixture
def unknown(project, engine) -> str:
    return left_unknown(
        project, engine, "twilio", {"channel": "sms", "to": {"phone": PHONE}, "content": {"text": "Hi"}}
    )


def test_delivered_is_applied(inbound, project, message, sid):
    answer = post(inbound, callback(sid, "delivered"))
    assert answer.get_json() == {"received": 1, "applied": 1, "duplicates": 0, "unmatched": 0}
    assert project.get(message).get_json()["status"] == "delivered"
    [event] = inbound_events(project, message)
    assert (event["type"], event["data"]["raw"]["MessageStatus"]) == ("delivered", "delivered")


def test_an_unknown_message_is_delivered_by_the_id_in_its_callback_url(inbound, project, unknown, sid):
    answer = post(inbound, callback(sid, "delivered"), url=our_callback(unknown))
    assert answer.get_json() == {"received": 1, "applied": 1, "duplicates": 0, "unmatched": 0}
    assert resolved(project, unknown) == ("delivered", sid, [("delivered", "unknown")])


def test_the_callback_the_engine_s_adapter_names_settles_the_message(
    inbound, project, unknown, sid, migrated, httpserver: HTTPServer
):
    """The adapter as the engine builds it (TIDINGS_PUBLIC_URL set) against a local Twilio:
    the StatusCallback it names is one this API verifies, and it finds the message."""
    account = {
        "TWILIO_ACCOUNT_SID": "AC123",
        "TWILIO_AUTH_TOKEN": TWILIO_TOKEN,
        "TWILIO_FROM": "+15005550006",
        "TWILIO_BASE_URL": httpserver.url_for(""),
    }
    httpserver.expect_request("/2010-04-01/Accounts/AC123/Messages.json").respond_with_json(
        {"sid": sid, "status": "queued", "to": PHONE}, status=201
    )
    configure(replace(migrated, external_url=PUBLIC_URL, environ={**migrated.environ, **account}))
    adapters.clear()
    try:
        adapters.provider_instance("twilio").send([Outbound(unknown, "sms", PHONE, None, "Hi")])
    finally:
        configure(migrated)
        adapters.clear()
    named = httpserver.log[0][0].form["StatusCallback"]
    assert named == our_callback(unknown)
    assert post(inbound, callback(sid, "delivered"), url=named).get_json()["applied"] == 1
    assert resolved(project, unknown) == ("delivered", sid, [("delivered", "unknown")])


def test_an_unknown_message_undelivered_to_a_landline_bounces(inbound, project, unknown, sid):
    post(inbound, callback(sid, "undelivered", ErrorCode="30006"), url=our_callback(unknown))
    assert resolved(project, unknown) == ("bounced", sid, [("bounced", "unknown")])
    assert suppressions(project) == [("sms", PHONE, "bounce")]


def test_an_id_in_the_url_is_only_as_good_as_its_signature(inbound, project, unknown, sid):
    """Twilio signs the URL it calls: an id added to it by anyone else breaks the signature."""
    form = callback(sid, "delivered")
    signature = twilio_signature(PUBLIC_URL + PATH, form)
    answer = inbound.post(path_of(our_callback(unknown)), data=form, headers={"X-Twilio-Signature": signature})
    assert answer.status_code == 401
    assert resolved(project, unknown) == ("unknown", None, [])


def test_an_id_in_the_url_that_is_no_uuid_is_ignored(inbound, project, unknown, sid):
    answer = post(inbound, callback(sid, "delivered"), url=our_callback("%27%3B--"))
    assert (answer.status_code, answer.get_json()["unmatched"]) == (200, 1)
    assert resolved(project, unknown) == ("unknown", None, [])


def test_the_url_may_be_signed_with_the_default_port_written_out(inbound, project, message, sid):
    answer = post(inbound, callback(sid, "delivered"), url="https://tidings.example.com:443" + PATH)
    assert answer.get_json()["applied"] == 1


def test_undelivered_to_a_landline_is_a_hard_bounce(inbound, project, message, sid):
    post(inbound, callback(sid, "undelivered", ErrorCode="30006"))
    assert project.get(message).get_json()["status"] == "bounced"
    assert inbound_events(project, message)[0]["data"]["bounce"] == "hard"
    assert suppressions(project) == [("sms", PHONE, "bounce")]


def test_a_failure_because_the_recipient_replied_stop_suppresses_as_an_unsubscribe(inbound, project, message, sid):
    post(inbound, callback(sid, "failed", ErrorCode="21610"))
    assert [e["type"] for e in inbound_events(project, message)] == ["unsubscribed"]
    assert suppressions(project) == [("sms", PHONE, "unsubscribe")]


def test_intermediate_statuses_are_acknowledged_and_not_recorded(inbound, project, message, sid):
    for status in ("queued", "sending", "sent"):
        assert post(inbound, callback(sid, status)).get_json()["received"] == 0
    assert inbound_events(project, message) == []


def test_a_replay_is_a_200_no_op(inbound, project, message, sid):
    assert post(inbound, callback(sid, "delivered")).get_json()["applied"] == 1
    again = post(inbound, callback(sid, "delivered"))
    assert (again.status_code, again.get_json()["duplicates"]) == (200, 1)
    assert len(inbound_events(project, message)) == 1


def test_a_bad_signature_is_401_and_changes_nothing(inbound, project, message, sid):
    form = callback(sid, "undelivered", ErrorCode="30006")
    assert post(inbound, form, token="another-accounts-token").status_code == 401
    assert post(inbound, form, url="https://elsewhere.example.com" + PATH).status_code == 401
    signature = twilio_signature(PUBLIC_URL + PATH, form)
    tampered = {**form, "ErrorCode": "30005"}
    assert inbound.post(PATH, data=tampered, headers={"X-Twilio-Signature": signature}).status_code == 401
    assert inbound.post(PATH, data=form).status_code == 401
    assert project.get(message).get_json()["status"] == "sent"
    assert inbound_events(project, message) == [] and suppressions(project) == []
