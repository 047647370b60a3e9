"""Real Tidings processes for fault tests: workers, beat and the API as subprocesses.

Each stack has a Redis of its own (embedded, on a free loopback port) so a test may kill
or restart it without touching anything shared; PostgreSQL is the session's database,
or a stack's own embedded server for tests that restart it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import requests
from celery import Celery
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import Engine, text

from app.runtime.embedded import EmbeddedRedis
from loadtest.harness import Processes
from tests.conftest import ADMIN_KEY, TERMINAL, bearer, make_env
from tests.faults.summary import report_fault
from tests.provider_server import Call, FakeProviderServer
from tests.waiting import wait_until

# Short clocks, so recovery happens within a test's patience.
FAST_RECOVERY = {
    "CLAIM_TIMEOUT_SECONDS": "5",
    "STALLED_AFTER_SECONDS": "3",
    "SWEEP_INTERVAL_SECONDS": "1",
    "RETRY_DELAY_SCALE": "0.02",
    # A worker silent for 3 s (six missed beats) is taken for dead.
    "WORKER_HEARTBEAT_SECONDS": "0.5",
    "WORKER_DEAD_AFTER_SECONDS": "3",
}

# The claim timeout and the stalled sweep far beyond a test's deadline: what settles in time
# was settled by a dead worker's stopped heartbeat (FAST_RECOVERY's) and what it sets off.
SLOW_BACKSTOPS = {"CLAIM_TIMEOUT_SECONDS": "600", "STALLED_AFTER_SECONDS": "600"}


# The Celery pools a worker may run: threads (`tidings worker`'s default) and prefork (what
# `--autoscale` needs, and what docker/compose.yaml runs).
POOLS = ("threads", "prefork")


def fault_pool() -> str:
    """The workers' pool: threads, or TIDINGS_FAULT_POOL (`make test-prefork` runs the fault
    tests again under prefork, those on network-namespace hosts too)."""
    chosen = os.environ.get("TIDINGS_FAULT_POOL", "threads")
    assert chosen in POOLS, f"TIDINGS_FAULT_POOL={chosen!r}: one of {POOLS}"
    return chosen


class Stack(Processes):
    def __init__(
        self, tmp_path: Path, database_url: str, provider_url: str | None, pool: str = "threads", **overrides: str
    ):
        """Email goes to the `fake` provider at `provider_url`; with None, `overrides` say where
        it goes. Workers run `pool` unless a test's own arguments name another."""
        self.pool = pool
        self.redis = EmbeddedRedis().start()
        inherited = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
        fake = {"EMAIL_PROVIDER": "fake", "FAKE_PROVIDER_URL": provider_url} if provider_url is not None else {}
        env = {
            **inherited,
            **make_env(database_url, self.redis.url, **fake),
            **FAST_RECOVERY,
            "TIDINGS_VAR_DIR": str(tmp_path),
            **overrides,
        }
        super().__init__(tmp_path, env)
        self._publisher: Celery | None = None

    def start_worker(self, name: str = "worker", *args: str, **env: str) -> subprocess.Popen:
        """A worker that calls the fake provider at a path of its own name, so the provider's
        ledger says which worker process sent each request (the pace is the provider's, by
        its name, whatever the URL)."""
        url = self.env.get("FAKE_PROVIDER_URL")
        if url:
            env = {"FAKE_PROVIDER_URL": f"{url.rstrip('/')}/{name}", **env}
        return super().start_worker(name, "--pool", self.pool, *args, **env)

    def publish_prepare(self, ids: list[str], priority: str = "bulk") -> None:
        """Queue prepare tasks as the API does after its commit, in chunks of 500."""
        if self._publisher is None:
            self._publisher = Celery("publisher", broker=self.env.get("CELERY_BROKER_URL") or self.redis.url)
            self._publisher.conf.update(task_serializer="json", broker_connection_retry_on_startup=True)
        for start in range(0, len(ids), 500):
            self._publisher.send_task("tidings.prepare", args=(ids[start : start + 500],), queue=f"prepare.{priority}")

    def stop(self) -> None:
        super().stop()
        if self._publisher is not None:
            self._publisher.close()
        self.redis.stop(kill=True)


@dataclass(frozen=True)
class ApiProject:
    """A project made through a real API process, and a live key of it."""

    id: str
    key: str


