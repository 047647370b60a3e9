"""Resend's webhooks (Svix / Standard Webhooks signatures): good, bad, stale and replayed."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import text
from sqlalchemy.orm import Session

from app.delivery import store
from app.enums import MessageStatus
from tests.api.inbound.conftest import (
    as_body,
    inbound_events,
    left_unknown,
    resend_headers,
    resolved,
    sent,
    suppressions,
)
from tests.conftest import email

URL = "/v1/inbound/resend"


def resend_event(kind: str, email_id: str, message_id: str | None = None, **data) -> dict:
    tags = {"tidings_message_id": message_id} if message_id else {}
    return {
        "type": kind,
        "created_at": "2030-01-01T10:00:00.000Z",
        "data": {"email_id": email_id, "to": ["ada@example.com"], "subject": "Hello", "tags": tags, **data},
    }


@pytest.fixture
def message(project, engine) -> str:
    return sent(project, engine, "resend", "re-email-1", email(to="ada@example.com"))


def test_delivered_is_applied_with_the_raw_payload(inbound, project, message):
    body = as_body(resend_event("email.delivered", "re-email-1", message))
    answer = inbound.post(URL, data=body, headers=resend_headers(body))
    assert answer.status_code == 200
    assert answer.get_json() == {"received": 1, "applied": 1, "duplicates": 0, "unmatched": 0}
    assert project.get(message).get_json()["status"] == "delivered"
    [event] = inbound_events(project, message)
    assert event["type"] == "delivered"
    assert event["data"]["provider"] == "resend"
    assert event["data"]["provider_event"] == "email.delivered"
    assert event["data"]["raw"] == resend_event("email.delivered", "re-email-1", message)


def test_the_message_is_found_by_resend_s_id_when_our_tag_is_missing(inbound, project, message):
    body = as_body(resend_event("email.opened", "re-email-1"))
    assert inbound.post(URL, data=body, headers=resend_headers(body)).get_json()["applied"] == 1
    assert [e["type"] for e in inbound_events(project, message)] == ["opened"]
    assert project.get(message).get_json()["status"] == "sent"  # an open changes no status


def test_a_permanent_bounce_bounces_the_message_and_suppresses_the_address(inbound, project, message):
    bounce = {"message": "mailbox does not exist", "subType": "General", "type": "Permanent"}
    body = as_body(resend_event("email.bounced", "re-email-1", message, bounce=bounce))
    assert inbound.post(URL, data=body, headers=resend_headers(body)).status_code == 200
    assert project.get(message).get_json()["status"] == "bounced"
    [event] = inbound_events(project, message)
    assert (event["type"], event["data"]["bounce"], event["data"]["suppressed"]) == ("bounced", "hard", "bounce")
    assert suppressions(project) == [("email", "ada@example.com", "bounce")]


def test_a_complaint_suppresses_as_a_complaint(inbound, project, message):
    body = as_body(resend_event("email.complained", "re-email-1", message))
    inbound.post(URL, data=body, headers=resend_headers(body))
    assert project.get(message).get_json()["status"] == "complained"
    assert suppressions(project) == [("email", "ada@example.com", "complaint")]


def test_an_event_name_we_do_not_know_is_kept_as_unknown(inbound, project, message):
    body = as_body(resend_event("email.teleported", "re-email-1", message))
    assert inbound.post(URL, data=body, headers=resend_headers(body)).get_json()["applied"] == 1
    [event] = inbound_events(project, message)
    assert (event["type"], event["data"]["provider_event"]) == ("unknown", "email.teleported")
    assert project.get(message).get_json()["status"] == "sent"


def test_sent_is_acknowledged_and_not_recorded(inbound, project, message):
    body = as_body(resend_event("email.sent", "re-email-1", message))
    assert inbound.post(URL, data=body, headers=resend_headers(body)).get_json()["received"] == 0
    assert inbound_events(project, message) == []


def test_a_replay_is_a_200_no_op(inbound, project, message):
    body = as_body(resend_event("email.delivered", "re-email-1", message))
    headers = resend_headers(body, event_id="msg_replayed")
    assert inbound.post(URL, data=body, headers=headers).get_json()["applied"] == 1
    again = inbound.post(URL, data=body, headers=resend_headers(body, event_id="msg_replayed"))
    assert again.status_code == 200
    assert again.get_json() == {"received": 1, "applied": 0, "duplicates": 1, "unmatched": 0}
    assert len(inbound_events(project, message)) == 1


def test_an_unknown_message_is_delivered_by_our_tag_and_learns_resend_s_id(inbound, project, engine):
    unknown = left_unknown(project, engine, "resend", email(to="ada@example.com"))
    body = as_body(resend_event("email.delivered", "re-never-recorded", unknown))
    answer = inbound.post(URL, data=body, headers=resend_headers(body))
    assert answer.get_json() == {"received": 1, "applied": 1, "duplicates": 0, "unmatched": 0}
    assert resolved(project, unknown) == ("delivered", "re-never-recorded", [("delivered", "unknown")])


def test_a_message_still_sending_is_settled_too(inbound, project, engine):
    """Its worker died and the sweeper has not yet made it `unknown`: the report, applied once,
    would never come again, so it settles the message now."""
    sending = sent(project, engine, "resend", None, email(to="ada@example.com"), status="sending")
    worker = "host:1:alive"
    with engine.begin() as connection:
        connection.execute(text("UPDATE messages SET claimed_by = :w WHERE id = :id"), {"w": worker, "id": sending})
    body = as_body(resend_event("email.bounced", "re-3", sending, bounce={"type": "Permanent"}))
    assert inbound.post(URL, data=body, headers=resend_headers(body)).get_json()["applied"] == 1
    assert resolved(project, sending) == ("bounced", "re-3", [("bounced", "sending")])
    # A worker that was alive after all finalises only messages still `sending`: the report stands.
    with Session(engine) as session, session.begin():
        retry = store.Finalised(sending, MessageStatus.RETRYING, error="ambiguous: read timeout")
        assert store.finalise(session, [retry], worker) == []
    assert resolved(project, sending) == ("bounced", "re-3", [("bounced", "sending")])


def test_a_failure_report_settles_an_unknown_message_as_failed(inbound, project, engine, message):
    """Resend took it and did not send it; a `sent` message keeps its status, as before."""
    unknown = left_unknown(project, engine, "resend", email(to="ada@example.com"))
    for event in (resend_event("email.failed", "re-2", unknown), resend_event("email.failed", "re-email-1", message)):
        body = as_body(event)
        assert inbound.post(URL, data=body, headers=resend_headers(body)).get_json()["applied"] == 1
    assert resolved(project, unknown) == ("failed", "re-2", [("failed", "unknown")])
    assert resolved(project, message) == ("sent", "re-email-1", [("failed", None)])


@pytest.mark.parametrize("tag", ["not-a-uuid", "'; DROP TABLE messages; --", "0" * 40])
def test_a_tag_that_is_no_message_id_is_ignored(inbound, project, engine, tag):
    unknown = left_unknown(project, engine, "resend", email(to="ada@example.com"))
    body = as_body(resend_event("email.bounced", "re-stranger", tag, bounce={"type": "Permanent"}))
    answer = inbound.post(URL, data=body, headers=resend_headers(body))
    assert (answer.status_code, answer.get_json()["unmatched"]) == (200, 1)
    assert resolved(project, unknown) == ("unknown", None, [])


def assert_untouched(project, engine, message: str) -> None:
    assert project.get(message).get_json()["status"] == "sent"
    assert inbound_events(project, message) == []
    assert suppressions(project) == []
    with engine.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM inbound_receipts WHERE key = 'msg_x'")).scalar() == 0


def test_a_bad_signature_is_401_and_changes_nothing(inbound, project, engine, message):
    body = as_body(resend_event("email.bounced", "re-email-1", message, bounce={"type": "Permanent"}))
    headers = resend_headers(body, event_id="msg_x")
    tampered = body.replace(b"Hello", b"Hullo")
    assert inbound.post(URL, data=tampered, headers=headers).status_code == 401
    headers["svix-signature"] = "v1," + "A" * 44
    assert inbound.post(URL, data=body, headers=headers).status_code == 401
    assert inbound.post(URL, data=body, headers={"Content-Type": "application/json"}).status_code == 401
    assert_untouched(project, engine, message)


def test_a_stale_timestamp_is_400_and_changes_nothing(inbound, project, engine, message):
    body = as_body(resend_event("email.bounced", "re-email-1", message, bounce={"type": "Permanent"}))
    answer = inbound.post(URL, data=body, headers=resend_headers(body, event_id="msg_x", at=time.time() - 301))
    assert answer.status_code == 400
    assert "timestamp" in answer.get_json()["message"]
    assert_untouched(project, engine, message)


def test_an_unknown_provider_or_one_without_webhook_settings_is_404(inbound, client):
    json_type = {"Content-Type": "application/json"}
    assert inbound.post("/v1/inbound/pigeon", data=b"{}", headers=json_type).status_code == 404
    body = as_body(resend_event("email.delivered", "re-email-1"))
    answer = client.post(URL, data=body, headers=resend_headers(body))  # the suite's API: no RESEND_WEBHOOK_SECRET
    assert answer.status_code == 404
    assert answer.get_json()["message"] == "No resend status webhooks are set up for this deployment."
