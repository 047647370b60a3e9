"""Redis and PostgreSQL going away: committed messages still arrive, once."""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
from pgserver._commands import pg_ctl
from sqlalchemy import Engine, create_engine, text

from app.delivery.backlog import queue_depths
from app.runtime import migrate
from app.runtime.embedded import start_postgres
from providers.fake import FakeProvider
from tests.conftest import ADMIN_KEY
from tests.faults.stack import (
    assert_ledger_agrees,
    insert_accepted,
    new_project,
    statuses,
    wait_until_terminal,
)
from tests.faults.test_dead_workers import HELD_REQUEST, HoldOne, wait_mid_call
from tests.provider_server import FakeProviderServer
from tests.waiting import wait_until


def test_redis_lost_with_10000_queued_the_sweeper_delivers_them_all(make_stack, provider, engine, fault_project):
    provider.latency = 0.01
    stack = make_stack()
    ids = insert_accepted(engine, fault_project, 10_000)
    stack.publish_prepare(ids)
    queued = queue_depths(stack.redis.url, ["prepare.bulk"])["prepare.bulk"]
    assert queued == len(ids) // 500, "the prepare tasks must be on the broker when it dies"
    stack.redis.stop(kill=True)  # no persistence: every queued task is gone
    stack.redis.start()
    stack.start_beat()
    stack.start_worker()
    seen = wait_until_terminal(engine, ids, timeout=120)
    tally = assert_ledger_agrees(ids, seen, provider)
    tally.report("Redis lost with 10,000 queued", {"accepted": len(ids), "prepare tasks queued": queued})
    assert tally.outcomes == {"sent": len(ids)}


def test_api_accepts_while_redis_is_down_and_the_messages_follow_later(make_stack, provider, engine):
    stack = make_stack()
    api = stack.start_api()
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    project = requests.post(
        f"{api}/v1/admin/projects", json={"name": "Outage", "rate_limit_per_min": 2}, headers=admin, timeout=10
    ).json()
    key = requests.post(
        f"{api}/v1/admin/projects/{project['id']}/keys", json={"name": "k"}, headers=admin, timeout=10
    ).json()["key"]
    stack.redis.stop(kill=True)
    body = {"channel": "email", "to": {"email": "ada@example.com"}, "content": {"subject": "Hi", "text": "t"}}
    answers = [  # twice the rate limit: the limiter must fail open, not shut
        requests.post(f"{api}/v1/messages", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=30)
        for _ in range(4)
    ]
    assert [a.status_code for a in answers] == [202] * 4
    assert "RateLimit-Limit" not in answers[0].headers
    assert requests.get(f"{api}/readyz", timeout=10).status_code == 503
    ids = [a.json()["id"] for a in answers]
    # The coalescer's publish failed after the 202s: said in the log, left to the sweeper.
    stack.wait_for_log("api", "accepted messages; the sweeper will dispatch them")
    stack.redis.start()
    stack.start_beat()
    stack.start_worker()
    seen = wait_until_terminal(engine, ids, timeout=60)
    tally = assert_ledger_agrees(ids, seen, provider)
    tally.report("Redis down while the API accepts", {"answered 202": len(ids), "readyz": 503})
    assert tally.outcomes == {"sent": len(ids)}


@dataclass
class OwnPostgres:
    """An embedded PostgreSQL of the test's own, which it may stop and start; never the shared one."""

    url: str
    engine: Engine
    pgdata: Path
    user: str

    def pg_ctl(self, *args: str) -> None:
        pg_ctl(["-w", *args], pgdata=self.pgdata, user=self.user)

    def start(self) -> None:
        """Start it again as pgserver did: on its socket only, no TCP port (never 5432's)."""
        sockets = parse_qs(urlsplit(self.url).query)["host"][0]
        self.pg_ctl("-o", '-h ""', "-o", f"-k {sockets}", "-l", str(self.pgdata / "restart.log"), "start")


@pytest.fixture
def own_postgres() -> Iterator[OwnPostgres]:
    """Its data outside pytest's temporary directories: a pytest run started meanwhile (by
    anyone) makes /tmp/pytest-of-<user> private again, and the server's own user could no
    longer reach its data to restart."""
    directory = Path(tempfile.mkdtemp(prefix="tidings-pg-"))
    server = start_postgres(directory / "pg")
    try:
        url = server.get_uri()
        migrate.upgrade(url)
        engine = create_engine(url.replace("postgresql://", "postgresql+psycopg2://", 1))
        yield OwnPostgres(url, engine, server.pgdata, server.system_user)
        engine.dispose()
    finally:
        # pgserver stops the postmaster it started, which a restart replaced: stop the new one.
        with contextlib.suppress(subprocess.CalledProcessError):
            pg_ctl(["-m", "immediate", "-w", "stop"], pgdata=server.pgdata, user=server.system_user)
        server.cleanup()
        shutil.rmtree(directory, ignore_errors=True)


