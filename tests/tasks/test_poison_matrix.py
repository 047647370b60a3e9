"""The poison matrix: one hostile message of project A inside the batches of 99 good messages of
project B, for each kind of poison a tenant can send, store or answer.

All 100 share one prepare task and, once ready, one deliver call through the real `webhook`
adapter. For every kind, each of B's 99 reaches its receiver exactly once (the receiver's own
ledger of `webhook-id`s, which forgives no repeat), A's message ends with its reason, and
nothing is left `sending`.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterator

import pytest
import redis
from pytest_httpserver import HTTPServer
from sqlalchemy import text
from werkzeug import Request, Response

from app.delivery import dispatch
from app.delivery.breaker import CircuitBreakers, CircuitState
from app.enums import Channel
from tasks.deliver import deliver
from tests.conftest import WEBHOOK_ENVIRON, create_project, rerouted
from tests.faults.stack import new_project, statuses
from tests.hostile_server import HostileServer

pytestmark = pytest.mark.usefixtures("worker")

GOOD = 99


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

    @property
    def url(self) -> str:
        return self.server.url_for("/hook")


@pytest.fixture
def ledger() -> Iterator[Ledger]:
    receiver = Ledger().start()
    yield receiver
    receiver.server.stop()


@pytest.fixture
def webhook_channel(settings) -> Iterator[None]:
    """The webhook channel through the real adapter; the test delivers each batch itself."""
    with rerouted(settings, {Channel.WEBHOOK: ("webhook",)}, **WEBHOOK_ENVIRON):
        yield


def accepted(engine, project_id: str, channel: str, to: str | None, **columns) -> str:
    """One accepted message written as the API would, with `columns` of its content (data, subject…)."""
    template = columns.pop("template", None)
    subscriber = columns.pop("subscriber_id", None)
    content = {"subject": "Hi", "text": "Hello", **columns}
    if "data" in content:
        content["data"] = json.dumps(content["data"])
    with engine.begin() as connection:
        message_id = connection.execute(
            text(
                """
                INSERT INTO messages (project_id, channel, status, priority, to_address, subscriber_id,
                                      template, template_version)
                VALUES (:p, :channel, 'accepted', 'bulk', :to, :subscriber, :template, CASE WHEN :template IS NULL
                        THEN NULL ELSE 1 END)
                RETURNING id::text
                """
            ),
            {"p": project_id, "channel": channel, "to": to, "subscriber": subscriber, "template": template},
        ).scalar_one()
        names = ", ".join(content)
        values = ", ".join(f"CAST(:{name} AS jsonb)" if name == "data" else f":{name}" for name in content)
        connection.execute(
            text(f"INSERT INTO message_contents (message_id, {names}) VALUES (:id, {values})"),
            {"id": message_id, **content},
        )
    return message_id


def template_poison(source: dict, data: dict):
    def make(client, engine, hostile) -> str:
        project = create_project(client)
        body = {"key": "poison", "channel": "email", "subject": "s", "text": "t", **source}
        assert project.call("POST", "/v1/templates", body).status_code == 201, "visible at save: not this test"
        return accepted(engine, project.id, "email", "ada@example.com", template="poison", data=data)

    return make


def stored_webhook_url_poison(client, engine, hostile) -> str:
    project = new_project(engine)
    with engine.begin() as connection:
        connection.execute(
            text("INSERT INTO subscribers (project_id, external_id, data) VALUES (:p, 'u1', '{\"webhook_url\": 1}')"),
            {"p": project},
        )
    return accepted(engine, project, "webhook", None, subscriber_id="u1")


def missing_version_poison(client, engine, hostile) -> str:
    return accepted(engine, new_project(engine), "email", "ada@example.com", template="gone")


def receiver_poison(behaviour: str):
    def make(client, engine, hostile) -> str:
        return accepted(engine, new_project(engine), "webhook", hostile.url(behaviour))

    return make


POISONS = {
    "template bomb": (template_poison({"text": "{{ ((x ** 1000) ** 1000) ** 30 > 0 }}"}, {"x": 10}), "failed"),
    "NUL from rendering": (template_poison({"text": '{{ "%c"|format(n) }}'}, {"n": 0}), "failed"),
    "CR/LF into the subject": (template_poison({"subject": "{{ s }}"}, {"s": "a\r\nBcc: x@evil.example"}), "failed"),
    "webhook_url that is no string": (stored_webhook_url_poison, "failed"),
    "template version that is gone": (missing_version_poison, "failed"),
    "receiver answering forever": (receiver_poison("endless"), None),
    "receiver answering a gzip bomb": (receiver_poison("bomb"), None),
    "receiver dripping a byte at a time": (receiver_poison("drip"), "retrying"),
    "receiver answering NUL": (receiver_poison("nul"), None),
}
STILL_AT_WORK = {"accepted", "ready", "sending"}


def wait_prepared(engine, ids: list[str], timeout: float = 30) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    while True:
        seen = statuses(engine, ids)
        if "accepted" not in seen.values() or time.monotonic() > deadline:
            return seen
        time.sleep(0.05)


@pytest.mark.parametrize("kind", list(POISONS))
def test_one_poisoned_message_of_a_project_leaves_another_projects_99_delivered_once(
    kind, client, engine, ledger, hostile: HostileServer, webhook_channel
):
    make, expected = POISONS[kind]
    poison = make(client, engine, hostile)
    neighbour = new_project(engine)
    good = [accepted(engine, neighbour, "webhook", ledger.url) for _ in range(GOOD)]
    (task,) = dispatch.prepare([*good[:40], poison, *good[40:]], "bulk")
    task.apply_async()

    prepared = wait_prepared(engine, [poison, *good])
    assert [prepared[i] for i in good] == ["ready"] * GOOD
    deliver("webhook", [i for i in [*good[:40], poison, *good[40:]] if prepared[i] == "ready"], "bulk")

    seen = statuses(engine, [poison, *good])
    assert [seen[i] for i in good] == ["sent"] * GOOD
    assert [ledger.ids[i] for i in good] == [1] * GOOD
    assert sum(ledger.ids.values()) == GOOD
    assert seen[poison] not in STILL_AT_WORK
    if expected is not None:
        assert seen[poison] == expected
    with engine.connect() as connection:
        error = connection.execute(
            text("SELECT error FROM messages WHERE id = CAST(:id AS uuid)"), {"id": poison}
        ).scalar_one()
    assert seen[poison] == "sent" or error, f"{kind}: the poison ended {seen[poison]} without a reason"


def test_one_tenants_failing_receivers_never_open_the_webhook_channels_circuit(
    client, engine, settings, ledger, webhook_channel
):
    """Each webhook goes to its tenant's own receiver: 30 refused targets in a row say nothing
    about the channel, so the next project's webhooks still go out."""
    breakers = CircuitBreakers(redis.Redis.from_url(settings.redis_url), settings.breaker)
    breakers.reset("webhook")
    hostile_project = new_project(engine)
    refused = [accepted(engine, hostile_project, "webhook", "https://10.0.0.1/hook") for _ in range(30)]
    (task,) = dispatch.prepare(refused, "bulk")
    task.apply_async()
    assert set(wait_prepared(engine, refused).values()) == {"ready"}
    for _ in range(3):
        deliver("webhook", [i for i, status in statuses(engine, refused).items() if status == "ready"], "bulk")
    assert breakers.states(["webhook"])["webhook"].state is CircuitState.CLOSED
    good = [accepted(engine, new_project(engine), "webhook", ledger.url) for _ in range(3)]
    (task,) = dispatch.prepare(good, "bulk")
    task.apply_async()
    assert set(wait_prepared(engine, good).values()) == {"ready"}
    deliver("webhook", good, "bulk")
    assert [ledger.ids[i] for i in good] == [1, 1, 1]
