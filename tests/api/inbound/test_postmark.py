"""Postmark's webhooks (Basic auth credentials in the URL): good, bad and replayed. Postmark
signs nothing and sends no timestamp, so there is no staleness to check."""

from __future__ import annotations

import random

import pytest

from tests.api.inbound.conftest import (
    as_body,
    inbound_events,
    left_unknown,
    postmark_headers,
    resolved,
    sent,
    suppressions,
)
from tests.conftest import email

URL = "/v1/inbound/postmark"


@pytest.fixture
def message(project, engine) -> str:
    return sent(project, engine, "postmark", "pm-0001", email(to="ada@example.com"))


def delivery(message_id: str) -> dict:
    return {
        "RecordType": "Delivery",
        "ServerID": 23,
        "MessageStream": "outbound",
        "MessageID": "pm-0001",
        "Recipient": "ada@example.com",
        "DeliveredAt": "2030-01-01T10:00:00Z",
        "Details": "Test delivery webhook details",
        "Metadata": {"tidings_message_id": message_id},
    }


def bounce(message_id: str, kind: str = "HardBounce", inactive: bool = True) -> dict:
    return {
        "RecordType": "Bounce",
        "ID": random.randrange(1, 2**62),  # unique per bounce at Postmark
        "Type": kind,
        "TypeCode": 1,
        "MessageID": "pm-0001",
        "Email": "ada@example.com",
        "BouncedAt": "2030-01-01T10:00:00Z",
        "Inactive": inactive,
        "Metadata": {"tidings_message_id": message_id},
    }


def test_a_delivery_is_applied(inbound, project, message):
    answer = inbound.post(URL, data=as_body(delivery(message)), headers=postmark_headers())
    assert answer.get_json() == {"received": 1, "applied": 1, "duplicates": 0, "unmatched": 0}
    assert project.get(message).get_json()["status"] == "delivered"
    [event] = inbound_events(project, message)
    assert (event["type"], event["data"]["raw"]["DeliveredAt"]) == ("delivered", "2030-01-01T10:00:00Z")


def test_an_unknown_message_is_bounced_by_our_metadata_and_learns_postmark_s_id(inbound, project, engine):
    unknown = left_unknown(project, engine, "postmark", email(to="ada@example.com"))
    answer = inbound.post(URL, data=as_body(bounce(unknown)), headers=postmark_headers())
    assert answer.get_json()["applied"] == 1
    assert resolved(project, unknown) == ("bounced", "pm-0001", [("bounced", "unknown")])
    assert suppressions(project) == [("email", "ada@example.com", "bounce")]


def test_metadata_that_is_no_message_id_is_ignored(inbound, project, engine):
    unknown = left_unknown(project, engine, "postmark", email(to="ada@example.com"))
    record = {**delivery("m-1; DROP TABLE messages"), "MessageID": "pm-stranger"}
    answer = inbound.post(URL, data=as_body(record), headers=postmark_headers())
    assert (answer.status_code, answer.get_json()["unmatched"]) == (200, 1)
    assert resolved(project, unknown) == ("unknown", None, [])


def test_a_hard_bounce_suppresses_and_a_soft_one_does_not(inbound, project, engine, message):
    soft = sent(project, engine, "postmark", "pm-0002", email(to="bo@example.com"))
    record = {**bounce(soft, "SoftBounce", inactive=False), "MessageID": "pm-0002", "Email": "bo@example.com"}
    inbound.post(URL, data=as_body(record), headers=postmark_headers())
    inbound.post(URL, data=as_body(bounce(message)), headers=postmark_headers())
    assert (project.get(message).get_json()["status"], project.get(soft).get_json()["status"]) == ("bounced", "bounced")
    assert inbound_events(project, soft)[0]["data"]["bounce"] == "soft"
    assert suppressions(project) == [("email", "ada@example.com", "bounce")]


def test_an_unsubscribe_suppresses_as_an_unsubscribe(inbound, project, message):
    change = {
        "RecordType": "SubscriptionChange",
        "MessageID": "pm-0001",
        "ServerID": 23,
        "ChangedAt": "2030-01-01T10:00:00Z",
        "Recipient": "ada@example.com",
        "Origin": "Recipient",
        "SuppressSending": True,
        "SuppressionReason": "ManualSuppression",
        "Metadata": {"tidings_message_id": message},
    }
    inbound.post(URL, data=as_body(change), headers=postmark_headers())
    assert [e["type"] for e in inbound_events(project, message)] == ["unsubscribed"]
    assert suppressions(project) == [("email", "ada@example.com", "unsubscribe")]


def test_a_delivery_after_a_bounce_does_not_undo_it(inbound, project, message):
    inbound.post(URL, data=as_body(bounce(message)), headers=postmark_headers())
    inbound.post(URL, data=as_body(delivery(message)), headers=postmark_headers())
    assert project.get(message).get_json()["status"] == "bounced"
    assert [e["type"] for e in inbound_events(project, message)] == ["bounced", "delivered"]


def test_a_replay_is_a_200_no_op(inbound, project, message):
    for record in (bounce(message), delivery(message)):  # with Postmark's ID, and without one
        assert inbound.post(URL, data=as_body(record), headers=postmark_headers()).get_json()["applied"] == 1
        again = inbound.post(URL, data=as_body(record), headers=postmark_headers())
        assert (again.status_code, again.get_json()["duplicates"]) == (200, 1)
    assert len(inbound_events(project, message)) == 2


@pytest.mark.parametrize(
    "headers",
    [
        postmark_headers(password="wrong"),
        postmark_headers(user="someone-else"),
        {"Authorization": "Basic not-base64!", "Content-Type": "application/json"},
        {"Authorization": "Bearer token", "Content-Type": "application/json"},
        {"Content-Type": "application/json"},
    ],
)
def test_wrong_or_missing_credentials_are_401_and_change_nothing(inbound, project, message, headers):
    assert inbound.post(URL, data=as_body(bounce(message)), headers=headers).status_code == 401
    assert project.get(message).get_json()["status"] == "sent"
    assert inbound_events(project, message) == []
    assert suppressions(project) == []


def test_an_event_for_a_message_that_is_not_ours_is_acknowledged(inbound):
    record = {**delivery("not-a-uuid"), "MessageID": "pm-unknown"}
    answer = inbound.post(URL, data=as_body(record), headers=postmark_headers())
    assert answer.get_json() == {"received": 1, "applied": 0, "duplicates": 0, "unmatched": 1}
