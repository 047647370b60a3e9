"""The poison matrix through the real API and real worker processes, under the threads pool
and under prefork.

For each kind of poison a tenant can send, store or answer, project A sends one poisoned
message while project B sends 99 good webhook-channel messages, to a gunicorn `tidings api`
and on to one `tidings worker` on every queue (and beat): either as one batch each, or as
single sends that the API's coalescer merges into one prepare task, A's poison among B's;
the batches' rows are handed to the worker as one prepare task likewise.

Each of B's 99 must reach its receiver exactly once (the receiver's own ledger of
`webhook-id`s, which forgives no repeat) within a bounded time, the poison must end with
its status and reason, nothing of either project may be left at work, and the worker must
be the same process with the same pool children: a poison that killed or replaced a
process would show there even when the messages came out right.

Email goes through the real SMTP adapter to an aiosmtpd relay, webhooks through the real
webhook adapter: a poison that slipped past its check would go where a real one would.
One stack per pool serves all its cases; each case works in two fresh projects of its own.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import psutil
import pytest
import requests
from aiosmtpd.controller import Controller
from pytest_httpserver import HTTPServer
from sqlalchemy import Engine, Row, create_engine, text
from werkzeug import Request, Response

from app.runtime.embedded import free_port
from tests.conftest import TERMINAL, WEBHOOK_ENVIRON, bearer
from tests.databases import Databases
from tests.faults.stack import POOLS, ApiProject, Stack, api_project, assert_ledger_agrees, coalesced
from tests.hostile_server import HostileServer
from tests.smtp_relay import Mailbox
from tests.waiting import wait_until

GOOD = 99
CONCURRENCY = {
    "threads": ("--concurrency", "8"),  # what `tidings worker` runs by default
    "prefork": ("--concurrency", "2"),  # one child per core
}
CHILDREN = {"threads": 0, "prefork": 2}
# Long enough that 100 single sends through gunicorn all fall in one linger: they took
# 0.2-0.5 s on a busy 2-core box, up to 1.7 s while other test runs shared it.
LINGER = 2.0
CLIENTS = 8  # concurrent senders of the single sends
POISON_AT = 40  # the poison's place among B's single sends
# The bound on a case: all 100 messages final by then. The slowest poison (drip) costs two
# attempts of WEBHOOK_TIMEOUT and one short retry wait.
SETTLE_TIMEOUT = 30.0
# The batch path's sends are held back this far ahead, for the test to release them together.
HELD_BACK = timedelta(days=1)
# Hostile receivers answer with this status: a refusal, so the adapter reads the answer into
# the poison's reason (where its body's bulk, encoding and NUL bytes matter) and fails it.
REFUSED = 400
# A stored reason quotes at most an excerpt of what a receiver or a template made.
MAX_REASON = 400


class Ledger:
    """A webhook receiver that records every delivery's `webhook-id` (the message id), repeats included."""

    def __init__(self) -> None:
        self.server = HTTPServer(host="127.0.0.1", port=0, threaded=True)
        self.ids: Counter[str] = Counter()
        self._lock = threading.Lock()

    def start(self) -> Ledger:
        self.server.start()
        self.server.expect_request("/hook", method="POST").respond_with_handler(self._record)
        return self

    def _record(self, request: Request) -> Response:
        with self._lock:
            self.ids[request.headers["webhook-id"]] += 1
        return Response("ok")

    def deliveries(self) -> Counter[str]:
        """Every request is a delivery: this receiver drops no repeat."""
        with self._lock:
            return Counter(self.ids)

    def appearances(self) -> Counter[str]:
        return self.deliveries()

    @property
    def url(self) -> str:
        return self.server.url_for("/hook")


@pytest.fixture
def ledger() -> Iterator[Ledger]:
    receiver = Ledger().start()
    yield receiver
    receiver.server.stop()


@dataclass(frozen=True)
class Poison:
    """One kind of poison: what A sends, what must be in place first, and how it must end:
    its final `status`, and the start of its stored error (`reason`).

    `body` is the send's content or template; `to` is the recipient, unless `receiver` names
    a hostile behaviour to send to instead; `template` is saved through the API first (the
    poison is in the data, not the source: a bad source is a 422 at save); `subscriber` is
    stored by hand, past the API's checks that refuse it now, as rows written before those
    checks may hold it; `vanishing`: the pinned template version is deleted by hand after
    the send and before prepare.
    """

    channel: str
    body: dict[str, Any]
    status: str
    reason: str
    to: dict[str, str] = field(default_factory=lambda: {"email": "ada@example.com"})
    receiver: str | None = None
    template: dict[str, str] | None = None
    subscriber: dict[str, Any] | None = None
    vanishing: bool = False

    def recipient(self, hostile: HostileServer) -> dict[str, str]:
        return {"url": hostile.url(self.receiver, REFUSED)} if self.receiver else self.to