@pytest.mark.parametrize("deduplicating_provider", [True, False], ids=["idempotency-key", "no-key"])
def test_postgres_restarted_mid_drain(make_stack, provider, own_postgres, deduplicating_provider):
    provider.deduplicate = deduplicating_provider
    own = own_postgres.engine
    project = new_project(own)
    ids = insert_accepted(own, project, 1000)
    stack = make_stack(DATABASE_URL=own_postgres.url)
    stack.publish_prepare(ids)
    stack.start_beat()
    stack.start_worker("worker", "--concurrency", str(CONCURRENCY))
    at_restart = wait_until_mid_drain(own, ids)
    own_postgres.pg_ctl("-m", "immediate", "restart")
    restarted = time.time()
    own.dispose()
    seen = wait_until_terminal(own, ids, timeout=90)
    tally = assert_ledger_agrees(ids, seen, provider)
    after = [c for c in provider.calls if c.started >= restarted]
    sent_after = sum(len(c.message_ids) for c in after)
    tally.report(
        f"PostgreSQL restarted mid-drain ({'idempotency key' if deduplicating_provider else 'no key'})",
        {**at_restart, "calls after": len(after), "messages in them": sent_after},
    )
    if deduplicating_provider:
        assert tally.outcomes == {"sent": len(ids)}
    else:
        # A call whose answer the restart kept from the database, or a claim whose commit
        # it cut off, cannot be known to have gone: unknown, never sent again. One claim
        # per worker thread at most, besides what was `sending` already.
        assert set(tally.outcomes) <= {"sent", "unknown"}
        assert tally.outcomes.get("unknown", 0) <= at_restart.get("sending", 0) + CONCURRENCY * FakeProvider.max_batch
    # What waited leaves in batches: one call per message is a run wrongly taken for dead.
    assert sent_after >= 10 * len(after), f"{len(after)} calls for {sent_after} messages"
    with own.connect() as connection:
        unclaimed_yet_sent = connection.execute(
            text("SELECT count(*) FROM messages WHERE id = ANY(CAST(:ids AS uuid[])) AND attempts = 0"),
            {"ids": [r.message_id for r in provider.delivered()]},
        ).scalar_one()
    assert unclaimed_yet_sent == 0
    stack.stop()


# How long PostgreSQL stays away with a provider call's answers in a worker's hands, and
# how soon after it returns every message must be settled.
OUTAGE_SECONDS = 10.0
SETTLED_WITHIN = 15.0


@pytest.mark.parametrize("worker_killed", [False, True], ids=["worker-lives", "worker-killed-meanwhile"])
def test_answers_of_a_call_made_while_postgres_went_away_are_written_when_it_returns(
    make_stack, provider, own_postgres, worker_killed
):
    """PostgreSQL stops while a provider call is open; the provider accepts it; ten seconds
    later PostgreSQL starts again. The answers were kept (in the worker's memory, and in
    Redis for a worker killed meanwhile, whose claims the sweeper then writes): every
    message ends `sent`, none `unknown`, although the claim timeout (5 s) passed."""
    provider.override = held = HoldOne(HELD_REQUEST)
    own = own_postgres.engine
    ids = insert_accepted(own, new_project(own), 300)
    stack = make_stack(DATABASE_URL=own_postgres.url)
    stack.start_beat()
    stack.start_worker("a", "--concurrency", str(CONCURRENCY))
    stack.publish_prepare(ids)
    try:
        injection = wait_mid_call(own, ids, lambda: held.ids, lambda: held.open)
        own_postgres.pg_ctl("-m", "immediate", "stop")
        stopped = time.monotonic()
    finally:
        held.release()
    wait_until(provider.open_requests, lambda open_now: not open_now, 30, "the held call answered")
    if worker_killed:  # once it kept the answers, which it could not write
        stack.wait_for_log("a", "answers kept (in memory and Redis)")
        stack.signal("a", signal.SIGKILL)
    time.sleep(max(0.0, stopped + OUTAGE_SECONDS - time.monotonic()))  # the outage's length, not a wait for a state
    own_postgres.start()
    restarted = time.monotonic()
    own.dispose()  # the test's own connections died with the server
    if worker_killed:  # its successor, which could not start without PostgreSQL; its start is not ours to time
        stack.start_worker("b", "--concurrency", str(CONCURRENCY))
    waiting_from = time.monotonic()
    seen = wait_until_terminal(own, ids, timeout=SETTLED_WITHIN)
    settled = time.monotonic() - restarted
    tally = assert_ledger_agrees(ids, seen, provider)
    tally.report(
        f"PostgreSQL stopped {OUTAGE_SECONDS:g} s mid-call ({'worker killed' if worker_killed else 'worker lives'})",
        {
            "statuses": injection.statuses,
            "open requests": injection.open_requests,
            "settled after the restart (s)": round(settled, 1),
            "of which the successor's start (s)": round(waiting_from - restarted, 1),
        },
    )
    assert tally.outcomes == {"sent": len(ids)}
    assert set(held.ids) <= set(provider.deliveries())
    stack.stop()


