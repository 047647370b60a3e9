"""Simulated recipients through the whole pipeline, with a live key and a test key: the API,
PostgreSQL, a real worker, the simulator, the code that applies status webhooks and
tracking, and the project's status webhooks to a receiver on 127.0.0.1. Nothing reaches the
deployment's (fake) providers, and the simulator's failures, pause and circuit stay its own.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from pytest_httpserver import HTTPServer

from app.config import Settings
from app.delivery.breaker import CircuitBreakers
from app.delivery.pauses import ProviderPauses
from app.observability.counters import HASH, labels_text
from providers.log import LogProvider
from tasks.celery_app import configure
from tests.conftest import ProjectKeys, create_project
from tests.provider_server import FakeProviderServer
from tests.tasks.test_webhooks import Receiver, deliveries, endpoint
from tests.waiting import wait_until

pytestmark = pytest.mark.usefixtures("worker")

SENT = ["accepted", "ready", "sending", "sent"]
# The documented timelines (README, "Simulated recipients"): final status and event types.
TIMELINES: dict[str, tuple[str, list[str]]] = {
    "delivered": ("delivered", [*SENT, "delivered"]),
    "rate-limited": ("delivered", [*SENT, "delivered"]),
    "bounced": ("bounced", [*SENT, "bounced"]),
    "complained": ("complained", [*SENT, "delivered", "complained"]),
    "opened": ("delivered", [*SENT, "delivered", "opened"]),
    "clicked": ("delivered", [*SENT, "delivered", "opened", "clicked"]),
    "permanent-failure": ("failed", ["accepted", "ready", "sending", "failed"]),
    # MAX_ATTEMPTS is 3 in the tests: two retries, then the third attempt is the last.
    "temporary-failure": ("dead", ["accepted", "ready", "retrying", "retrying", "sending", "dead"]),
}
# What reaches the project's status webhooks: every entry of the log, none of the derived steps.
DERIVED_ONLY = {"accepted", "ready", "sending"}
EVERY_CHANNEL = ["delivered", "temporary-failure", "permanent-failure", "rate-limited"]
EMAIL_ONLY = ["bounced", "complained", "opened", "clicked"]
SMS_TENS = {"delivered": "0", "temporary-failure": "1", "permanent-failure": "2", "rate-limited": "3"}
SUPPRESSED_AS = {"permanent-failure": "bounce", "bounced": "bounce", "complained": "complaint"}
CASES = [
    (channel, scenario, key)
    for channel, scenarios in (
        ("email", EVERY_CHANNEL + EMAIL_ONLY),
        ("sms", EVERY_CHANNEL),
        ("push", EVERY_CHANNEL),
        ("webhook", EVERY_CHANNEL),
    )
    for scenario in scenarios
    for key in ("live", "test")
]


def address(channel: str, scenario: str) -> dict[str, str]:
    """A fresh documented address of `scenario` (tags and suffixes make more of each)."""
    tag = uuid.uuid4().hex[:8]
    return {
        "email": lambda: {"email": f"{scenario}+{tag}@simulator.tidings.invalid"},
        "sms": lambda: {"phone": f"+120255501{SMS_TENS[scenario]}{int(tag, 16) % 10}"},
        "push": lambda: {"device_token": f"simulator:{scenario}:{tag}"},
        "webhook": lambda: {"url": f"https://simulator.tidings.invalid/{scenario}/{tag}"},
    }[channel]()


def body(channel: str, to: dict[str, str]) -> dict[str, Any]:
    content = {"subject": "Rehearsal", "text": "Hi", "title": "Rehearsal"}
    return {"channel": channel, "to": to, "content": content}


@pytest.fixture
def fast_retries(client, settings: Settings) -> Iterator[None]:
    """The real ladder, shortened as tests/faults do (RETRY_DELAY_SCALE): seconds, not minutes.
    After `client`, which configures the process with the session's settings."""
    configure(replace(settings, retry_delay_scale=0.005))
    yield
    configure(settings)


@pytest.fixture
def rehearsal(client) -> ProjectKeys:
    return create_project(client, channels=["email", "sms", "push", "webhook"])


def settled(project: ProjectKeys, message_id: str, status: str, count: int) -> dict[str, Any]:
    """The message once it has its final status and every event of its timeline."""
    return wait_until(
        lambda: project.get(message_id).get_json(),
        lambda message: message["status"] == status and len(message["events"]) >= count,
        30,
        f"{message_id} {status} with {count} events",
        show=lambda message: (message["status"], [event["type"] for event in message["events"]]),
    )


