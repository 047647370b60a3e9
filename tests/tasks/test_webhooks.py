"""Outbound webhooks end to end: a receiver on 127.0.0.1 checks every request with the
reference `standardwebhooks` verifier; retries, batching, disabling, replay, and receivers
that answer badly on purpose."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest
from pytest_httpserver import HTTPServer
from sqlalchemy import text
from standardwebhooks import Webhook
from werkzeug import Request, Response

from app.config import Settings, current_settings
from app.db import session_scope
from app.delivery import webhook_store
from providers.webhook import UNREACHABLE
from tasks.celery_app import configure
from tasks.webhooks import deliver_webhooks, post, release_webhooks
from tests.conftest import ProjectKeys, closed_port, create_project, email
from tests.hostile_server import ENDLESS_CHUNK, HostileServer
from tests.waiting import wait_until

pytestmark = pytest.mark.usefixtures("worker")


class Receiver:
    """An endpoint that verifies each request and answers what the test says."""

    def __init__(self, server: HTTPServer, path: str = "/hook"):
        self.server, self.path = server, path
        self.answers: list[int] = []
        self.received: list[dict] = []
        server.expect_request(path, method="POST").respond_with_handler(self.handle)

    @property
    def url(self) -> str:
        return self.server.url_for(self.path)

    def handle(self, request: Request) -> Response:
        self.received.append(
            {"id": request.headers["webhook-id"], "headers": dict(request.headers), "body": request.get_data()}
        )
        return Response("ok", status=self.answers.pop(0) if self.answers else 200)

    def verified(self, secret: str) -> list:
        return [Webhook(secret).verify(r["body"], r["headers"]) for r in self.received]

    def wait(self, count: int, timeout: float = 15) -> None:
        wait_until(lambda: len(self.received), lambda n: n >= count, timeout, f"{count} POSTs received")


@pytest.fixture
def receiver(httpserver: HTTPServer) -> Receiver:
    return Receiver(httpserver)


def endpoint(project, url: str, **fields) -> dict:
    created = project.call("POST", "/v1/webhooks", {"url": url, **fields})
    assert created.status_code == 201, created.get_json()
    return created.get_json()


def deliveries(project, endpoint_id: str) -> list[dict]:
    answer = project.call("GET", f"/v1/webhooks/{endpoint_id}/deliveries")
    assert answer.status_code == 200
    return answer.get_json()["items"]


def wait_for_delivery(project, endpoint_id: str, statuses: set[str], timeout: float = 15) -> dict:
    """The endpoint's newest delivery once its status is one of `statuses`."""
    found = wait_until(
        lambda: deliveries(project, endpoint_id),
        lambda found: found and found[0]["status"] in statuses,
        timeout,
        f"a delivery {' or '.join(sorted(statuses))}",
        show=lambda found: [d["status"] for d in found],
    )
    return found[0]


def test_a_sent_message_is_posted_signed_to_the_endpoint(project, receiver):
    hook = endpoint(project, receiver.url)
    message_id = project.send(email("Signed")).get_json()["id"]
    receiver.wait(1)
    [payload] = receiver.verified(hook["secret"])
    assert payload["type"] == "sent"
    assert payload["data"]["message_id"] == message_id
    assert payload["data"]["id"] == f"sent_{message_id}"
    assert receiver.received[0]["id"].startswith("msg_")
    delivery = wait_for_delivery(project, hook["id"], {"succeeded"})
    assert delivery["webhook_id"] == receiver.received[0]["id"]
    assert [a["status_code"] for a in delivery["attempts"]] == [200]


def test_event_filters_and_batching(project, receiver, httpserver):
    failures = Receiver(httpserver, "/failures")
    batched = endpoint(project, receiver.url, batch=True)
    only_failed = endpoint(project, failures.url, event_types=["failed"])
    no_address = {"channel": "email", "to": {"subscriber_id": "ghost"}, "content": {"subject": "s", "text": "t"}}
    ids = [project.send(email()).get_json()["id"] for _ in range(2)] + [project.send(no_address).get_json()["id"]]
    for message_id in ids:
        project.wait_for(message_id)
    failures.wait(1)
    [failed] = failures.verified(only_failed["secret"])
    assert (failed["type"], failed["data"]["message_id"]) == ("failed", ids[2])
    arrays = wait_until(
        lambda: receiver.verified(batched["secret"]),
        lambda arrays: sum(len(body) for body in arrays) >= 3,
        10,
        "3 events in batched POSTs",
    )
    assert all(isinstance(body, list) for body in arrays)
    assert sorted((e["type"], e["data"]["message_id"]) for body in arrays for e in body) == sorted(
        [("sent", ids[0]), ("sent", ids[1]), ("failed", ids[2])]
    )
    assert len(failures.received) == 1  # the filter kept the two `sent` events away


