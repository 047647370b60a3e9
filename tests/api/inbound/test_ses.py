"""SES events through SNS (signature version 2, certificate only from an SNS host): the
subscription confirmation, notifications good, bad, stale and replayed, foreign topics."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit

import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from app.config import ConfigError, Settings
from tests.api.inbound.conftest import as_body, inbound_events, left_unknown, resolved, sent, sns_message, suppressions
from tests.conftest import email, make_env

URL = "/v1/inbound/ses"
HEADERS = {"Content-Type": "text/plain; charset=UTF-8", "x-amz-sns-message-type": "Notification"}


@pytest.fixture
def ses_id() -> str:
    return f"0102018{uuid.uuid4().hex}-000000"


@pytest.fixture
def message(project, engine, ses_id) -> str:
    return sent(project, engine, "ses", ses_id, email(to="ada@example.com"))


@pytest.fixture
def cert_url(sns_host) -> str:
    return sns_host.url_for("/SimpleNotificationService-test.pem")


def ses_event(kind: str, ses_id: str, message_id: str | None = None, **detail) -> str:
    tags = {"ses:configuration-set": ["tidings"]}
    if message_id:
        tags["tidings_message_id"] = [message_id]
    mail = {
        "timestamp": "2030-01-01T10:00:00.000Z",
        "source": "hello@acme.test",
        "messageId": ses_id,
        "destination": ["ada@example.com"],
        "tags": tags,
    }
    return json.dumps({"eventType": kind, "mail": mail, **detail})


def permanent_bounce() -> dict:
    return {
        "bounce": {
            "bounceType": "Permanent",
            "bounceSubType": "General",
            "bouncedRecipients": [{"emailAddress": "ada@example.com", "status": "5.1.1"}],
            "timestamp": "2030-01-01T10:00:01.000Z",
        }
    }


def test_a_subscription_is_confirmed_at_its_sns_url(inbound, sns_key, sns_host, cert_url):
    subscribe = sns_host.url_for("/confirm") + "?Action=ConfirmSubscription&Token=tok-1"
    body = sns_message(
        sns_key,
        cert_url,
        "SubscriptionConfirmation",
        "You have chosen to subscribe…",
        SubscribeURL=subscribe,
        Token="tok-1",
    )
    answer = inbound.post(URL, data=as_body(body), headers=HEADERS)
    assert answer.get_json() == {"received": 0, "applied": 0, "duplicates": 0, "unmatched": 0}
    confirmations = [r for r, _ in sns_host.log if r.path == "/confirm"]
    assert confirmations and confirmations[-1].args["Token"] == "tok-1"


def test_a_permanent_bounce_is_applied_and_suppresses(inbound, project, message, ses_id, sns_key, cert_url):
    body = sns_message(sns_key, cert_url, "Notification", ses_event("Bounce", ses_id, message, **permanent_bounce()))
    answer = inbound.post(URL, data=as_body(body), headers=HEADERS)
    assert answer.get_json() == {"received": 1, "applied": 1, "duplicates": 0, "unmatched": 0}
    assert project.get(message).get_json()["status"] == "bounced"
    [event] = inbound_events(project, message)
    assert (event["data"]["bounce"], event["data"]["raw"]["bounce"]["bounceSubType"]) == ("hard", "General")
    assert suppressions(project) == [("email", "ada@example.com", "bounce")]


def test_a_delivery_found_by_the_ses_message_id_alone(inbound, project, message, ses_id, sns_key, cert_url):
    delivery = {"delivery": {"timestamp": "2030-01-01T10:00:02.000Z", "recipients": ["ada@example.com"]}}
    body = sns_message(sns_key, cert_url, "Notification", ses_event("Delivery", ses_id, **delivery))
    assert inbound.post(URL, data=as_body(body), headers=HEADERS).get_json()["applied"] == 1
    assert project.get(message).get_json()["status"] == "delivered"


def test_an_unknown_message_is_settled_by_our_tag_in_mail_tags(inbound, project, engine, ses_id, sns_key, cert_url):
    unknown = left_unknown(project, engine, "ses", email(to="ada@example.com"))
    body = sns_message(sns_key, cert_url, "Notification", ses_event("Bounce", ses_id, unknown, **permanent_bounce()))
    assert inbound.post(URL, data=as_body(body), headers=HEADERS).get_json()["applied"] == 1
    assert resolved(project, unknown) == ("bounced", ses_id, [("bounced", "unknown")])


def test_a_tag_that_is_no_message_id_is_ignored(inbound, project, engine, ses_id, sns_key, cert_url):
    unknown = left_unknown(project, engine, "ses", email(to="ada@example.com"))
    body = sns_message(sns_key, cert_url, "Notification", ses_event("Delivery", ses_id, "x" * 300))
    answer = inbound.post(URL, data=as_body(body), headers=HEADERS)
    assert (answer.status_code, answer.get_json()["unmatched"]) == (200, 1)
    assert resolved(project, unknown) == ("unknown", None, [])


def fetches(sns_host, url: str) -> int:
    """Requests the SNS stand-in had for the certificate at `url`."""
    return sum(1 for request, _ in sns_host.log if request.path == urlsplit(url).path)


def test_the_certificate_is_fetched_once(inbound, message, ses_id, sns_key, sns_host, cert_url):
    for kind in ("Open", "Click"):
        body = sns_message(sns_key, cert_url, "Notification", ses_event(kind, ses_id, message))
        assert inbound.post(URL, data=as_body(body), headers=HEADERS).status_code == 200
    assert fetches(sns_host, cert_url) == 1


def test_a_replay_is_a_200_no_op(inbound, project, message, ses_id, sns_key, cert_url):
    body = as_body(sns_message(sns_key, cert_url, "Notification", ses_event("Delivery", ses_id, message)))
    assert inbound.post(URL, data=body, headers=HEADERS).get_json()["applied"] == 1
    again = inbound.post(URL, data=body, headers=HEADERS)
    assert (again.status_code, again.get_json()["duplicates"]) == (200, 1)
    assert len(inbound_events(project, message)) == 1


def assert_untouched(project, message: str) -> None:
    assert project.get(message).get_json()["status"] == "sent"
    assert inbound_events(project, message) == [] and suppressions(project) == []


def test_a_bad_signature_is_401_and_changes_nothing(inbound, project, message, ses_id, sns_key, cert_url):
    good = sns_message(sns_key, cert_url, "Notification", ses_event("Bounce", ses_id, message, **permanent_bounce()))
    another_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    impostor = sns_message(another_key, cert_url, "Notification", good["Message"])
    tampered = {**good, "Message": good["Message"].replace("Permanent", "Transient")}
    version_one = {**good, "SignatureVersion": "1"}
    for body in (impostor, tampered, version_one, {k: v for k, v in good.items() if k != "Signature"}):
        assert inbound.post(URL, data=as_body(body), headers=HEADERS).status_code == 401
    assert_untouched(project, message)


def test_a_certificate_from_anywhere_but_an_sns_host_is_refused_unfetched(
    inbound, project, message, ses_id, sns_key, sns_host
):
    fetched_before = len(sns_host.log)
    for url in (
        "https://evil.example.com/SimpleNotificationService-test.pem",
        "http://sns.eu-west-1.amazonaws.com/cert.pem",  # not https
        "https://sns.eu-west-1.amazonaws.com.evil.example/cert.pem",
        "https://user@sns.eu-west-1.amazonaws.com/cert.pem",
        sns_host.url_for("/SimpleNotificationService-test.pem").replace("127.0.0.1", "localhost"),
    ):
        body = sns_message(sns_key, url, "Notification", ses_event("Bounce", ses_id, message, **permanent_bounce()))
        answer = inbound.post(URL, data=as_body(body), headers=HEADERS)
        assert answer.status_code == 401, url
        assert "SNS host" in answer.get_json()["message"]
    assert len(sns_host.log) == fetched_before
    assert_untouched(project, message)


def test_another_topic_is_403_even_correctly_signed(inbound, project, message, ses_id, sns_key, cert_url):
    foreign = "arn:aws:sns:eu-west-1:999999999999:someone-elses-topic"
    body = sns_message(sns_key, cert_url, "Notification", ses_event("Complaint", ses_id, message), topic=foreign)
    assert inbound.post(URL, data=as_body(body), headers=HEADERS).status_code == 403
    assert_untouched(project, message)


def test_a_stale_timestamp_is_400_and_changes_nothing(inbound, project, message, ses_id, sns_key, cert_url):
    old = datetime.now(UTC) - timedelta(minutes=6)
    body = sns_message(sns_key, cert_url, "Notification", ses_event("Complaint", ses_id, message), at=old)
    assert inbound.post(URL, data=as_body(body), headers=HEADERS).status_code == 400
    assert_untouched(project, message)


@pytest.fixture
def unseen_cert_url(sns_host) -> str:
    """A certificate URL on the SNS stand-in that nothing has fetched yet (none is cached)."""
    return sns_host.url_for(f"/SimpleNotificationService-{uuid.uuid4().hex}.pem")


def test_another_topic_or_a_stale_message_fetches_no_certificate(
    inbound, project, message, ses_id, sns_key, sns_host, unseen_cert_url
):
    """Anyone may post to us: what costs nothing is checked before the certificate is fetched."""
    event = ses_event("Bounce", ses_id, message, **permanent_bounce())
    foreign = sns_message(sns_key, unseen_cert_url, "Notification", event, topic="arn:aws:sns:eu-west-1:9:other")
    stale = sns_message(sns_key, unseen_cert_url, "Notification", event, at=datetime.now(UTC) - timedelta(hours=1))
    for body, status in ((foreign, 403), (stale, 400)):
        for _ in range(3):
            assert inbound.post(URL, data=as_body(body), headers=HEADERS).status_code == status
    assert fetches(sns_host, unseen_cert_url) == 0
    assert_untouched(project, message)


def test_a_failed_certificate_fetch_is_not_repeated_for_every_message(
    inbound, project, message, ses_id, sns_key, sns_host, unseen_cert_url
):
    """SNS answered 503 once: the messages that name the certificate meanwhile are refused
    with 503 too (SNS retries them), without asking again."""
    sns_host.expect_request(urlsplit(unseen_cert_url).path).respond_with_data("Service Unavailable", status=503)
    event = ses_event("Bounce", ses_id, message, **permanent_bounce())
    for _ in range(5):
        body = sns_message(sns_key, unseen_cert_url, "Notification", event)
        answer = inbound.post(URL, data=as_body(body), headers=HEADERS)
        assert answer.status_code == 503
        assert "signing certificate" in answer.get_json()["message"]
    assert fetches(sns_host, unseen_cert_url) == 1
    assert_untouched(project, message)


def test_a_test_host_is_allowed_only_on_loopback():
    env = make_env("postgresql://x@127.0.0.1/x", "redis://127.0.0.1:6379/0", SES_SNS_TOPIC_ARNS="arn:aws:sns:x")
    with pytest.raises(ConfigError, match=r"SES_SNS_TEST_HOST may only name 127\.0\.0\.1"):
        Settings.from_env({**env, "SES_SNS_TEST_HOST": "10.0.0.5:80"})
