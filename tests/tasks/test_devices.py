"""Push to every device: each of a subscriber's tokens gets the message once, each device's
answer is recorded and settles that device alone, and the message's status sums them up.

The real FCM adapter against a local server speaking FCM HTTP v1 (tests/fcm_server.py),
which counts every request per token. The worker prepares; no worker listens on the fcm
lanes, so each test delivers (and, for retries, makes the retry due) itself.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from pytest_httpserver import HTTPServer
from sqlalchemy import text
from werkzeug import Response

from app.delivery.pauses import ProviderPauses
from app.enums import Channel
from app.redis_client import redis_for
from providers.log import LogProvider
from tasks.deliver import deliver
from tests.conftest import ADMIN_KEY, bearer, rerouted
from tests.fcm_server import FcmDevices, fcm_error, serve_tokens, service_account

pytestmark = pytest.mark.usefixtures("worker")


@pytest.fixture(scope="module")
def key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture
def fcm(settings, httpserver: HTTPServer, key) -> Iterator[FcmDevices]:
    """Push routed to the real FCM adapter, whose API (and token endpoint) is `httpserver`."""
    serve_tokens(key, httpserver)
    devices = FcmDevices(httpserver)
    account = json.dumps(service_account(key, httpserver))
    with rerouted(
        settings, {Channel.PUSH: ("fcm",)}, FCM_CREDENTIALS_JSON=account, FCM_BASE_URL=httpserver.url_for("")
    ):
        yield devices
    ProviderPauses(redis_for(settings.redis_url)).resume("fcm")  # a failed test's pause is not the next one's


def unavailable() -> Response:
    return fcm_error(503, "UNAVAILABLE", "UNAVAILABLE")


def unregistered() -> Response:
    return fcm_error(404, "NOT_FOUND", "UNREGISTERED")


def push_to(project, subscriber: str, tokens: list[str], key: str | None = None) -> str:
    """A push to a subscriber with these tokens, prepared by the worker; its id."""
    assert project.call("PUT", f"/v1/subscribers/{subscriber}", {"push_tokens": tokens}).status_code in (200, 201)
    body = {"channel": "push", "to": {"subscriber_id": subscriber}, "content": {"title": "Order 17", "text": "Shipped"}}
    return project.send(body, key=key).get_json()["id"]


def prepared(project, subscriber: str, tokens: list[str]) -> str:
    message_id = push_to(project, subscriber, tokens)
    assert project.wait_for(message_id, {"ready", "failed", "suppressed"})["status"] == "ready"
    return message_id


def devices_of(message: dict[str, Any]) -> list[tuple[str, str, int]]:
    """The timeline's device entries as (token, status, attempts), in its order."""
    return [(e["data"]["token"], e["data"]["status"], e["data"]["attempts"]) for e in device_entries(message)]


def device_entries(message: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in message["events"] if e["type"] == "device"]


def due_now(engine, message_id: str) -> None:
    """The retry's wait is over (the test plays release_due's clock)."""
    with engine.begin() as connection:
        connection.execute(text("UPDATE messages SET next_attempt_at = now() WHERE id = :id"), {"id": message_id})


def deliver_attempts(engine, message_id: str, attempts: int) -> None:
    """Deliver, then each retry as soon as it is due: MAX_ATTEMPTS is 3 in the tests."""
    for attempt in range(attempts):
        if attempt:
            due_now(engine, message_id)
        deliver("fcm", [message_id])


def requeue(client, message_id: str) -> None:
    answer = client.post(
        "/v1/admin/messages/requeue", json={"ids": [message_id], "requested_by": "ops"}, headers=bearer(ADMIN_KEY)
    )
    assert answer.get_json() == {"requeued": 1}