def test_a_project_without_endpoints_writes_no_delivery(project, engine):
    project.wait_for(project.send(email()).get_json()["id"])
    with engine.connect() as connection:
        count = connection.execute(
            text("SELECT count(*) FROM webhook_deliveries WHERE project_id = :p"), {"p": project.id}
        )
        assert count.scalar() == 0


def make_due(engine, delivery_id: str) -> None:
    with engine.begin() as connection:
        connection.execute(
            text("UPDATE webhook_deliveries SET next_attempt_at = now() WHERE id = :id"), {"id": delivery_id}
        )


def test_a_failed_attempt_is_retried_with_the_same_webhook_id(project, receiver, engine):
    receiver.answers = [503]
    hook = endpoint(project, receiver.url)
    project.send(email())
    first = wait_for_delivery(project, hook["id"], {"retrying"})
    assert [a["status_code"] for a in first["attempts"]] == [503]
    wait = datetime.fromisoformat(first["next_attempt_at"]) - datetime.fromisoformat(first["attempts"][0]["at"])
    assert timedelta(seconds=4) <= wait <= timedelta(seconds=6)  # the second attempt comes 5 s after the first
    make_due(engine, first["id"])
    deliver_webhooks([first["id"]])
    done = deliveries(project, hook["id"])[0]
    assert done["status"] == "succeeded"
    assert [a["status_code"] for a in done["attempts"]] == [503, 200]
    assert receiver.received[0]["id"] == receiver.received[1]["id"] == done["webhook_id"]
    receiver.verified(hook["secret"])  # both attempts carry a valid signature


def test_the_last_failed_attempt_fails_the_delivery(project, receiver, engine):
    receiver.answers = [500, 500]
    hook = endpoint(project, receiver.url)
    project.send(email())
    first = wait_for_delivery(project, hook["id"], {"retrying"})
    with engine.begin() as connection:
        connection.execute(text("UPDATE webhook_deliveries SET attempts = 7 WHERE id = :id"), {"id": first["id"]})
    make_due(engine, first["id"])
    deliver_webhooks([first["id"]])
    assert deliveries(project, hook["id"])[0]["status"] == "failed"


def log_types(project) -> list[dict]:
    return project.call("GET", "/v1/events?type=webhook_disabled").get_json()["items"]


def test_410_disables_the_endpoint_with_an_event_other_endpoints_hear(project, receiver, httpserver):
    watcher = Receiver(httpserver, "/watcher")
    receiver.answers = [410]
    gone = endpoint(project, receiver.url, event_types=["sent"])
    endpoint(project, watcher.url, event_types=["webhook_disabled"])
    project.send(email())
    watcher.wait(1)
    state = project.call("GET", f"/v1/webhooks/{gone['id']}").get_json()
    assert (state["enabled"], state["disabled_reason"]) == (False, "the endpoint answered 410 Gone")
    [event] = log_types(project)
    assert event["message_id"] is None
    assert event["data"] == {"endpoint_id": gone["id"], "url": receiver.url, "reason": "the endpoint answered 410 Gone"}
    assert json.loads(watcher.received[0]["body"])["data"]["id"] == event["id"]
    assert deliveries(project, gone["id"])[0]["status"] == "failed"


def test_five_days_of_failures_disable_the_endpoint(project, receiver, engine):
    receiver.answers = [500]
    hook = endpoint(project, receiver.url)
    with engine.begin() as connection:
        connection.execute(
            text("UPDATE webhook_endpoints SET failing_since = now() - interval '6 days' WHERE id = :id"),
            {"id": hook["id"]},
        )
    project.send(email())
    wait_for_delivery(project, hook["id"], {"retrying", "failed"})
    state = project.call("GET", f"/v1/webhooks/{hook['id']}").get_json()
    assert (state["enabled"], state["disabled_reason"]) == (False, "every attempt failed for 5 days")
    assert len(log_types(project)) == 1


def test_a_success_ends_the_failure_streak(project, receiver, engine):
    hook = endpoint(project, receiver.url)
    with engine.begin() as connection:
        connection.execute(
            text("UPDATE webhook_endpoints SET failing_since = now() - interval '2 days' WHERE id = :id"),
            {"id": hook["id"]},
        )
    project.send(email())
    wait_for_delivery(project, hook["id"], {"succeeded"})
    assert project.call("GET", f"/v1/webhooks/{hook['id']}").get_json()["failing_since"] is None


def test_replay_sends_a_delivery_again_by_hand(project, receiver):
    hook = endpoint(project, receiver.url)
    project.send(email())
    delivery = wait_for_delivery(project, hook["id"], {"succeeded"})
    replayed = project.call("POST", f"/v1/webhooks/{hook['id']}/deliveries/{delivery['id']}/replay")
    assert replayed.status_code == 202
    assert replayed.get_json()["status"] == "pending"
    receiver.wait(2)
    again = wait_for_delivery(project, hook["id"], {"succeeded"})
    assert [a["status_code"] for a in again["attempts"]] == [200, 200]
    assert receiver.received[0]["id"] == receiver.received[1]["id"]
    missing = project.call("POST", f"/v1/webhooks/{hook['id']}/deliveries/00000000-0000-0000-0000-000000000000/replay")
    assert missing.status_code == 404
    project.call("PATCH", f"/v1/webhooks/{hook['id']}", {"enabled": False})
    refused = project.call("POST", f"/v1/webhooks/{hook['id']}/deliveries/{delivery['id']}/replay")
    assert refused.status_code == 409


