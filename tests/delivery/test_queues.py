"""Every queue a task can be routed to has a worker listening on it."""

from __future__ import annotations

from app.config import Settings
from app.delivery import dispatch
from app.delivery.broker import celery_app
from app.delivery.queues import BEAT_QUEUE, active_providers, all_queues, transactional_queues
from app.enums import Channel, Priority
from tests.conftest import make_env


def routed_queues(settings) -> set[str]:
    queues = set()
    for priority in Priority:
        queues |= {s.options["queue"] for s in dispatch.prepare(["x"], priority)}
        for provider in active_providers(settings):
            queues |= {s.options["queue"] for s in dispatch.deliver(provider, priority, ["x"])}
            queues |= {s.options["queue"] for s in dispatch.reports(provider, priority, [["x"]])}
    queues |= {s.options["queue"] for s in dispatch.webhooks(["x"])}
    for name in ("tidings.release_due", "tidings.sweep", "tidings.webhooks.release"):
        queues.add(celery_app.amqp.router.route({}, name)["queue"].name)
    return queues


def test_the_worker_listens_on_every_routed_queue(worker, settings):
    listening = {queue.name for queue in worker.app.amqp.queues.consume_from.values()}
    assert routed_queues(settings) <= listening
    assert BEAT_QUEUE in listening


def test_the_transactional_worker_takes_every_transactional_lane_and_nothing_else(settings):
    """`tidings worker --transactional`: the lanes bulk work never reaches, each of them."""
    routed = routed_queues(settings)
    assert set(transactional_queues(settings)) == {q for q in routed if q.endswith(".transactional")}


def test_transactional_lanes_come_first(settings):
    queues = all_queues(settings)
    last_transactional = max(i for i, q in enumerate(queues) if q.endswith(".transactional"))
    first_bulk = min(i for i, q in enumerate(queues) if q.endswith(".bulk"))
    assert last_transactional < first_bulk


def test_within_a_priority_deliver_lanes_come_before_prepare(settings):
    """Redis serves the first non-empty queue: prepare first would starve deliver under a steady stream."""
    queues = all_queues(settings)
    for priority in Priority:
        prepare = queues.index(f"prepare.{priority}")
        assert all(queues.index(q) < prepare for q in queues if q.startswith("deliver.") and q.endswith(priority))


def test_deliver_lanes_cover_the_log_provider_for_test_keys(settings):
    assert "deliver.log.transactional" in all_queues(settings)
    assert "deliver.fake.transactional" in all_queues(settings)


def test_every_deployment_has_the_simulators_lanes_without_a_setting(server_urls):
    """Simulated recipients go to the simulator with any key: no deployment may lack its workers."""
    bare = Settings.from_env(make_env(*server_urls))
    assert set(bare.chained_providers) == {"log"}
    assert active_providers(bare) == ["log", "simulator"]
    for priority in Priority:
        assert f"deliver.simulator.{priority}" in all_queues(bare)


def test_every_provider_of_a_failover_chain_has_its_lanes(settings):
    """fake2 only takes email while fake's circuit is open: its lanes must be listened to all the same."""
    assert settings.chains[Channel.EMAIL] == ("fake", "fake2")
    for priority in Priority:
        assert f"deliver.fake2.{priority}" in all_queues(settings)