def test_every_device_gets_the_push_exactly_once(project, fcm):
    message_id = prepared(project, "u1", ["tok-a-phone", "tok-b-tablet"])
    deliver("fcm", [message_id])
    deliver("fcm", [message_id])  # a duplicated task finds nothing to claim
    assert fcm.requests == Counter({"tok-a-phone": 1, "tok-b-tablet": 1})
    assert fcm.order == ["tok-a-phone", "tok-b-tablet"]
    message = project.get(message_id).get_json()
    assert (message["status"], message["attempts"]) == ("sent", 1)
    assert message["to"] == {"device_token": "tok-a-phone"}
    assert message["provider_message_id"] == fcm.name("tok-a-phone", 1)
    assert devices_of(message) == [("tok-a-phone", "sent", 1), ("tok-b-tablet", "sent", 1)]
    assert [e["data"]["provider_message_id"] for e in device_entries(message)] == [
        fcm.name("tok-a-phone", 1),
        fcm.name("tok-b-tablet", 1),
    ]


def test_an_unregistered_token_is_removed_and_the_other_kept(project, fcm):
    fcm.answer("tok-a-old", unregistered())
    message_id = prepared(project, "u1", ["tok-a-old", "tok-b-phone"])
    deliver("fcm", [message_id])
    message = project.get(message_id).get_json()
    assert message["status"] == "sent"  # the phone took it
    [old, phone] = device_entries(message)
    assert old["data"] == {
        "token": "tok-a-old",
        "status": "failed",
        "attempts": 1,
        "error": "FCM UNREGISTERED: details",
        "follow_up": "token_removed",
    }
    assert (phone["data"]["status"], "follow_up" in phone["data"]) == ("sent", False)
    assert project.call("GET", "/v1/subscribers/u1").get_json()["push_tokens"] == ["tok-b-phone"]
    assert fcm.requests == Counter({"tok-a-old": 1, "tok-b-phone": 1})


def test_a_transient_failure_retries_only_that_device(project, fcm, engine):
    fcm.answer("tok-b-tablet", unavailable())
    message_id = prepared(project, "u1", ["tok-a-phone", "tok-b-tablet"])
    deliver("fcm", [message_id])
    retrying = project.get(message_id).get_json()
    assert retrying["status"] == "retrying"  # final only once every device is
    assert devices_of(retrying) == [("tok-a-phone", "sent", 1), ("tok-b-tablet", "retrying", 1)]
    event = next(e for e in retrying["events"] if e["type"] == "retrying")
    assert event["data"]["devices"] == {"sent": 1, "retrying": 1}
    assert event["data"]["reason"].startswith("FCM UNAVAILABLE")
    due_now(engine, message_id)
    deliver("fcm", [message_id])
    assert fcm.order == ["tok-a-phone", "tok-b-tablet", "tok-b-tablet"]
    sent = project.get(message_id).get_json()
    assert (sent["status"], sent["attempts"]) == ("sent", 2)
    assert sent["provider_message_id"] == fcm.name("tok-a-phone", 1)  # the first device's, whenever it took it
    assert devices_of(sent) == [("tok-a-phone", "sent", 1), ("tok-b-tablet", "sent", 2)]


@pytest.mark.parametrize(
    ("phone_answers", "status", "phone_status"),
    [
        (0, "sent", "sent"),  # the phone took it: sent, though the tablet never did
        (3, "dead", "dead"),  # no device took it
    ],
)
def test_a_device_still_failing_when_the_attempts_run_out_is_dead(
    project, fcm, engine, phone_answers, status, phone_status
):
    fcm.answer("tok-b-tablet", *(unavailable() for _ in range(3)))
    fcm.answer("tok-a-phone", *(unavailable() for _ in range(phone_answers)))
    message_id = prepared(project, "u1", ["tok-a-phone", "tok-b-tablet"])
    deliver_attempts(engine, message_id, 3)
    message = project.get(message_id).get_json()
    assert (message["status"], message["attempts"]) == (status, 3)
    phone_requests = max(phone_answers, 1)  # once when it took the message, else at every attempt
    assert devices_of(message) == [("tok-a-phone", phone_status, phone_requests), ("tok-b-tablet", "dead", 3)]
    assert fcm.requests == Counter({"tok-a-phone": phone_requests, "tok-b-tablet": 3})


