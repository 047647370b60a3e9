"""SendGrid's signed Event Webhook (ECDSA P-256 over timestamp and body): a batch of events,
good, bad, stale and replayed."""

from __future__ import annotations

import time
import uuid

import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from tests.api.inbound.conftest import (
    as_body,
    inbound_events,
    left_unknown,
    resolved,
    sendgrid_headers,
    sent,
    suppressions,
)
from tests.conftest import email

URL = "/v1/inbound/sendgrid"
X_MESSAGE_ID = "14c5d75ce93"  # what SendGrid answered for the request that carried both messages


def event(name: str, to: str, message_id: str | None = None, **fields) -> dict:
    body = {
        "email": to,
        "timestamp": 1513299569,
        "event": name,
        "sg_event_id": f"sg-{uuid.uuid4().hex}",
        "sg_message_id": f"{X_MESSAGE_ID}.filterdrecv-p3las1-16188-5A32D7A1-1.0",
        "smtp-id": "<14c5d75ce93.dfd.64b469@ismtpd-555>",
    }
    if message_id:
        body["tidings_message_id"] = message_id  # our custom_args come back at the top level
    return {**body, **fields}


@pytest.fixture
def messages(project, engine) -> tuple[str, str]:
    """Two messages of one SendGrid request: they share its X-Message-Id."""
    return (
        sent(project, engine, "sendgrid", X_MESSAGE_ID, email(to="ada@example.com")),
        sent(project, engine, "sendgrid", X_MESSAGE_ID, email(to="bo@example.com")),
    )


def test_a_batch_of_events_is_applied_each_to_its_message(inbound, project, messages, sendgrid_key):
    ada, bo = messages
    body = as_body(
        [
            event("processed", "ada@example.com", ada),
            event("delivered", "ada@example.com", ada),
            event("open", "ada@example.com", ada),
            # Without our id: found by SendGrid's id and the address, among the two sharing it.
            event("bounce", "Bo@Example.com", type="bounce", reason="550 5.1.1 no such user"),
        ]
    )
    answer = inbound.post(URL, data=body, headers=sendgrid_headers(sendgrid_key, body))
    assert answer.get_json() == {"received": 3, "applied": 3, "duplicates": 0, "unmatched": 0}
    assert project.get(ada).get_json()["status"] == "delivered"
    assert [e["type"] for e in inbound_events(project, ada)] == ["delivered", "opened"]
    assert project.get(bo).get_json()["status"] == "bounced"
    [bounced] = inbound_events(project, bo)
    assert (bounced["data"]["bounce"], bounced["data"]["raw"]["reason"]) == ("hard", "550 5.1.1 no such user")
    assert suppressions(project) == [("email", "bo@example.com", "bounce")]


def test_unknown_messages_are_settled_by_our_custom_args(inbound, project, engine, sendgrid_key):
    """Both messages of a request whose answer was lost: SendGrid's id for the request, which
    the events carry, is recorded for each; a dropped message fails."""
    ada = left_unknown(project, engine, "sendgrid", email(to="ada@example.com"))
    bo = left_unknown(project, engine, "sendgrid", email(to="bo@example.com"))
    body = as_body(
        [
            event("processed", "ada@example.com", ada),
            event("delivered", "ada@example.com", ada),
            event("dropped", "bo@example.com", bo, reason="Bounced Address"),
            event("delivered", "cy@example.com", "not-a-uuid"),
        ]
    )
    answer = inbound.post(URL, data=body, headers=sendgrid_headers(sendgrid_key, body))
    assert answer.get_json() == {"received": 3, "applied": 2, "duplicates": 0, "unmatched": 1}
    assert resolved(project, ada) == ("delivered", X_MESSAGE_ID, [("delivered", "unknown")])
    assert resolved(project, bo) == ("failed", X_MESSAGE_ID, [("failed", "unknown")])


def test_spam_reports_and_unsubscribes_suppress_blocks_do_not(inbound, project, messages, sendgrid_key):
    ada, bo = messages
    body = as_body(
        [
            event("spamreport", "ada@example.com", ada),
            event("bounce", "bo@example.com", bo, type="blocked"),
            event("group_unsubscribe", "bo@example.com", bo, asm_group_id=1),
        ]
    )
    inbound.post(URL, data=body, headers=sendgrid_headers(sendgrid_key, body))
    assert project.get(ada).get_json()["status"] == "complained"
    assert inbound_events(project, bo)[0]["data"]["bounce"] == "soft"
    assert sorted(suppressions(project)) == [
        ("email", "ada@example.com", "complaint"),
        ("email", "bo@example.com", "unsubscribe"),
    ]


def test_a_replayed_batch_is_a_200_no_op(inbound, project, messages, sendgrid_key):
    ada, _ = messages
    body = as_body([event("delivered", "ada@example.com", ada)])
    assert inbound.post(URL, data=body, headers=sendgrid_headers(sendgrid_key, body)).get_json()["applied"] == 1
    again = inbound.post(URL, data=body, headers=sendgrid_headers(sendgrid_key, body))
    assert again.status_code == 200
    assert again.get_json() == {"received": 1, "applied": 0, "duplicates": 1, "unmatched": 0}
    assert len(inbound_events(project, ada)) == 1


def test_a_bad_signature_is_401_and_changes_nothing(inbound, project, messages, sendgrid_key):
    ada, _ = messages
    body = as_body([event("spamreport", "ada@example.com", ada)])
    impostor = ec.generate_private_key(ec.SECP256R1())
    assert inbound.post(URL, data=body, headers=sendgrid_headers(impostor, body)).status_code == 401
    headers = sendgrid_headers(sendgrid_key, body)
    assert inbound.post(URL, data=body.replace(b"spamreport", b"delivered"), headers=headers).status_code == 401
    headers["X-Twilio-Email-Event-Webhook-Timestamp"] = str(int(time.time()) + 1)  # the signed time, altered
    assert inbound.post(URL, data=body, headers=headers).status_code == 401
    assert inbound.post(URL, data=body, headers={"Content-Type": "application/json"}).status_code == 401
    assert project.get(ada).get_json()["status"] == "sent"
    assert inbound_events(project, ada) == [] and suppressions(project) == []


def test_a_stale_timestamp_is_400_and_changes_nothing(inbound, project, messages, sendgrid_key):
    ada, _ = messages
    body = as_body([event("spamreport", "ada@example.com", ada)])
    answer = inbound.post(URL, data=body, headers=sendgrid_headers(sendgrid_key, body, at=time.time() - 600))
    assert answer.status_code == 400
    assert project.get(ada).get_json()["status"] == "sent"
    assert inbound_events(project, ada) == [] and suppressions(project) == []
    fresh = inbound.post(URL, data=body, headers=sendgrid_headers(sendgrid_key, body))
    assert fresh.get_json()["applied"] == 1  # the refused request left no receipt behind