def delivery_row(engine, project, hook: dict):
    """A delivery of one event to `hook`, claimed as the deliver task claims it, for `post`."""
    with engine.begin() as connection:
        delivery_id = connection.execute(
            text(
                """
                INSERT INTO webhook_deliveries (endpoint_id, project_id, events) VALUES (:e, :p, '[{"type": "sent"}]')
                RETURNING id::text
                """
            ),
            {"e": hook["id"], "p": project.id},
        ).scalar_one()
    with session_scope(current_settings().database_url) as session:
        [row] = webhook_store.claim(session, [delivery_id])
    return row


def test_the_guard_refuses_private_targets_unless_allowed(project, receiver, engine):
    row = delivery_row(engine, project, endpoint(project, receiver.url))
    guarded = dataclasses.replace(current_settings(), webhook_allowed_networks=())
    attempt = post(row, guarded)
    assert (attempt.status_code, attempt.error) == (None, UNREACHABLE)
    assert receiver.received == []


def test_a_project_may_be_allowed_networks_of_its_own(client, receiver, engine):
    allowed = create_project(client, settings={"webhook_allowed_networks": ["127.0.0.0/8"]})
    row = delivery_row(engine, allowed, endpoint(allowed, receiver.url))
    attempt = post(row, dataclasses.replace(current_settings(), webhook_allowed_networks=()))
    assert (attempt.status_code, attempt.error) == (200, None)
    assert len(receiver.received) == 1


def test_a_refused_target_reads_as_a_closed_port(project, receiver, engine):
    closed = f"http://127.0.0.1:{closed_port()}/hook"
    row = delivery_row(engine, project, endpoint(project, closed))
    attempt = post(row, current_settings())  # the test settings allow 127.0.0.0/8: only the port is wrong
    assert (attempt.status_code, attempt.error) == (None, UNREACHABLE)


def test_beat_releases_parked_retries_and_reclaims_dead_claims(project, receiver, engine):
    receiver.answers = [503]
    hook = endpoint(project, receiver.url)
    project.send(email())
    parked = wait_for_delivery(project, hook["id"], {"retrying"})
    project.send(email())
    receiver.wait(2)
    claimed = wait_for_delivery(project, hook["id"], {"succeeded"})
    with engine.begin() as connection:
        connection.execute(
            text("UPDATE webhook_deliveries SET next_attempt_at = now() - interval '1 minute' WHERE id = :id"),
            {"id": parked["id"]},
        )
        connection.execute(  # as if a worker died holding it
            text(
                "UPDATE webhook_deliveries SET status = 'sending', claimed_at = now() - interval '1 hour' "
                "WHERE id = :id"
            ),
            {"id": claimed["id"]},
        )
    assert release_webhooks() == 2
    wait_until(
        lambda: {d["id"]: d["status"] for d in deliveries(project, hook["id"])},
        lambda statuses: statuses == {parked["id"]: "succeeded", claimed["id"]: "succeeded"},
        10,
        "both released deliveries succeeded",
    )


@pytest.fixture
def short_deadline(settings: Settings, project: ProjectKeys) -> Iterator[None]:
    """A WEBHOOK_TIMEOUT of 1 s for the worker's POSTs, after `project` configured the usual settings."""
    configure(dataclasses.replace(settings, webhook_timeout=1.0))
    yield
    configure(settings)


@pytest.mark.parametrize(
    ("behaviour", "status_code", "response", "error"),
    [
        ("endless", 500, ENDLESS_CHUNK[:500].decode(), "HTTP 500"),
        ("bomb", 500, "bomb " * 100, "HTTP 500"),
        ("drip", None, None, "DeadlinePassed: no complete answer within 1s"),
        ("nul", 500, "refused\ufffd\ufffd by the receiver", "HTTP 500"),
    ],
)
def test_a_hostile_receiver_costs_one_bounded_attempt_and_the_good_one_gets_its_delivery_once(
    project, receiver, hostile: HostileServer, short_deadline, behaviour, status_code, response, error
):
    bad = endpoint(project, hostile.url(behaviour, 500))
    good = endpoint(project, receiver.url)
    project.send(email())
    [attempt] = wait_for_delivery(project, bad["id"], {"retrying"})["attempts"]
    assert (attempt["status_code"], attempt["response"], attempt["error"]) == (status_code, response, error)
    assert wait_for_delivery(project, good["id"], {"succeeded"})["status"] == "succeeded"
    assert len(receiver.received) == 1
    assert hostile.stats(behaviour).requests == 1