def webhooks_received(project: ProjectKeys, receiver: Receiver, hook: dict[str, Any], count: int) -> list[dict]:
    """Every status webhook POST, once all `count` deliveries have succeeded (none then comes again)."""
    wait_until(
        lambda: [d["status"] for d in deliveries(project, hook["id"])],
        lambda seen: seen == ["succeeded"] * count,
        30,
        f"{count} webhook deliveries succeeded",
    )
    assert len(receiver.received) == count, [r["body"] for r in receiver.received]
    return sorted(receiver.verified(hook["secret"]), key=lambda payload: datetime.fromisoformat(payload["timestamp"]))


def counter(redis_client, name: str, **labels: str) -> int:
    return int(redis_client.hget(HASH, f"{name}|{labels_text(labels)}") or 0)


@pytest.mark.usefixtures("fast_retries")
@pytest.mark.parametrize(("channel", "scenario", "key"), CASES)
def test_every_simulated_recipient_walks_its_documented_timeline(
    rehearsal: ProjectKeys,
    httpserver: HTTPServer,
    fake_provider: FakeProviderServer,
    backup_provider: FakeProviderServer,
    channel: str,
    scenario: str,
    key: str,
):
    receiver = Receiver(httpserver)
    hook = endpoint(rehearsal, receiver.url)
    to = address(channel, scenario)
    sent = rehearsal.send(body(channel, to), key=rehearsal.live_key if key == "live" else rehearsal.test_key)
    assert sent.status_code == 202, sent.get_json()
    message_id = sent.get_json()["id"]
    status, timeline = TIMELINES[scenario]

    message = settled(rehearsal, message_id, status, len(timeline))
    assert (message["status"], [e["type"] for e in message["events"]]) == (status, timeline)
    assert message["provider"] == "simulator"
    assert message["attempts"] == (3 if scenario == "temporary-failure" else 1)
    payloads = webhooks_received(rehearsal, receiver, hook, len([t for t in timeline if t not in DERIVED_ONLY]))
    assert [p["type"] for p in payloads] == [t for t in timeline if t not in DERIVED_ONLY]
    assert {p["data"]["message_id"] for p in payloads} == {message_id}
    # The deployment's providers never saw it: email's fake ones, the other channels' log.
    assert fake_provider.count(message_id) == backup_provider.count(message_id) == 0
    assert message_id not in {outbound.message_id for outbound in LogProvider.record}


@pytest.mark.usefixtures("fast_retries")
def test_a_batch_of_every_email_scenario_goes_through_the_bulk_lanes(rehearsal: ProjectKeys):
    scenarios = EVERY_CHANNEL + EMAIL_ONLY
    request = {"channel": "email", "content": {"subject": "Rehearsal", "text": "Hi"}}
    request["recipients"] = [address("email", scenario) for scenario in scenarios]
    answer = rehearsal.call("POST", "/v1/messages/batch", request, key=rehearsal.test_key).get_json()
    assert answer["accepted"] == len(scenarios), answer
    page = rehearsal.call("GET", f"/v1/messages?batch_id={answer['batch_id']}", key=rehearsal.test_key).get_json()
    by_address = {message["to"]["email"]: message["id"] for message in page["items"]}
    for scenario, to in zip(scenarios, request["recipients"], strict=True):
        status, timeline = TIMELINES[scenario]
        message = settled(rehearsal, by_address[to["email"]], status, len(timeline))
        assert (message["priority"], message["provider"]) == ("bulk", "simulator")
        assert [e["type"] for e in message["events"]] == timeline, scenario


@pytest.mark.usefixtures("fast_retries")
@pytest.mark.parametrize("key", ["live", "test"])
def test_a_temporary_failure_retries_on_the_ladder_until_the_attempt_limit(rehearsal: ProjectKeys, key: str):
    to = address("email", "temporary-failure")
    message_id = rehearsal.send(body("email", to), key=getattr(rehearsal, f"{key}_key")).get_json()["id"]
    message = settled(rehearsal, message_id, "dead", 6)
    failures = [e for e in message["events"] if e["type"] in ("retrying", "dead")]
    assert [(e["type"], e["data"]["attempt"]) for e in failures] == [("retrying", 1), ("retrying", 2), ("dead", 3)]
    assert all("simulated temporary failure" in e["data"]["reason"] for e in failures)
    assert all("next_attempt_at" in e["data"] for e in failures[:2])


