"""Workers on several hosts: one per Linux network namespace, sharing PostgreSQL, Redis and a provider.

Each host reaches the servers only over its own link to a bridge the test builds
(tests/netns.py), so the provider sees which host sent what, and one host's network can be
cut while the others go on. The provider does not de-duplicate: what it counts is what was
delivered. The tests run in file order on one set of hosts; the network cut comes last.
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine

from tests.databases import Databases
from tests.faults.stack import (
    Stack,
    assert_ledger_agrees,
    fault_pool,
    insert_accepted,
    new_project,
    report_fault,
    statuses,
    wait_until_terminal,
)
from tests.netns import Host, HostProvider, Network, namespaces_unavailable
from tests.waiting import wait_until

pytestmark = pytest.mark.netns

HOSTS = 3
# The provider's pace, shared by every worker on every host.
PACE = 30
# The pacer admits PACE calls per 1.1 s of stamped grants (Redis time; app/delivery/pacing.py);
# this bound dates from 1.05 s windows of unstamped grants. The provider stamps a call
# after the worker's claim in PostgreSQL, the HTTP request and its own hold. Read from Redis
# beside the provider's stamps, that lag ran from 0.08 to 0.27 s on this loaded 2-core
# machine (a host's first call the slowest), so two full calls ≥ 1.05 s apart at the pacer
# were seen 0.96 s apart at the provider: 60 in its busiest second. Windows shorter than a
# second by more than that spread take the lag out; pacing per host (three times PACE a
# second) or a token bucket (PACE plus its refill) still fail them.
EDGE = 0.25
# A request stays open this long at the provider, so the cut can land while one is.
PROVIDER_LATENCY = 0.05


class HostStack(Stack):
    """A stack whose named workers run on hosts of `network`, reaching PostgreSQL and Redis
    through its relays; beat and the test itself stay in the root namespace."""

    def __init__(self, tmp_path: Path, network: Network, database_url: str, provider_url: str, **overrides: str):
        super().__init__(tmp_path, network.expose(database_url), provider_url, fault_pool(), **overrides)
        redis_url = network.expose(self.redis.url)
        self.env.update(REDIS_URL=redis_url, CELERY_BROKER_URL=redis_url)
        self.placement: dict[str, Host] = {}

    def start_worker_on(self, host: Host, *args: str) -> None:
        """A worker named after `host`, running inside it."""
        self.placement[host.name] = host
        self.start_worker(host.name, *args)

    def start(self, name: str, command: Sequence[str], ready: str, **env: str) -> subprocess.Popen:
        host = self.placement.get(name)
        return super().start(name, host.command(command) if host is not None else command, ready, **env)


@pytest.fixture(scope="module")
def network() -> Iterator[Network]:
    reason = namespaces_unavailable()
    if reason is not None:
        pytest.skip(reason)
    network = Network(HOSTS)
    yield network
    network.close()


@pytest.fixture(scope="module")
def database(databases: Databases) -> Iterator[str]:
    """A database of this module's own on the session's server: no earlier test's rows for
    its sweeper to hand the hosts, nothing of theirs at the provider."""
    with databases.own() as url:
        yield url


@pytest.fixture(scope="module")
def engine(database: str) -> Iterator[Engine]:
    """This module's database, from the root namespace (overrides the session's `engine`)."""
    engine = create_engine(database)
    yield engine
    engine.dispose()


@pytest.fixture(scope="module")
def provider(network: Network) -> Iterator[HostProvider]:
    server = HostProvider(network.address, latency=PROVIDER_LATENCY).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def stack(tmp_path_factory, network: Network, database: str, provider: HostProvider) -> Iterator[HostStack]:
    stack = HostStack(
        tmp_path_factory.mktemp("hosts"),
        network,
        database,
        provider.url,
        FAKE_RATE_PER_SEC=str(PACE),
        FAKE_PROVIDER_IDEMPOTENT="false",  # as the provider is: an abandoned claim must not be sent again
    )
    try:
        with ThreadPoolExecutor() as starting:  # each takes seconds of CPU to boot: boot them side by side
            booted = [starting.submit(stack.start_worker_on, host, "--concurrency", "2") for host in network.hosts]
            booted.append(starting.submit(stack.start_beat))
        for boot in booted:
            boot.result()
        yield stack
    finally:
        stack.stop()


def busiest(times: list[float], width: float) -> tuple[int, dict[float, int]]:
    """The most arrivals in any window of `width` seconds that starts at an arrival, and that
    window's arrivals by time (seconds after its start: one time per provider call)."""
    times = sorted(times)
    most, start = max((sum(1 for t in times[i:] if t < begin + width), begin) for i, begin in enumerate(times))
    return most, dict(sorted(Counter(round(t - start, 3) for t in times if start <= t < start + width).items()))


def test_hosts_share_one_pace(stack, provider, engine, network):
    ids = insert_accepted(engine, new_project(engine), 240)
    stack.publish_prepare(ids)
    seen = wait_until_terminal(engine, ids, timeout=60)
    assert_ledger_agrees(ids, seen, provider)
    counts = provider.deliveries()
    ours = set(ids)
    arrivals = [r.at for r in provider.delivered() if r.message_id in ours]
    second, _ = busiest(arrivals, 1.0)
    within, window = busiest(arrivals, 1.0 - EDGE)
    by_host = provider.by_host(ids)
    report_fault(
        "hosts-share-one-pace",
        {"hosts": len(network.hosts), "pace_per_second": PACE, "messages": len(ids)},
        {
            "statuses": dict(Counter(seen.values())),
            "sends_by_host": dict(by_host),
            "busiest_second": second,
            f"busiest_{1.0 - EDGE:g}_s": within,
        },
    )
    assert set(seen.values()) == {"sent"}
    assert set(counts.values()) == {1}
    # Two hosts sending under one pace prove it is shared. Not all three: which idle worker a
    # task reaches is the broker's choice, and CI twice saw one host get its first after 9 s.
    assert len(by_host) >= 2, f"only {set(by_host)} sent"
    assert within <= PACE, f"calls in the busiest {1.0 - EDGE:g} s: {window}"