# Seconds PostgreSQL stays away mid-drain, and within how long of its return the drain goes on.
RESUMES_WITHIN = 5.0


def test_the_drain_resumes_within_seconds_of_postgres_returning(make_stack, provider, own_postgres):
    """PostgreSQL stops mid-drain for ten seconds. The prepare and deliver tasks that fail
    meanwhile run again on a short backoff (tasks/reconnect.py), with the stalled sweep far
    beyond the test's deadlines: only the retries can resume the drain in time."""
    own = own_postgres.engine
    ids = insert_accepted(own, new_project(own), 1000)
    stack = make_stack(DATABASE_URL=own_postgres.url, STALLED_AFTER_SECONDS="600")
    stack.publish_prepare(ids)
    stack.start_beat()
    stack.start_worker("worker", "--concurrency", str(CONCURRENCY))

    def start() -> None:
        own_postgres.start()
        own.dispose()  # the test's own connections died with the server

    stop = lambda: own_postgres.pg_ctl("-m", "immediate", "stop")  # noqa: E731 - as short as its name
    drain_through_outage(provider, own, ids, "PostgreSQL", stop, start)


def test_the_drain_resumes_within_seconds_of_redis_returning(make_stack, provider, engine, fault_project):
    """Redis, the broker, dies mid-drain without persistence and comes back empty ten
    seconds later: every queued task is gone. The worker, connected again, has the waiting
    rows dispatched again at once (tasks/reconnect.py), with the stalled sweep far beyond
    the test's deadlines."""
    ids = insert_accepted(engine, fault_project, 1000)
    stack = make_stack(STALLED_AFTER_SECONDS="600")
    stack.publish_prepare(ids)
    stack.start_beat()
    stack.start_worker("worker", "--concurrency", str(CONCURRENCY))
    drain_through_outage(provider, engine, ids, "Redis", lambda: stack.redis.stop(kill=True), stack.redis.start)


def drain_through_outage(
    provider: FakeProviderServer,
    engine: Engine,
    ids: list[str],
    server: str,
    stop: Callable[[], object],
    start: Callable[[], object],
) -> None:
    """`stop` the server mid-drain, `start` it OUTAGE_SECONDS later: a provider call within
    RESUMES_WITHIN of its return, every message settled within SETTLED_WITHIN plus the time
    what was left takes at the pace before the outage, and the ledger agrees."""
    at_stop = wait_until_mid_drain(engine, ids)
    first_call = provider.calls[0].started
    stop()
    stopped = time.time()
    pace = at_stop["sent"] / (stopped - first_call)  # messages a second before the outage
    time.sleep(OUTAGE_SECONDS)  # the outage's length, not a wait for a state
    start()
    returned = time.time()
    wait_until(
        lambda: [c for c in provider.calls if c.started >= returned and c.status == 200],
        bool,
        RESUMES_WITHIN,
        f"a provider call after {server} returned",
    )
    resumed = min(c.started for c in provider.calls if c.started >= returned) - returned
    left = sum(at_stop.get(s, 0) for s in WAITING)
    seen = wait_until_terminal(engine, ids, timeout=SETTLED_WITHIN + left / pace)
    settled = time.time() - returned
    tally = assert_ledger_agrees(ids, seen, provider)
    tally.report(
        f"{server} away {OUTAGE_SECONDS:g} s mid-drain",
        {
            **at_stop,
            "drain resumed after its return (s)": round(resumed, 1),
            "settled after its return (s)": round(settled, 1),
            "drain time of what was left at the pace before (s)": round(left / pace, 1),
        },
    )
    assert set(tally.outcomes) <= {"sent", "unknown"}
    # Unknown only where a claim's commit was cut off: one claim per worker thread at most.
    assert tally.outcomes.get("unknown", 0) <= CONCURRENCY * FakeProvider.max_batch


CONCURRENCY = 2  # the worker's threads in the PostgreSQL restart
# Not yet claimed: what must still be sent after a restart, by whoever.
WAITING = ("accepted", "ready", "retrying")


def wait_until_mid_drain(engine: Engine, ids: list[str]) -> dict[str, int]:
    """The statuses once at least one provider batch is committed `sent` and at least one
    message still waits: a restart before the first or after the last tests nothing."""
    seen = wait_until(
        lambda: Counter(statuses(engine, ids).values()),
        lambda counts: counts["sent"] >= FakeProvider.max_batch and sum(counts[s] for s in WAITING) >= 1,
        30,
        "a batch committed and a message waiting",
        every=0.01,
        show=dict,
    )
    return dict(seen)