def test_the_status_sums_up_the_devices_and_the_timeline_lists_each(project, fcm):
    fcm.answer("tok-b-old", unregistered())
    fcm.answer("tok-c-foreign", fcm_error(403, "PERMISSION_DENIED", "SENDER_ID_MISMATCH"))
    message_id = prepared(project, "u1", ["tok-a-phone", "tok-b-old", "tok-c-foreign"])
    deliver("fcm", [message_id])
    message = project.get(message_id).get_json()
    assert message["status"] == "sent"
    assert devices_of(message) == [
        ("tok-a-phone", "sent", 1),
        ("tok-b-old", "failed", 1),
        ("tok-c-foreign", "failed", 1),
    ]
    kinds = [e["type"] for e in message["events"]]
    assert kinds == ["accepted", "ready", "sending", "device", "device", "device", "sent"]

    refused = prepared(project, "u2", ["tok-d-gone", "tok-e-foreign"])
    fcm.answer("tok-d-gone", unregistered())
    fcm.answer("tok-e-foreign", fcm_error(403, "PERMISSION_DENIED", "SENDER_ID_MISMATCH"))
    deliver("fcm", [refused])
    failed = project.get(refused).get_json()
    assert (failed["status"], failed["error"]) == ("failed", "FCM UNREGISTERED: details")
    assert failed["events"][-1]["type"] == "failed"
    assert failed["events"][-1]["data"]["devices"] == {"failed": 2}
    assert project.call("GET", "/v1/subscribers/u2").get_json()["push_tokens"] == ["tok-e-foreign"]


def test_a_pause_mid_message_sends_the_rest_later_and_never_again_to_the_first(project, fcm, settings):
    quota = fcm_error(429, "RESOURCE_EXHAUSTED", "QUOTA_EXCEEDED")
    quota.headers["Retry-After"] = "60"
    fcm.answer("tok-b-tablet", quota)
    message_id = prepared(project, "u1", ["tok-a-phone", "tok-b-tablet", "tok-c-watch"])
    deliver("fcm", [message_id])
    paused = project.get(message_id).get_json()
    assert (paused["status"], paused["attempts"]) == ("ready", 0)  # the attempt is given back
    assert devices_of(paused) == [  # pending since prepare, before the phone took it
        ("tok-b-tablet", "pending", 0),
        ("tok-c-watch", "pending", 0),
        ("tok-a-phone", "sent", 1),
    ]
    pauses = ProviderPauses(redis_for(settings.redis_url))
    assert pauses.seconds_left("fcm") > 0
    pauses.resume("fcm")  # as an operator would, or the pause's end
    deliver("fcm", [message_id])
    assert fcm.order == ["tok-a-phone", "tok-b-tablet", "tok-b-tablet", "tok-c-watch"]
    sent = project.get(message_id).get_json()
    assert (sent["status"], sent["attempts"]) == ("sent", 1)
    assert devices_of(sent) == [("tok-a-phone", "sent", 1), ("tok-b-tablet", "sent", 1), ("tok-c-watch", "sent", 1)]


def test_a_suppressed_token_is_left_out_and_all_suppressed_is_suppressed(project, fcm):
    added = project.call("POST", "/v1/suppressions", {"channel": "push", "address": "tok-a-phone"})
    assert added.status_code in (200, 201)
    message_id = prepared(project, "u1", ["tok-a-phone", "tok-b-tablet"])
    assert project.get(message_id).get_json()["to"] == {"device_token": "tok-b-tablet"}
    deliver("fcm", [message_id])
    message = project.get(message_id).get_json()
    assert message["status"] == "sent"
    assert devices_of(message) == [("tok-a-phone", "suppressed", 0), ("tok-b-tablet", "sent", 1)]
    assert fcm.requests == Counter({"tok-b-tablet": 1})

    alone = push_to(project, "u2", ["tok-a-phone"])
    assert project.wait_for(alone)["status"] == "suppressed"


