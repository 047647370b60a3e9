"""RabbitMQ as the broker: the same queues carry messages to `sent`, and the layout the
README recommends there (transactional lanes on workers of their own) keeps
transactional work ahead of a bulk backlog.

Each test has a virtual host of its own on the machine's RabbitMQ (127.0.0.1:5672), made
and deleted by the test, so nothing another run left there is consumed; Redis still
holds pauses, paces and counters. `.ci/run` starts RabbitMQ when it is down and sets
TIDINGS_REQUIRE_RABBITMQ=1: there a missing RabbitMQ fails these tests instead of
skipping them.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import uuid
from collections.abc import Iterator

import pytest
import redis
from celery import Celery

from app.delivery.queues import worker_queues
from tests.faults.stack import assert_ledger_agrees, insert_accepted, wait_until_terminal
from tests.waiting import wait_until

# What kombu's Redis transport would have written, had Celery used the stack's Redis as its broker.
CELERY_KEYS = (b"_kombu", b"unacked", b"deliver.", b"prepare.", b"beat")


def rabbitmq_missing() -> str | None:
    """Why these tests cannot run here, or None."""
    try:
        socket.create_connection(("127.0.0.1", 5672), timeout=1).close()
    except OSError:
        return "no RabbitMQ answers on 127.0.0.1:5672"
    if shutil.which("rabbitmqctl") is None:
        return "rabbitmqctl is not installed, so no virtual host of the test's own can be made"
    return None


def rabbitmqctl(*args: str) -> str:
    return subprocess.run(["rabbitmqctl", "-q", *args], check=True, capture_output=True, text=True, timeout=60).stdout


@pytest.fixture
def broker() -> Iterator[str]:
    """The URL of a virtual host made for this test alone."""
    missing = rabbitmq_missing()
    if missing is not None:
        if os.environ.get("TIDINGS_REQUIRE_RABBITMQ") == "1":
            pytest.fail(f"RabbitMQ is required here (TIDINGS_REQUIRE_RABBITMQ=1): {missing}")
        pytest.skip(missing)
    vhost = f"tidings-test-{uuid.uuid4().hex[:8]}"
    rabbitmqctl("add_vhost", vhost)
    try:
        rabbitmqctl("set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")
        yield f"amqp://guest:guest@127.0.0.1:5672/{vhost}"
    finally:
        rabbitmqctl("delete_vhost", vhost)


def broker_of_worker(broker_url: str, name: str) -> dict:
    """What the running worker `name` says of its own broker connection (`inspect stats`)."""
    client = Celery("inspector", broker=broker_url)
    try:
        stats = client.control.inspect(destination=[f"{name}@{socket.gethostname()}"], timeout=5).stats() or {}
    finally:
        client.close()
    return next(iter(stats.values()), {}).get("broker", {})


def test_messages_reach_sent_over_rabbitmq(make_stack, provider, engine, fault_project, broker):
    stack = make_stack(CELERY_BROKER_URL=broker)
    bulk = insert_accepted(engine, fault_project, 300, priority="bulk")
    urgent = insert_accepted(engine, fault_project, 20, priority="transactional")
    stack.start_worker()
    stack.start_beat()
    stack.publish_prepare(bulk, priority="bulk")
    stack.publish_prepare(urgent, priority="transactional")
    seen = wait_until_terminal(engine, bulk + urgent, timeout=60)
    assert_ledger_agrees(bulk + urgent, seen, provider).report("RabbitMQ as the broker", {})
    assert set(seen.values()) == {"sent"}

    vhost = broker.rsplit("/", 1)[1]
    assert {"transport": "amqp", "virtual_host": vhost}.items() <= broker_of_worker(broker, "worker").items()
    declared = set(rabbitmqctl("list_queues", "-p", vhost, "--no-table-headers", "name").split())
    assert {"prepare.bulk", "prepare.transactional", "deliver.fake.bulk", "deliver.fake.transactional"} <= declared
    celery_keys = [key for key in redis.Redis.from_url(stack.redis.url).keys("*") if key.startswith(CELERY_KEYS)]
    assert celery_keys == [], "Celery used the stack's Redis as its broker"


def test_transactional_lanes_on_workers_of_their_own_overtake_a_bulk_backlog(
    make_stack, provider, engine, fault_project, broker
):
    provider.latency = 0.5  # 3,000 bulk messages take 30 calls, 15 rounds of the bulk worker's two slots
    stack = make_stack(CELERY_BROKER_URL=broker)
    queues = worker_queues(["fake"])
    transactional = [q for q in queues if q.endswith(".transactional")]
    others = [q for q in queues if q not in transactional]
    stack.start_worker("urgent", "-Q", ",".join(transactional), "--concurrency", "2")
    stack.start_worker("bulk", "-Q", ",".join(others), "--concurrency", "2")
    stack.start_beat()
    bulk = insert_accepted(engine, fault_project, 3000, priority="bulk")
    stack.publish_prepare(bulk, priority="bulk")
    wait_until(lambda: len(provider.delivered()), bool, 60, "the bulk backlog to start reaching the provider", 0.05)
    at_injection = {"bulk delivered": len(provider.delivered()), "bulk": len(bulk)}
    urgent = insert_accepted(engine, fault_project, 20, priority="transactional")
    stack.publish_prepare(urgent, priority="transactional")

    seen = wait_until_terminal(engine, bulk + urgent, timeout=120)
    tally = assert_ledger_agrees(bulk + urgent, seen, provider)
    assert set(seen.values()) == {"sent"}
    arrivals = [r.message_id for r in sorted(provider.delivered(), key=lambda r: r.at)]
    last_urgent = max(arrivals.index(message_id) for message_id in urgent)
    bulk_ids = set(bulk)
    bulk_before = sum(1 for message_id in arrivals[:last_urgent] if message_id in bulk_ids)
    tally.report("RabbitMQ, transactional lanes on workers of their own", at_injection)
    print(f"  {bulk_before} of {len(bulk)} bulk messages reached the provider before the last transactional one")
    assert bulk_before < len(bulk) // 2