def delivered_in_order(provider: HostProvider, ids: set[str]) -> list[str]:
    """The messages of `ids` in the order the provider took them, by its own receipt times."""
    return [r.message_id for r in sorted(provider.delivered(), key=lambda r: r.at) if r.message_id in ids]


def test_transactional_overtakes_bulk_across_hosts(stack, provider, engine, network):
    project = new_project(engine)
    bulk = insert_accepted(engine, project, 360)
    stack.publish_prepare(bulk)
    # Inject once two seconds of the backlog are sent: most of it still waits. Waiting for
    # every host to have sent some of it instead once took 11 s (one host's first grant came
    # late), leaving 30 of 360 to overtake: too few to tell overtaking from luck.
    wait_until(
        lambda: sum(provider.by_host(bulk).values()),
        lambda sent: sent >= 2 * PACE,
        30,
        "two seconds of the bulk backlog to have been sent",
    )
    bulk_before = sum(provider.by_host(bulk).values())
    urgent = insert_accepted(engine, project, 10, priority="transactional")
    stack.publish_prepare(urgent, priority="transactional")
    seen = wait_until_terminal(engine, bulk + urgent, timeout=60)
    assert_ledger_agrees(bulk + urgent, seen, provider)
    counts = provider.deliveries()
    order = delivered_in_order(provider, set(bulk) | set(urgent))
    last_urgent = max(order.index(message_id) for message_id in urgent)
    bulk_after = sum(1 for message_id in order[last_urgent:] if message_id not in set(urgent))
    report_fault(
        "transactional-overtakes-bulk",
        {"bulk_sent": bulk_before, "bulk_waiting": len(bulk) - bulk_before, "transactional": len(urgent)},
        {
            "statuses": dict(Counter(seen.values())),
            "bulk_sent_before_last_transactional": last_urgent + 1 - len(urgent) - bulk_before,
            "bulk_sent_after_it": bulk_after,
            "sends_by_host": dict(provider.by_host(bulk + urgent)),
        },
    )
    assert set(seen.values()) == {"sent"}
    assert set(counts.values()) == {1}
    assert bulk_after >= (len(bulk) - bulk_before) // 2, "the transactional messages waited behind the backlog"


def test_a_host_cut_off_mid_call_loses_nothing(stack, provider, engine, network):
    """Last in the file: the host it cuts off stays cut off.

    The victim is the first host to call the provider a second time: it has sent some, and
    the call the provider is holding is work in flight. Its link goes down before the answer
    leaves, so the provider has taken those messages and the victim can never say so.
    """
    ids = insert_accepted(engine, new_project(engine), 300)
    hosts = {host.address: host for host in network.hosts}
    injection: dict[str, Any] = {}
    choosing = threading.Lock()
    cut_at: list[float] = []

    def cut_mid_call(request) -> None:
        carried = [m["id"] for m in request.get_json()["messages"]]
        with choosing:
            if injection or provider.by_host(ids)[request.remote_addr] <= len(carried):
                return None
            hosts[request.remote_addr].cut()
            cut_at.append(time.time())
            injection.update(
                victim=request.remote_addr,
                victim_sent_before=provider.by_host(ids)[request.remote_addr] - len(carried),
                in_flight_request=carried,
                sends_by_host=dict(provider.by_host(ids)),
                statuses=dict(Counter(statuses(engine, ids).values())),
            )
        return None

    provider.override = cut_mid_call
    stack.publish_prepare(ids)
    try:
        wait_until(lambda: dict(injection), bool, 30, "a host's second call to the provider, to cut it off in")
    finally:
        provider.override = None
    victim = hosts[injection["victim"]]
    victim_sends = provider.by_host(ids)[victim.address]
    # Rows the pace put off are due when the pace has room, not when their token wakes
    # (tasks/deliver.py `postpone`): once 55 rows waited a token's spread, 53 s, after the cut.
    seen = wait_until_terminal(engine, ids, timeout=60)
    settled = time.time() - cut_at[0]
    stack.signal(victim.name, signal.SIGKILL)  # it cannot hear a SIGTERM's shutdown through
    assert_ledger_agrees(ids, seen, provider)
    counts = provider.deliveries()
    in_flight = injection.pop("in_flight_request")
    by_host = provider.by_host(ids)
    report_fault(
        "host-cut-off-mid-call",
        {**injection, "in_flight_request": len(in_flight)},
        {
            "statuses": dict(Counter(seen.values())),
            "deliveries_per_message": dict(Counter(counts[i] for i in ids)),
            "sends_by_host": dict(by_host),
            "settled after the cut (s)": round(settled, 1),
        },
    )
    assert {seen[i] for i in in_flight} == {"unknown"}, "the sweeper settled the cut-off call's claims"
    assert all(counts[i] == 1 for i in in_flight), "the provider took the cut-off call's messages once"
    assert set(seen.values()) <= {"sent", "unknown"}
    assert by_host[victim.address] == victim_sends, "nothing left the cut-off host"
    before = injection["sends_by_host"]
    assert all(by_host[a] > before.get(a, 0) for a in hosts if a != victim.address), "the others finished its work"
