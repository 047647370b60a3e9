"""The receivers' pure parts: freshness, tags, Twilio's URL forms, SNS's hosts, event tables."""

from __future__ import annotations

import time

import pytest

from app.enums import EventType
from providers.inbound.base import Kind, Stale, Unreadable, check_fresh, tagged_id
from providers.inbound.postmark import kind_of
from providers.inbound.ses import SnsHosts, event_of
from providers.inbound.twilio import url_variants


def test_every_kind_is_one_of_the_engine_s_event_types():
    assert {kind.value for kind in Kind} <= {event.value for event in EventType}


def test_a_timestamp_more_than_five_minutes_off_either_way_is_stale():
    now = time.time()
    check_fresh(str(int(now - 299)), now)
    check_fresh(now + 299, now)
    for off in (-301, 301):
        with pytest.raises(Stale):
            check_fresh(now + off, now)
    with pytest.raises(Unreadable):
        check_fresh("yesterday", now)


@pytest.mark.parametrize(
    ("tags", "found"),
    [
        ({"tidings_message_id": "m1"}, "m1"),  # Resend, Postmark's Metadata, SendGrid
        ({"tidings_message_id": ["m1"], "ses:source-ip": ["1.2.3.4"]}, "m1"),  # SES
        ([{"name": "other", "value": "x"}, {"name": "tidings_message_id", "value": "m1"}], "m1"),
        ({"tidings_message_id": 17}, None),
        (None, None),
    ],
)
def test_our_id_is_read_from_every_tag_shape(tags, found):
    assert tagged_id(tags) == found


@pytest.mark.parametrize(
    ("url", "variants"),
    [
        ("https://t.example.com/v1/inbound/twilio", ["https://t.example.com:443/v1/inbound/twilio"]),
        ("https://t.example.com:443/v1/inbound/twilio?x=1", ["https://t.example.com/v1/inbound/twilio?x=1"]),
        ("http://t.example.com/hook", ["http://t.example.com:80/hook"]),
        ("https://t.example.com:8443/hook", []),
    ],
)
def test_twilio_urls_are_tried_with_and_without_the_default_port(url, variants):
    assert url_variants(url) == [url, *variants]


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("https://sns.us-east-1.amazonaws.com/SimpleNotificationService-abc.pem", True),
        ("https://sns.eu-central-1.amazonaws.com:443/cert.pem", True),
        ("http://sns.us-east-1.amazonaws.com/cert.pem", False),
        ("https://sns.us-east-1.amazonaws.com:8443/cert.pem", False),
        ("https://sns.us-east-1.amazonaws.com.attacker.example/cert.pem", False),
        ("https://attacker.example/sns.us-east-1.amazonaws.com/cert.pem", False),
        ("https://s3.amazonaws.com/cert.pem", False),
        ("https://x:y@sns.us-east-1.amazonaws.com/cert.pem", False),
        ("http://127.0.0.1:9000/cert.pem", False),  # only when a test names it
    ],
)
def test_sns_certificates_come_only_from_sns_hosts(url, allowed):
    assert SnsHosts().allow(url) is allowed


def test_a_test_host_opens_exactly_that_host():
    hosts = SnsHosts("127.0.0.1:9000")
    assert hosts.allow("http://127.0.0.1:9000/cert.pem")
    assert not hosts.allow("http://127.0.0.1:9001/cert.pem")
    assert not hosts.allow("http://localhost:9000/cert.pem")


def test_postmark_records_map_by_type_with_an_unknown_fallback():
    assert kind_of("Delivery", {}) is Kind.DELIVERED
    assert kind_of("Bounce", {"Type": "SpamComplaint"}) is Kind.COMPLAINED
    assert kind_of("SubscriptionChange", {"SuppressSending": False}) is Kind.UNKNOWN
    assert kind_of("InboundMessage", {}) is Kind.UNKNOWN


def test_ses_events_read_the_detail_of_their_type():
    mail = {"messageId": "ses-1", "destination": ["ada@example.com"], "tags": {"tidings_message_id": ["m1"]}}
    transient = {"bounceType": "Transient", "bouncedRecipients": [{"emailAddress": "Ada@Example.com"}]}
    bounce = event_of("k1", "Bounce", {"eventType": "Bounce", "mail": mail, "bounce": transient})
    assert (bounce.kind, bounce.bounce, bounce.recipient, bounce.message_id) == (
        Kind.BOUNCED,
        "soft",
        "Ada@Example.com",
        "m1",
    )
    changed = {"newTopicPreferences": {"unsubscribeAll": False}}
    assert event_of("k2", "Subscription", {"mail": mail, "subscription": changed}).kind is Kind.UNKNOWN
    everything = {"newTopicPreferences": {"unsubscribeAll": True}}
    assert event_of("k3", "Subscription", {"mail": mail, "subscription": everything}).kind is Kind.UNSUBSCRIBED
    assert event_of("k4", "Rendering Failure", {"mail": mail}).kind is Kind.FAILED
    assert event_of("k5", "Teleport", {"mail": mail}).kind is Kind.UNKNOWN