def api_project(api: str, name: str = "Faults") -> ApiProject:
    """A new project and its key, asked of the API at `api` with the admin key, as an operator would."""
    admin = bearer(ADMIN_KEY)
    project = requests.post(f"{api}/v1/admin/projects", json={"name": name}, headers=admin, timeout=10).json()
    key = requests.post(f"{api}/v1/admin/projects/{project['id']}/keys", json={"name": "k"}, headers=admin, timeout=10)
    return ApiProject(project["id"], key.json()["key"])


def coalesced(api: str) -> tuple[float, float]:
    """(prepare tasks published, messages they carried) by the API's coalescer, so far."""
    families = {f.name: f for f in text_string_to_metric_families(requests.get(f"{api}/metrics", timeout=10).text)}
    tasks, messages = (
        sum(s.value for s in families[f"tidings_{name}"].samples if s.name.endswith("_total"))
        for name in ("coalesced_tasks", "coalesced_messages")
    )
    return tasks, messages


def new_project(engine: Engine) -> str:
    project_id = f"f-{uuid.uuid4().hex[:10]}"
    with engine.begin() as connection:
        connection.execute(
            text("INSERT INTO projects (id, name, channels) VALUES (:id, 'Faults', ARRAY['email','sms'])"),
            {"id": project_id},
        )
    return project_id


def insert_accepted(engine: Engine, project_id: str, count: int, priority: str = "bulk") -> list[str]:
    """`count` accepted email messages, committed as the batch API would write them."""
    with engine.begin() as connection:
        return list(
            connection.execute(
                text(
                    """
                    WITH new AS (
                        INSERT INTO messages (project_id, channel, status, priority, to_address)
                        SELECT :project, 'email', 'accepted', :priority, 'user' || g || '@example.com'
                        FROM generate_series(1, :count) AS g
                        RETURNING id
                    )
                    INSERT INTO message_contents (message_id, subject, text)
                    SELECT id, 'Hello', 'A fault test message' FROM new
                    RETURNING message_id::text
                    """
                ),
                {"project": project_id, "priority": priority, "count": count},
            ).scalars()
        )


def ready_messages(engine: Engine, count: int, project_id: str | None = None) -> list[str]:
    """`count` email messages of a project (a new one by default), ready for the `fake` provider to claim."""
    ids = insert_accepted(engine, project_id or new_project(engine), count)
    with engine.begin() as connection:
        connection.execute(
            text("UPDATE messages SET status = 'ready', provider = 'fake' WHERE id = ANY(CAST(:ids AS uuid[]))"),
            {"ids": ids},
        )
    return ids


def statuses(engine: Engine, ids: Iterable[str]) -> dict[str, str]:
    with engine.connect() as connection:
        rows = connection.execute(
            text("SELECT id::text, status FROM messages WHERE id = ANY(CAST(:ids AS uuid[]))"), {"ids": list(ids)}
        ).all()
    return dict(rows)


def wait_until_terminal(engine: Engine, ids: list[str], timeout: float) -> dict[str, str]:
    """Every message's status once all are terminal; the test fails at the deadline with the
    statuses it saw. A row that is missing is not terminal: it counts as `missing`, so a
    message that vanished fails the wait instead of passing it."""

    def tally(seen: dict[str, str]) -> dict[str, int]:
        return dict(Counter(seen.get(i, "missing") for i in ids))

    return wait_until(
        lambda: statuses(engine, ids),
        lambda seen: len(seen) == len(set(ids)) and all(status in TERMINAL for status in seen.values()),
        timeout,
        f"{len(ids)} messages to be terminal",
        every=0.25,
        show=tally,
    )


class Ledger(Protocol):
    """What a fault test's receiver knows: per message, how often it arrived."""

    def deliveries(self) -> Counter[str]:
        """How many times each message reached its recipient."""
        ...

    def appearances(self) -> Counter[str]:
        """How many requests carried each message, repeats included."""
        ...


# How many deliveries each final status allows: once for what went, at most once for
# `unknown` (the call may or may not have reached the provider), never for any other final
# status (failed, dead, suppressed, cancelled, skipped). A status not here is not final.
ALLOWED_DELIVERIES = {status: (0,) for status in TERMINAL} | {"sent": (1,), "delivered": (1,), "unknown": (0, 1)}
LOST = "lost"  # a message whose row vanished