def test_a_subscriber_without_tokens_fails_with_no_push_address(project, fcm):
    message_id = push_to(project, "u1", [])
    message = project.wait_for(message_id)
    assert (message["status"], message["error"]) == ("failed", "subscriber 'u1' has no push address")
    assert fcm.requests == Counter()


def test_the_token_list_is_the_one_at_prepare_time(project, fcm):
    message_id = prepared(project, "u1", ["tok-a-phone"])
    assert project.call("PUT", "/v1/subscribers/u1", {"push_tokens": ["tok-a-phone", "tok-b-new"]}).status_code == 200
    deliver("fcm", [message_id])
    assert fcm.requests == Counter({"tok-a-phone": 1})


def test_a_requeued_dead_letter_starts_over_with_the_tokens_of_now(project, fcm, engine, client):
    fcm.answer("tok-a-phone", *(unavailable() for _ in range(3)))
    message_id = prepared(project, "u1", ["tok-a-phone"])
    deliver_attempts(engine, message_id, 3)
    assert project.get(message_id).get_json()["status"] == "dead"
    assert project.call("PUT", "/v1/subscribers/u1", {"push_tokens": ["tok-a-phone", "tok-b-new"]}).status_code == 200
    requeue(client, message_id)
    assert project.wait_for(message_id, {"ready"})["status"] == "ready"
    deliver("fcm", [message_id])
    message = project.get(message_id).get_json()
    assert message["status"] == "sent"
    assert devices_of(message) == [("tok-a-phone", "sent", 1), ("tok-b-new", "sent", 1)]


def test_a_requeued_dead_letter_whose_subscriber_has_no_token_left_fails(project, fcm, engine, client):
    fcm.answer("tok-a-phone", *(unavailable() for _ in range(3)))
    message_id = prepared(project, "u1", ["tok-a-phone"])
    deliver_attempts(engine, message_id, 3)
    assert project.call("PUT", "/v1/subscribers/u1", {"push_tokens": []}).status_code == 200
    requeue(client, message_id)
    message = project.wait_for(message_id, {"failed", "ready"})
    assert (message["status"], message["error"]) == ("failed", "subscriber 'u1' has no push address")


def test_a_claim_that_finds_every_device_settled_ends_the_message_as_they_did(project, fcm, engine):
    """Nothing to send is no reason to leave the message `sending` for the sweeper."""
    message_id = prepared(project, "u1", ["tok-a-phone", "tok-b-tablet"])
    with engine.begin() as connection:
        connection.execute(
            text("UPDATE push_deliveries SET status = 'failed', error = 'refused earlier' WHERE message_id = :id"),
            {"id": message_id},
        )
    deliver("fcm", [message_id])
    message = project.get(message_id).get_json()
    assert (message["status"], message["error"]) == ("failed", "no device left to send to")
    assert fcm.requests == Counter()


def test_a_provider_that_takes_batches_gets_every_device_in_one_call(project, settings, fake_provider):
    calls: list[int] = []
    fake_provider.override = lambda request: calls.append(len(request.get_json()["messages"]))
    with rerouted(settings, {Channel.PUSH: ("fake",)}):
        message_id = push_to(project, "u1", ["tok-a-phone", "tok-b-tablet"])
        message = project.wait_for(message_id)
    assert message["status"] == "sent"
    assert calls == [2]
    assert [fake_provider.count(f"{message_id}:{n}") for n in (0, 1)] == [1, 1]
    mine = [r.to for r in fake_provider.delivered() if r.message_id.startswith(f"{message_id}:")]
    assert sorted(mine) == ["tok-a-phone", "tok-b-tablet"]


def test_a_test_key_sends_every_device_to_the_log_provider(project):
    message_id = push_to(project, "u1", ["tok-a-phone", "tok-b-tablet"], key=project.test_key)
    message = project.wait_for(message_id)
    assert (message["status"], message["provider"]) == ("sent", "log")
    logged = [o for o in LogProvider.record if o.message_id.startswith(message_id)]
    assert [(o.message_id, o.to) for o in logged] == [
        (f"{message_id}:0", "tok-a-phone"),
        (f"{message_id}:1", "tok-b-tablet"),
    ]