def rendered(source: dict[str, str], data: dict[str, Any], reason: str) -> Poison:
    """An email whose template renders `data` into something that must never go out."""
    return Poison("email", {"template": "poison", "data": data}, "failed", reason, template=source)


def answered(behaviour: str, status: str, reason: str) -> Poison:
    """A webhook to a receiver that answers with `behaviour`."""
    return Poison("webhook", {"content": {"text": "t"}}, status, reason, receiver=behaviour)


POISONS = {
    "template bomb": rendered(
        {"text": "{{ ((x ** 1000) ** 1000) ** 30 > 0 }}"},
        {"x": 10},
        "render error in text: not allowed: the template makes an integer of more than 4096 bits",
    ),
    "NUL from rendering": rendered(
        {"text": "{{ n.to_bytes(1, 'big').decode() }}"},
        {"n": 0},
        "render error in text: not allowed: the output contains the control character U+0000",
    ),
    "CR/LF into the subject": rendered(
        {"subject": "{{ s }}"},
        {"s": "a\r\nBcc: x@evil.example"},
        "render error in subject: not allowed: the output contains a line break (U+000D), and a subject is one line",
    ),
    # Several lines to the email library, as CR/LF are: the API refuses it inline (422).
    "line separator into the subject": rendered(
        {"subject": "{{ s }}"},
        {"s": "a\u2028Bcc: x@evil.example"},
        "render error in subject: not allowed: the output contains a line break (U+2028), and a subject is one line",
    ),
    "webhook_url that is no string": Poison(
        "webhook",
        {"content": {"text": "t"}},
        "failed",
        "subscriber 'u1' has no webhook address",
        to={"subscriber_id": "u1"},
        subscriber={"webhook_url": 1},
    ),
    "template version that is gone": Poison(
        "email",
        {"template": "poison"},
        "failed",
        "prepare could not be processed: KeyError: (",
        template={"text": "t"},
        vanishing=True,
    ),
    "receiver answering forever": answered("endless", "failed", f"HTTP {REFUSED} from the receiver: endless endless"),
    "receiver answering a gzip bomb": answered("bomb", "failed", f"HTTP {REFUSED} from the receiver: bomb bomb"),
    # The deadline passes on every attempt: the receiver may have taken it, so it is tried
    # again (webhook-id lets a receiver drop repeats) until its attempts are spent.
    "receiver dripping a byte at a time": answered("drip", "dead", "ambiguous: no complete answer within 1s"),
    "receiver answering NUL": answered(
        "nul", "failed", f"HTTP {REFUSED} from the receiver: refused\ufffd\ufffd by the receiver"
    ),
}


@dataclass
class Running:
    """A stack of one pool: the API's URL, and when its coalescer is surely quiet again."""

    stack: Stack
    api: str
    engine: Engine
    quiet_from: float = 0.0

    @property
    def worker(self) -> subprocess.Popen:
        return self.stack.processes["worker"]


@dataclass(frozen=True)
class Relay:
    mailbox: Mailbox
    port: int


@pytest.fixture(scope="module")
def relay() -> Iterator[Relay]:
    """The SMTP relay every stack's email goes to; nothing may ever reach it here."""
    mailbox, port = Mailbox(), free_port()
    controller = Controller(mailbox, hostname="127.0.0.1", port=port)
    controller.start()
    yield Relay(mailbox, port)
    controller.stop()


@pytest.fixture(scope="module", params=POOLS)
def running(request, tmp_path_factory, databases: Databases, relay: Relay) -> Iterator[Running]:
    """The API, one worker of the pool on every queue, and beat (the sweeper, scheduled
    releases), on a database of their own."""
    pool = request.param
    environ = {
        **WEBHOOK_ENVIRON,
        "WEBHOOK_PROVIDER": "webhook",
        "WEBHOOK_MAX_ATTEMPTS": "2",  # B's never retry; a dripping receiver is out of attempts sooner
        "EMAIL_PROVIDER": "smtp",
        "SMTP_HOST": "127.0.0.1",
        "SMTP_PORT": str(relay.port),
        "SMTP_SECURITY": "none",
        "EMAIL_FROM": "Tidings <tidings@example.com>",
        "PREPARE_LINGER_MS": str(int(LINGER * 1000)),
    }
    with databases.own() as database:
        stack = Stack(tmp_path_factory.mktemp(f"poison-{pool}"), database, None, pool, **environ)
        engine = create_engine(database)
        try:
            api = stack.start_api()
            worker = stack.start_worker("worker", *CONCURRENCY[pool])
            stack.start_beat()
            assert len(worker_processes(worker)[1]) == CHILDREN[pool], f"not the {pool} pool"
            yield Running(stack, api, engine)
        finally:
            stack.stop()
            engine.dispose()