@pytest.mark.parametrize(("channel", "scenario"), [(c, "permanent-failure") for c in ("email", "sms", "push")])
def test_a_permanent_failure_leaves_the_address_suppressed(rehearsal: ProjectKeys, channel: str, scenario: str):
    to = address(channel, scenario)
    first = rehearsal.send(body(channel, to)).get_json()["id"]
    failed = settled(rehearsal, first, "failed", 4)["events"][-1]
    assert failed["data"]["follow_up"] == "suppressed"
    assert failed["data"]["suppression_reason"] == "bounce"
    [entry] = rehearsal.call("GET", f"/v1/suppressions?channel={channel}").get_json()["items"]
    assert (entry["address"], entry["reason"]) == (next(iter(to.values())), "bounce")
    again = rehearsal.send(body(channel, to), key=rehearsal.test_key).get_json()["id"]
    assert rehearsal.wait_for(again)["status"] == "suppressed"  # prepare never routes it again


@pytest.mark.parametrize("scenario", ["bounced", "complained"])
def test_a_reported_bounce_or_complaint_suppresses_as_the_status_webhook_would(rehearsal: ProjectKeys, scenario):
    to = address("email", scenario)
    message_id = rehearsal.send(body("email", to)).get_json()["id"]
    status, timeline = TIMELINES[scenario]
    news = settled(rehearsal, message_id, status, len(timeline))["events"][-1]
    assert news["data"]["provider"] == "simulator"
    assert news["data"]["suppressed"] == SUPPRESSED_AS[scenario]
    [entry] = rehearsal.call("GET", "/v1/suppressions?channel=email").get_json()["items"]
    assert (entry["address"], entry["reason"]) == (to["email"], SUPPRESSED_AS[scenario])


def test_opens_and_clicks_are_recorded_as_the_tracker_records_them(rehearsal: ProjectKeys):
    message_id = rehearsal.send(body("email", address("email", "clicked"))).get_json()["id"]
    message = settled(rehearsal, message_id, "delivered", len(TIMELINES["clicked"][1]))
    assert message["engagement"] == {
        "opens": 1,
        "clicks": 1,
        "links": [{"url": "https://simulator.tidings.invalid/clicked", "clicks": 1}],
    }
    assert message["events"][-1]["data"] == {"url": "https://simulator.tidings.invalid/clicked"}


def test_a_rate_limit_pauses_the_simulator_alone_and_gives_the_attempt_back(rehearsal: ProjectKeys, app):
    redis_client = app.extensions["tidings"].redis
    before = {
        p: counter(redis_client, "provider_pauses", provider=p, cause="rate_limited") for p in ("simulator", "fake")
    }
    message_id = rehearsal.send(body("email", address("email", "rate-limited"))).get_json()["id"]
    message = settled(rehearsal, message_id, "delivered", len(TIMELINES["rate-limited"][1]))
    assert message["attempts"] == 1
    after = {
        p: counter(redis_client, "provider_pauses", provider=p, cause="rate_limited") for p in ("simulator", "fake")
    }
    assert (after["simulator"] - before["simulator"], after["fake"] - before["fake"]) == (1, 0)
    assert ProviderPauses(redis_client).seconds_left("fake") is None
    # The deployment's email still goes out through its own provider meanwhile.
    other = rehearsal.send(body("email", {"email": "ada@example.com"})).get_json()["id"]
    assert rehearsal.wait_for(other)["provider"] == "fake"


@pytest.mark.usefixtures("fast_retries")
def test_the_simulators_failures_never_open_a_circuit(rehearsal: ProjectKeys, app, settings: Settings):
    ids = [rehearsal.send(body("email", address("email", "temporary-failure"))).get_json()["id"] for _ in range(8)]
    for message_id in ids:
        assert settled(rehearsal, message_id, "dead", 6)["status"] == "dead"
    breakers = CircuitBreakers(app.extensions["tidings"].redis, settings.breaker)
    states = breakers.states(["simulator", "fake"])
    assert (states["simulator"].state.value, states["fake"].state.value) == ("closed", "closed")
    assert states["simulator"].failures == 0


def test_the_readme_and_the_openapi_description_list_every_simulated_recipient(client):
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    spec = client.get("/openapi.json").get_json()
    described = spec["paths"]["/v1/messages"]["post"]["description"]
    for documented in (readme, described):
        for scenario in TIMELINES:
            assert f"`{scenario}@simulator.tidings.invalid`" in documented, scenario
        for scenario in EVERY_CHANNEL:
            assert f"`simulator:{scenario}`" in documented, scenario
            assert f"`https://simulator.tidings.invalid/{scenario}`" in documented, scenario
            assert f"`+1 NXX 555-01{SMS_TENS[scenario]}x`" in documented, scenario
