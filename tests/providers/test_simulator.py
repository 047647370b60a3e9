"""The simulator's addresses and answers: every documented recipient names its scenario, an
address outside the namespace is left to the real providers, and each answer is the result a
real provider's would be (tests/tasks/test_simulated_recipients.py follows them through the pipeline)."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import text

from app.config import ConfigError, Settings
from app.delivery.pauses import ProviderPauses
from providers import registry
from providers.base import Outbound, Outcome, Report
from providers.simulator import CLICKED_URL, DOMAIN, Scenario, SimulatorProvider, scenario_of, simulates
from tasks.deliver import deliver
from tests.conftest import create_project
from tests.waiting import wait_until

DOCUMENTED = [
    ("email", "delivered@simulator.tidings.invalid", Scenario.DELIVERED),
    ("email", "temporary-failure@simulator.tidings.invalid", Scenario.TEMPORARY_FAILURE),
    ("email", "permanent-failure+run-7@simulator.tidings.invalid", Scenario.PERMANENT_FAILURE),
    ("email", "rate-limited@simulator.tidings.invalid", Scenario.RATE_LIMITED),
    ("email", "bounced@simulator.tidings.invalid", Scenario.BOUNCED),
    ("email", "complained@simulator.tidings.invalid", Scenario.COMPLAINED),
    ("email", "opened@simulator.tidings.invalid", Scenario.OPENED),
    ("email", "clicked+a@simulator.tidings.invalid", Scenario.CLICKED),
    ("sms", "+12025550100", Scenario.DELIVERED),
    ("sms", "+13105550119", Scenario.TEMPORARY_FAILURE),
    ("sms", "+12025550125", Scenario.PERMANENT_FAILURE),
    ("sms", "+19995550130", Scenario.RATE_LIMITED),
    ("push", "simulator:delivered", Scenario.DELIVERED),
    ("push", "simulator:temporary-failure:tablet", Scenario.TEMPORARY_FAILURE),
    ("push", "simulator:permanent-failure", Scenario.PERMANENT_FAILURE),
    ("push", "simulator:rate-limited", Scenario.RATE_LIMITED),
    ("webhook", "https://simulator.tidings.invalid/delivered", Scenario.DELIVERED),
    ("webhook", "https://simulator.tidings.invalid/temporary-failure/orders?id=7", Scenario.TEMPORARY_FAILURE),
    ("webhook", "http://simulator.tidings.invalid:8080/permanent-failure", Scenario.PERMANENT_FAILURE),
    ("webhook", "HTTPS://Simulator.Tidings.invalid/rate-limited#x", Scenario.RATE_LIMITED),
]


@pytest.mark.parametrize(("channel", "address", "scenario"), DOCUMENTED)
def test_every_documented_recipient_names_its_scenario(channel, address, scenario):
    assert simulates(channel, address)
    assert scenario_of(channel, address) is scenario


@pytest.mark.parametrize(
    ("channel", "address"),
    [
        ("email", "ada@example.com"),
        ("email", "delivered@simulator.tidings.example"),
        ("email", "delivered@sub.simulator.tidings.invalid"),
        ("sms", "+4915112345678"),
        ("sms", "+12025550200"),  # 555-0200 is no fictional number
        ("sms", "+1202555010"),
        ("push", "fcm-token-abc"),
        ("push", "xsimulator:delivered"),
        ("webhook", "https://example.com/delivered"),
        ("webhook", "https://simulator.tidings.invalid.example.com/delivered"),
        ("in_app", "delivered@simulator.tidings.invalid"),
    ],
)
def test_other_addresses_are_left_to_the_real_providers(channel, address):
    assert not simulates(channel, address)


@pytest.mark.parametrize(
    ("channel", "address"),
    [
        ("email", "delivred@simulator.tidings.invalid"),  # a typo
        ("sms", "+12025550140"),  # the fictional block's other numbers
        ("push", "simulator:opened"),  # email's news only
        ("webhook", "https://simulator.tidings.invalid/"),
    ],
)
def test_a_namespace_address_naming_no_scenario_fails_without_suppression(sim, channel, address):
    assert simulates(channel, address)  # so it never leaves for a real provider
    [result] = sim.send([outbound(channel, address)])
    assert result.outcome is Outcome.PERMANENT
    assert not result.suppress
    assert "not a simulated" in result.error


@pytest.fixture
def redis_url(server_urls) -> str:
    return server_urls[1]


@pytest.fixture
def sim(redis_url) -> SimulatorProvider:
    return simulator(redis_url)


def simulator(redis_url: str) -> SimulatorProvider:
    """The adapter as a worker builds it: its memory is the deployment's Redis."""
    return registry.build("simulator", {"REDIS_URL": redis_url})


def outbound(channel: str, address: str) -> Outbound:
    return Outbound(str(uuid.uuid4()), channel, address, "Hello", "Hi")