@pytest.fixture
def engine(running: Running) -> Engine:
    """The running stack's database (overrides the faults' database per test)."""
    return running.engine


def worker_processes(process: subprocess.Popen) -> tuple[int, frozenset[int]]:
    """The worker's main pid and its pool children's (none under threads); it must be alive."""
    assert process.poll() is None, f"the worker exited with {process.returncode}"
    return process.pid, frozenset(child.pid for child in psutil.Process(process.pid).children())


def post(http: requests.Session, api: str, project: ApiProject, path: str, body: dict[str, Any]) -> dict[str, Any]:
    answer = http.post(f"{api}{path}", json=body, headers=bearer(project.key), timeout=30)
    assert answer.status_code == 202, answer.text
    return answer.json()


def make_ready(api: str, engine: Engine, poison: Poison, project: ApiProject) -> None:
    """What the poison needs before its send: its template (through the API), its subscriber (by hand)."""
    if poison.template is not None:
        body = {"key": "poison", "channel": poison.channel, "subject": "s", "text": "t", **poison.template}
        answer = requests.post(f"{api}/v1/templates", json=body, headers=bearer(project.key), timeout=10)
        assert answer.status_code == 201, f"refused at save, so not this test's poison: {answer.text}"
    if poison.subscriber is not None:
        with engine.begin() as connection:
            connection.execute(
                text("INSERT INTO subscribers (project_id, external_id, data) VALUES (:p, 'u1', CAST(:data AS jsonb))"),
                {"p": project.id, "data": json.dumps(poison.subscriber)},
            )


def vanish(engine: Engine, project: ApiProject, waiting: str) -> int:
    """Delete the project's template (every version); how many of its messages were still `waiting`."""
    with engine.begin() as connection:
        connection.execute(text("DELETE FROM templates WHERE project_id = :p"), {"p": project.id})
        return connection.execute(
            text("SELECT count(*) FROM messages WHERE project_id = :p AND status = :waiting"),
            {"p": project.id, "waiting": waiting},
        ).scalar_one()


# What each of B's messages is, less its recipient: a webhook to the ledger.
GOOD_BODY = {"channel": "webhook", "content": {"text": "hello"}}


@dataclass
class Case:
    """One case's stack, projects and poison: A's `poison` goes `to` its recipient, B's to the `ledger`."""

    running: Running
    engine: Engine
    poison: Poison
    a: ApiProject
    b: ApiProject
    to: dict[str, str]
    ledger: Ledger

    def poison_body(self) -> dict[str, Any]:
        return {"channel": self.poison.channel, **self.poison.body}


def send_batches(case: Case) -> None:
    """A's poison as a batch of its own, then B's 99 as one batch, both held back (scheduled a
    day ahead: the template can go meanwhile), then released together and handed to the
    worker as one prepare task, A's poison among B's: the batch path's rows in the same
    prepare run, as the coalescer puts single sends."""
    api, schedule = case.running.api, {"scheduled_at": (datetime.now(UTC) + HELD_BACK).isoformat()}
    with requests.Session() as http:
        post(http, api, case.a, "/v1/messages/batch", {**case.poison_body(), **schedule, "recipients": [case.to]})
        if case.poison.vanishing:
            assert vanish(case.engine, case.a, "scheduled") == 1, "the poison was released before its template went"
        recipients = [{"url": case.ledger.url}] * GOOD
        post(http, api, case.b, "/v1/messages/batch", {**GOOD_BODY, **schedule, "recipients": recipients})
    released = release_together(case.engine, [case.a.id, case.b.id])
    good = [row.id for row in released if row.project_id == case.b.id]
    (poison,) = [row.id for row in released if row.project_id == case.a.id]
    assert len(good) == GOOD
    case.running.stack.publish_prepare([*good[:POISON_AT], poison, *good[POISON_AT:]], "bulk")


def release_together(engine: Engine, projects: Sequence[str]) -> list[Row]:
    """The projects' scheduled messages made accepted at once, as release_due makes them."""
    with engine.begin() as connection:
        return connection.execute(
            text(
                """
                UPDATE messages SET status = 'accepted', next_attempt_at = NULL, updated_at = now()
                WHERE project_id = ANY(:p) AND status = 'scheduled'
                RETURNING id::text, project_id
                """
            ),
            {"p": list(projects)},
        ).all()