@dataclass(frozen=True)
class LedgerTally:
    """A fault test's end, per message: its final status, how often it was delivered, and
    how many requests carried a message again (retries, resends; de-duplicated or not)."""

    outcomes: dict[str, int]
    deliveries: dict[int, int]
    repeated_requests: int

    def report(self, fault: str, at_injection: Mapping[str, object]) -> str:
        """The one line per fault test the closing note quotes; kept for the run's summary, and returned."""
        outcomes = {
            **self.outcomes,
            "deliveries per message": self.deliveries,
            "repeated requests": self.repeated_requests,
        }
        return report_fault(fault, at_injection, outcomes)


def assert_ledger_agrees(ids: Iterable[str], seen: Mapping[str, str], ledger: Ledger) -> LedgerTally:
    """The end check of every fault test: each message's final status against how often the
    provider's ledger says it was delivered (sent: once; unknown: at most once; every other
    final status: never). A row that vanished is lost; a status that is not final fails too.
    Every message the test made is counted once, so the outcomes add up to their number, and
    the deliveries to the sent ones plus the unknown ones that arrived. Every violation is
    listed, not only the first."""
    wanted = list(dict.fromkeys(ids))
    assert set(seen) <= set(wanted), f"statuses of messages the test did not make: {set(seen) - set(wanted)}"
    deliveries, appearances = ledger.deliveries(), ledger.appearances()
    outcomes = Counter(seen.get(message_id, LOST) for message_id in wanted)
    wrong = [
        f"{message_id} {seen.get(message_id, LOST)} delivered {deliveries[message_id]}x"
        for message_id in wanted
        if deliveries[message_id] not in ALLOWED_DELIVERIES.get(seen.get(message_id, LOST), ())
    ]
    tally = LedgerTally(
        dict(outcomes),
        dict(Counter(deliveries[message_id] for message_id in wanted)),
        sum(max(appearances[message_id] - 1, 0) for message_id in wanted),
    )
    assert not wrong, f"{len(wrong)} of {len(wanted)} disagree with the ledger ({tally}): {wrong[:10]}"
    return tally


MID_DRAIN = 150  # delivered before the fault: the drain is well under way, far from over


def signal_mid_call(
    stack: Stack, name: str, signum: int, engine: Engine, ids: list[str], provider: FakeProviderServer
) -> tuple[dict[str, int], list[Call]]:
    """Signal worker `name` mid-drain, while one of its provider calls is open: once
    MID_DRAIN have been delivered, one of ours is `sending` and a call of the worker's
    arrived less than half the provider's latency ago, so it is still open when the signal
    lands. Returns the state then (statuses read once the worker is gone) and the worker's
    calls that were open when the signal went; the test fails if none was."""

    def observe() -> tuple[int, int, list[Call]]:
        sending = sum(status == "sending" for status in statuses(engine, ids).values())
        now = time.time()
        young = [c for c in provider.open_requests() if c.sender == name and now - c.started < provider.latency / 2]
        return len(provider.delivered()), sending, young

    wait_until(
        observe,
        lambda seen: seen[0] >= MID_DRAIN and seen[1] >= 1 and seen[2],
        30,
        f"{MID_DRAIN} delivered, one sending and a call of {name} just opened",
        every=0.005,
        show=lambda seen: f"delivered {seen[0]}, sending {seen[1]}, young open calls {len(seen[2])}",
    )
    signalled = time.time()
    # A stop reaches the main process only, as a supervisor sends it (with prefork, a SIGTERM
    # to each pool child would cut its call off); a kill takes the whole group.
    stack.signal(name, signum, group=signum == signal.SIGKILL)
    open_calls = [c for c in provider.open_throughout(signalled, signalled) if c.sender == name]
    state = Counter(statuses(engine, ids).values())
    at_signal = {
        "delivered": len(provider.delivered()),
        "left sending": state["sending"],
        "open calls": len(open_calls),
        "messages in open calls": sum(len(c.message_ids) for c in open_calls),
    }
    assert open_calls, f"no call of {name} was open when the signal went: {at_signal}"
    return at_signal, open_calls