@pytest.mark.parametrize(
    ("address", "outcome", "reports"),
    [
        ("delivered@simulator.tidings.invalid", Outcome.SENT, (Report("delivered"),)),
        ("bounced@simulator.tidings.invalid", Outcome.SENT, (Report("bounced"),)),
        ("complained@simulator.tidings.invalid", Outcome.SENT, (Report("delivered"), Report("complained"))),
        ("opened@simulator.tidings.invalid", Outcome.SENT, (Report("delivered"), Report("opened"))),
        (
            "clicked@simulator.tidings.invalid",
            Outcome.SENT,
            (Report("delivered"), Report("opened"), Report("clicked", CLICKED_URL)),
        ),
        ("temporary-failure@simulator.tidings.invalid", Outcome.TRANSIENT, ()),
        ("permanent-failure@simulator.tidings.invalid", Outcome.PERMANENT, ()),
    ],
)
def test_each_answer_is_what_a_real_provider_would_say(sim, address, outcome, reports):
    [result] = sim.send([outbound("email", address)])
    assert (result.outcome, result.reports) == (outcome, reports)
    if outcome is Outcome.SENT:
        assert result.provider_message_id.startswith("sim-")
    if outcome is Outcome.PERMANENT:  # a hard bounce: the address is suppressed
        assert (result.suppress, result.suppress_reason) == (True, "bounce")


def test_a_rate_limited_recipient_is_refused_once_by_every_worker(redis_url):
    message = outbound("sms", "+12025550130")
    first, second = simulator(redis_url), simulator(redis_url)  # two workers share the memory
    [refused] = first.send([message])
    assert (refused.outcome, refused.retry_after) == (Outcome.RATE_LIMITED, 1.0)
    [sent] = second.send([message])
    assert (sent.outcome, sent.reports) == (Outcome.SENT, (Report("delivered"),))
    assert first.send([message])[0].outcome is Outcome.SENT


def test_a_batch_answers_each_recipient_for_itself(sim):
    batch = [outbound("email", f"{s}@simulator.tidings.invalid") for s in ("delivered", "rate-limited", "bounced")]
    results = sim.send(batch)
    assert [r.message_id for r in results] == [m.message_id for m in batch]
    assert [r.outcome for r in results] == [Outcome.SENT, Outcome.RATE_LIMITED, Outcome.SENT]


def test_it_needs_only_the_deployments_redis():
    with pytest.raises(ValueError, match="REDIS_URL"):
        registry.build("simulator", {})


def test_it_is_registered_for_every_channel_and_never_opens_its_circuit():
    assert registry.PROVIDERS["simulator"].channels == {"email", "sms", "push", "webhook"}
    assert registry.endpoint_per_message("simulator")
    assert registry.carries_attachments("simulator")
    assert registry.account_settings("simulator") == ()
    assert not registry.chainable("simulator")  # never an EMAIL_PROVIDER: it answers only its own


def test_no_chain_may_name_it_and_no_pace_covers_it(settings):
    """EMAIL_RATE_PER_SEC paces email's chain: simulated recipients take none of its pace."""
    with pytest.raises(ConfigError, match="EMAIL_PROVIDER must be one of"):
        Settings.from_env({**settings.environ, "EMAIL_PROVIDER": "simulator"})
    paced = Settings.from_env({**settings.environ, "EMAIL_RATE_PER_SEC": "5"})
    assert paced.rates == {"fake": 5.0, "fake2": 5.0}


def test_a_rate_limit_pauses_the_simulator_for_its_own_project_alone(client, app, engine, worker):
    """One deliver run with two projects' simulated recipients: A's `rate-limited` one first,
    then more of B's than fit the simulator's batch. B's all go out in that run; A's message
    waits out its own pause and goes too, its attempt given back.

    Deliveries are held by an operator's pause of the simulator while the worker prepares
    them (its deliver tasks are put off for minutes), so the test runs the one deliver itself.
    """
    a, b = create_project(client), create_project(client)
    pauses = ProviderPauses(app.extensions["tidings"].redis)
    pauses.pause(SimulatorProvider.name, None, "held by the test")
    try:
        first = a.send(email_to(f"rate-limited+{uuid.uuid4().hex[:8]}@{DOMAIN}")).get_json()["id"]
        recipients = [{"email": f"delivered+{i}@{DOMAIN}"} for i in range(SimulatorProvider.max_batch)]
        batch = b.call("POST", "/v1/messages/batch", {**CONTENT, "recipients": recipients})
        assert batch.status_code == 202, batch.get_json()
        ids = [first, *message_ids(engine, b.id)]
        wait_until(lambda: statuses(engine, ids), lambda seen: seen == {"ready": len(ids)}, 30, "every message ready")
    finally:
        pauses.resume(SimulatorProvider.name)
    deliver(SimulatorProvider.name, ids)  # A's message has the smallest id: it is sent first
    assert statuses(engine, ids[1:]).keys() <= {"sent", "delivered"}
    assert pauses.seconds_left(SimulatorProvider.name) is None
    message = a.wait_for(first, {"delivered"}, timeout=30)
    assert message["attempts"] == 1


CONTENT = {"channel": "email", "content": {"subject": "Rehearsal", "text": "Hi"}}


def email_to(address: str) -> dict:
    return {**CONTENT, "to": {"email": address}}


def message_ids(engine, project_id: str) -> list[str]:
    with engine.connect() as connection:
        found = connection.execute(text("SELECT id::text FROM messages WHERE project_id = :p"), {"p": project_id})
        return [row[0] for row in found]


def statuses(engine, ids: list[str]) -> dict[str, int]:
    with engine.connect() as connection:
        counted = connection.execute(
            text("SELECT status, count(*) FROM messages WHERE id = ANY(CAST(:ids AS uuid[])) GROUP BY status"),
            {"ids": ids},
        )
        return {status: count for status, count in counted}