def send_singles(case: Case) -> tuple[float, float]:
    """B's first send alone (a quiet coalescer publishes it at once and starts a linger),
    then B's other 98 and A's poison at once: all wait in that linger, and go in one prepare
    task. Returns the coalescer's counts from before, for the caller to check that it did."""
    running = case.running
    time.sleep(max(0.0, running.quiet_from - time.monotonic()))  # the coalescer's rule, not a guess
    before = coalesced(running.api)
    good = {**GOOD_BODY, "to": {"url": case.ledger.url}}

    def send_good(http: requests.Session) -> None:
        post(http, running.api, case.b, "/v1/messages", good)

    def send_poison(http: requests.Session) -> None:
        post(http, running.api, case.a, "/v1/messages", {**case.poison_body(), "to": case.to})
        if case.poison.vanishing:
            assert vanish(case.engine, case.a, "accepted") == 1, "the poison was prepared before its template went"

    def send_share(share: Sequence[Callable[[requests.Session], None]]) -> None:
        with requests.Session() as http:
            for send in share:
                send(http)

    with requests.Session() as http:
        send_good(http)
    sends: list[Callable[[requests.Session], None]] = [send_good] * (GOOD - 1)
    sends.insert(POISON_AT, send_poison)
    with ThreadPoolExecutor(CLIENTS) as pool:
        list(pool.map(send_share, [sends[k::CLIENTS] for k in range(CLIENTS)]))
    return before


def settled(engine: Engine, projects: Sequence[str], count: int, timeout: float) -> list[Row]:
    """Every message of `projects` once all `count` of them are final; at the deadline the test fails with
    their statuses."""

    def rows() -> list[Row]:
        with engine.connect() as connection:
            return connection.execute(
                text("SELECT project_id, id::text, status, error FROM messages WHERE project_id = ANY(:p)"),
                {"p": list(projects)},
            ).all()

    return wait_until(
        rows,
        lambda seen: len(seen) == count and all(row.status in TERMINAL for row in seen),
        timeout,
        f"{count} messages to be final",
        every=0.1,
        show=lambda seen: dict(Counter(row.status for row in seen)),
    )


# How the 100 messages reach the API; a path that goes through the coalescer returns its counts from before.
PATHS: dict[str, Callable[[Case], tuple[float, float] | None]] = {"batch": send_batches, "single": send_singles}


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("kind", list(POISONS))
def test_one_poisoned_message_of_a_project_leaves_another_projects_99_delivered_once(
    running: Running, kind: str, path: str, engine: Engine, ledger: Ledger, hostile: HostileServer, relay: Relay
):
    poison = POISONS[kind]
    processes = worker_processes(running.worker)
    a, b = api_project(running.api, "A"), api_project(running.api, "B")
    make_ready(running.api, engine, poison, a)
    case = Case(running, engine, poison, a, b, poison.recipient(hostile), ledger)
    began = time.monotonic()
    counts_before = PATHS[path](case)
    rows = settled(engine, [a.id, b.id], GOOD + 1, SETTLE_TIMEOUT)
    took = time.monotonic() - began
    if counts_before is not None:  # every send was published by now: the coalescer's linger runs from here at most
        running.quiet_from = time.monotonic() + LINGER

    good = [row for row in rows if row.project_id == b.id]
    (poisoned,) = [row for row in rows if row.project_id == a.id]
    assert Counter(row.status for row in good) == {"sent": GOOD}, f"after {took:.1f} s"
    tally = assert_ledger_agrees([row.id for row in rows], {row.id: row.status for row in rows}, case.ledger)
    tally.report(f"poison {kind!r} by {path}", {"project A": "1 poisoned", "project B": f"{GOOD} good"})
    assert sum(case.ledger.ids.values()) == GOOD  # and nothing else reached it
    assert (poisoned.status, (poisoned.error or "").startswith(poison.reason)) == (poison.status, True), (
        f"{kind}: ended {poisoned.status} with {poisoned.error!r}"
    )
    assert len(poisoned.error) <= MAX_REASON, "the reason must be an excerpt, whatever the receiver answered"
    assert worker_processes(running.worker) == processes, "a worker process died or was replaced"
    assert relay.mailbox.received == []
    if counts_before is not None:
        tasks, messages = coalesced(running.api)
        # B's first alone, then the other 99 (the poison among them) in one prepare task, as a
        # quiet machine does; on a loaded one (CI saw it) the 99 sends outlast one linger and
        # spill into a third. Every message went through the coalescer, and it shared tasks.
        assert messages - counts_before[1] == GOOD + 1
        assert 2 <= tasks - counts_before[0] <= (GOOD + 1) // 10, "the sends were not coalesced"
