"""Failover end to end: `fake` (the primary) answers 503s, its circuit opens, email moves to
`fake2`; when `fake` recovers, a probe after the cool-down brings traffic back. And the
webhook channel, whose every message has a tenant's own receiver, never trips on them."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest
from sqlalchemy import text

from app.config import BreakerPolicy
from app.delivery.breaker import CircuitBreakers, CircuitState
from app.enums import Channel
from tasks.celery_app import configure
from tasks.deliver import deliver
from tests.conftest import ADMIN_KEY, WEBHOOK_ENVIRON, ProjectKeys, bearer, create_project, email, rerouted
from tests.hostile_server import HostileServer
from tests.provider_server import json_response
from tests.waiting import wait_until

pytestmark = pytest.mark.usefixtures("worker")

# Two failed batches open the circuit; a second later a probe may go.
QUICK = BreakerPolicy(failures=2, error_rate=1.0, min_volume=10_000, window=60.0, cooldown=1.0)


@pytest.fixture
def quick_breaker(settings) -> Iterator[BreakerPolicy]:
    configure(replace(settings, breaker=QUICK, retry_delay_scale=0.01))
    yield QUICK
    configure(settings)


def unavailable(request):
    return json_response({"error": "unavailable"}, status=503)


def providers(client) -> dict[str, dict]:
    return {p["name"]: p for p in client.get("/v1/admin/providers", headers=bearer(ADMIN_KEY)).get_json()}


def counter(client, line: str) -> float:
    for row in client.get("/metrics").get_data(as_text=True).splitlines():
        if row.startswith(line + " "):
            return float(row.split()[-1])
    return 0.0


def test_a_failing_primary_trips_and_traffic_moves_to_the_next_then_comes_back(
    client, project, fake_provider, backup_provider, quick_breaker
):
    opened_before = counter(client, 'tidings_breaker_transitions_total{provider="fake",state="open"}')
    fake_provider.override = unavailable
    # Retried against the failing primary until its circuit opens, then handed to fake2.
    during = [project.send(email(f"during the outage {n}")).get_json()["id"] for n in range(3)]
    outage = [project.wait_for(message_id) for message_id in during]
    assert {(m["status"], m["provider"]) for m in outage} == {("sent", "fake2")}
    # Another test's late retry may reach either provider meanwhile: the ledgers are read for ours.
    assert sorted(r.message_id for r in backup_provider.delivered() if r.message_id in during) == sorted(during)
    assert [r for r in fake_provider.delivered() if r.message_id in during] == []
    assert any(e["type"] == "retrying" and "HTTP 503" in e["data"]["reason"] for m in outage for e in m["events"])
    assert counter(client, 'tidings_breaker_transitions_total{provider="fake",state="open"}') > opened_before
    assert counter(client, 'tidings_failover_handovers_total{provider="fake",to="fake2"}') >= 1
    listed = providers(client)
    assert listed["fake"]["breaker"] in {"open", "half_open"}
    assert listed["fake"]["primary_for"] == ["email"]
    assert listed["fake2"]["channels"] == ["email"] and listed["fake2"]["breaker"] == "closed"

    # The primary recovers; once its cool-down is over, the next message is its probe.
    fake_provider.override = None
    wait_until(lambda: providers(client)["fake"]["breaker"], lambda state: state == "half_open", 15, "fake half-open")
    back = project.wait_for(project.send(email("after the outage")).get_json()["id"])
    assert (back["status"], back["provider"]) == ("sent", "fake")
    assert providers(client)["fake"]["breaker"] == "closed"
    assert [r.message_id for r in fake_provider.delivered() if r.message_id in {*during, back["id"]}] == [back["id"]]
    assert counter(client, 'tidings_breaker_transitions_total{provider="fake",state="closed"}') >= 1


def ready_for_fake(project, engine, count: int) -> list[str]:
    """Messages made ready for `fake` by hand, so the test decides which deliver runs first."""
    ids = [project.send(email(scheduled_at="2099-01-01T00:00:00Z")).get_json()["id"] for _ in range(count)]
    with engine.begin() as connection:
        connection.execute(
            text(
                "UPDATE messages SET status = 'ready', provider = 'fake', to_address = 'ada@example.com', "
                "ready_at = now() WHERE id = ANY(CAST(:ids AS uuid[]))"
            ),
            {"ids": ids},
        )
    return ids


def trip(client, name: str) -> None:
    context = client.application.extensions["tidings"]
    breakers = CircuitBreakers(context.redis, QUICK)
    for _ in range(QUICK.failures):
        breakers.record(name, ok=0, failed=1, probe=False)


def test_an_open_circuit_hands_a_whole_batch_over_in_one_go(
    client, project, engine, fake_provider, backup_provider, quick_breaker
):
    ids = ready_for_fake(project, engine, 3)
    trip(client, "fake")
    deliver("fake", ids)
    with engine.connect() as connection:
        moved = connection.execute(
            text("SELECT provider, attempts FROM messages WHERE id = ANY(CAST(:ids AS uuid[]))"), {"ids": ids}
        ).all()
    assert {row.provider for row in moved} == {"fake2"}
    assert {row.attempts for row in moved} <= {0, 1}  # no attempt was spent on the open circuit
    assert {project.wait_for(i)["status"] for i in ids} == {"sent"}
    assert [(backup_provider.count(i), fake_provider.count(i)) for i in ids] == [(1, 0)] * len(ids)


def test_with_every_circuit_open_messages_go_out_as_they_would_without_breakers(
    client, project, fake_provider, backup_provider, quick_breaker
):
    trip(client, "fake")
    trip(client, "fake2")
    message = project.wait_for(project.send(email()).get_json()["id"])
    assert (message["status"], message["provider"]) == ("sent", "fake")
    assert (fake_provider.count(message["id"]), backup_provider.count(message["id"])) == (1, 0)


def test_resuming_a_provider_closes_its_circuit(client, quick_breaker):
    trip(client, "fake")
    assert providers(client)["fake"]["breaker"] == "open"
    resumed = client.post("/v1/admin/providers/fake/resume", headers=bearer(ADMIN_KEY)).get_json()
    assert resumed["breaker"] == "closed"
    assert resumed["breaker_seconds_left"] is None


def ready_webhooks(project: ProjectKeys, url: str, count: int) -> list[str]:
    """`count` webhook-channel messages to `url`, sent and prepared (no worker delivers them)."""
    body = {"channel": "webhook", "to": {"url": url}, "content": {"text": "t"}}
    ids = [project.send(body).get_json()["id"] for _ in range(count)]
    assert {project.wait_for(i, {"ready", "failed"})["status"] for i in ids} == {"ready"}
    return ids


def test_one_tenants_failing_receivers_never_open_the_webhook_channels_circuit(
    client, settings, hostile: HostileServer
):
    """Each webhook goes to its tenant's own receiver: 30 refused targets in one batch, an
    error rate that would open any other provider's circuit, say nothing about the channel,
    so the next project's webhooks still go out."""
    with rerouted(settings, {Channel.WEBHOOK: ("webhook",)}, **WEBHOOK_ENVIRON):
        breakers = CircuitBreakers(client.application.extensions["tidings"].redis, settings.breaker)
        breakers.reset("webhook")
        refused = ready_webhooks(create_project(client), "https://10.0.0.1/hook", 30)
        deliver("webhook", refused)
        assert breakers.states(["webhook"])["webhook"].state is CircuitState.CLOSED
        project = create_project(client)
        good = ready_webhooks(project, hostile.url("good"), 3)
        deliver("webhook", good)
    assert [project.get(i).get_json()["status"] for i in good] == ["sent"] * 3
    assert hostile.stats("good").requests == 3
