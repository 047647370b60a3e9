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
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from celery import Celery

from app.delivery.queues import worker_queues
from app.runtime.embedded import free_port
from tests.faults.stack import SLOW_BACKSTOPS, assert_ledger_agrees, insert_accepted, wait_until_terminal
from tests.provider_server import FakeProviderServer
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


# The server itself, not /usr/sbin's wrapper, which would run it as the rabbitmq user.
RABBITMQ_SERVER = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")
NODE_BOOT_SECONDS = 120  # a node boots in 5 to 35 s on a loaded two-core machine


class RabbitNode:
    """A RabbitMQ node of a test's own: its own name, ports, database and logs under
    `directory`, no plugins, and none of the machine's configuration. Killed with SIGKILL,
    it loses what it held; started again, it has its database back."""

    def __init__(self, directory: Path, name: str) -> None:
        directory.mkdir()
        self.directory, self.port = directory, free_port()
        (directory / "rabbitmq.conf").write_text(f"listeners.tcp.local = 127.0.0.1:{self.port}\n")
        (directory / "enabled_plugins").write_text("[].\n")
        (directory / "rabbitmq-env.conf").write_text("")
        self.env = {
            **os.environ,
            "HOME": str(directory),  # its own Erlang cookie
            "RABBITMQ_NODENAME": f"{name}-{uuid.uuid4().hex[:6]}@localhost",
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(free_port()),
            "RABBITMQ_CONF_ENV_FILE": str(directory / "rabbitmq-env.conf"),
            "RABBITMQ_CONFIG_FILE": str(directory / "rabbitmq.conf"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(directory / "enabled_plugins"),
            "RABBITMQ_MNESIA_BASE": str(directory / "mnesia"),
            "RABBITMQ_LOG_BASE": str(directory / "log"),
            "ERL_EPMD_ADDRESS": "127.0.0.1",
        }
        self.url = f"amqp://guest:guest@127.0.0.1:{self.port}//"
        self.process: subprocess.Popen | None = None

    def start(self) -> RabbitNode:
        """Boot the node; `wait` for it to take connections."""
        log = open(self.directory / "server.log", "a")  # noqa: SIM115 - the node writes to it until stopped
        self.process = subprocess.Popen(
            [str(RABBITMQ_SERVER)], env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        return self

    def wait(self) -> float:
        """Seconds until the node took a connection; the test fails at NODE_BOOT_SECONDS."""
        started = time.monotonic()
        wait_until(self._answers, bool, NODE_BOOT_SECONDS, f"RabbitMQ on port {self.port} to boot", every=0.2)
        return time.monotonic() - started

    def _answers(self) -> bool:
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
        except OSError:
            return False
        return True

    def kill(self) -> None:
        """SIGKILL to the node's whole process group, as a crash takes it."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)
        self.process = None


@pytest.fixture
def rabbit_pair(tmp_path) -> Iterator[tuple[RabbitNode, RabbitNode]]:
    """Two RabbitMQ nodes of the test's own, booted side by side; killed at the end."""
    if not RABBITMQ_SERVER.exists():
        pytest.fail(f"{RABBITMQ_SERVER} is not installed: no node of the test's own can be started")
    nodes = (RabbitNode(tmp_path / "rabbit-a", "tidings-a"), RabbitNode(tmp_path / "rabbit-b", "tidings-b"))
    try:
        for node in nodes:
            node.start()
        for node in nodes:
            node.wait()
        yield nodes
    finally:
        for node in nodes:
            node.kill()


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


FAILOVER_DEADLINE = 15.0  # the drain resumes on the other node within this (the outage targets' settle time)
DRAIN = 15.0  # 3,000 messages at 200 a second


def resumed_after(provider: FakeProviderServer, since: float, what: str) -> float:
    """Seconds from `since` (time.time()) to the first call that arrived after it; the test
    fails at FAILOVER_DEADLINE."""
    first = wait_until(
        lambda: min((r.at for r in provider.delivered() if r.at > since), default=None),
        lambda at: at is not None,
        FAILOVER_DEADLINE,
        what,
        every=0.05,
    )
    return first - since


def test_a_failover_list_of_two_nodes_loses_the_primary_then_the_second(
    make_stack, provider, engine, fault_project, rabbit_pair
):
    """Celery's broker-failover smoke test: workers and beat given both nodes; the primary
    killed mid-drain, the drain goes on over the second; then the second killed and the
    primary started again, the drain goes on over it. What each killed node held (queued
    tokens and tasks) is gone with it: the reconnecting worker dispatches the waiting rows
    and gives every waiting chunk a token again. The claim timeout and stalled sweep at 600 s:
    only the reconnect can do it."""
    primary, second = rabbit_pair
    provider.latency = 1.0  # 3,000 messages take 15 s at two calls of 100 a second
    stack = make_stack(CELERY_BROKER_URL=f"{primary.url};{second.url}", **SLOW_BACKSTOPS)
    ids = insert_accepted(engine, fault_project, 3000)
    stack.start_beat()
    stack.start_worker("worker", "--concurrency", "2")
    stack.publish_prepare(ids)
    wait_until(lambda: len(provider.delivered()), lambda n: n >= 300, 60, "300 delivered over the primary", 0.05)
    killed = time.time()
    at_kills = {"delivered at the primary's kill": len(provider.delivered())}
    primary.kill()
    over_second = resumed_after(provider, killed, "a call after the primary's kill")
    wait_until(
        lambda: sum(r.at > killed for r in provider.delivered()), lambda n: n >= 300, 60, "300 over the second", 0.05
    )
    at_kills["delivered at the second's kill"] = len(provider.delivered())
    second.kill()
    primary.start()
    boot = primary.wait()
    back = time.time()
    over_primary = resumed_after(provider, back, "a call after the primary came back")
    seen = wait_until_terminal(engine, ids, timeout=FAILOVER_DEADLINE + DRAIN)
    tally = assert_ledger_agrees(ids, seen, provider)
    print(
        tally.report(
            f"RabbitMQ failover: resumed {over_second:.1f} s after the primary's kill, {over_primary:.1f} s after "
            f"it was back ({boot:.0f} s to boot), settled {time.time() - back:.1f} s after",
            at_kills,
        )
    )
    assert set(seen.values()) <= {"sent", "unknown"}
