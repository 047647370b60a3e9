"""The live event stream over real HTTP: delivery, resume from the log, heartbeats, fan-out."""

from __future__ import annotations

import statistics
import threading
import time

import pytest

from app.db import session_scope
from app.delivery import store
from app.enums import EventType
from tests.conftest import email
from tests.sse import SseClient

pytestmark = pytest.mark.usefixtures("worker")


def stream(live_api: str, project, last_event_id: str | None = None) -> SseClient:
    headers = {"Authorization": f"Bearer {project.live_key}"}
    if last_event_id:
        headers["Last-Event-ID"] = last_event_id
    client = SseClient(live_api, "/v1/events/stream", headers)
    assert client.status == 200
    return client


def test_a_new_event_is_pushed_with_its_log_id(live_api, project):
    client = stream(live_api, project)
    try:
        message_id = project.send(email()).get_json()["id"]
        pushed = client.next_data()
        assert pushed["id"] == f"sent_{message_id}" == pushed["data"]["id"]
        assert (pushed["data"]["type"], pushed["data"]["message_id"]) == ("sent", message_id)
    finally:
        client.close()


def test_an_idle_stream_gets_heartbeats(live_api, project):
    client = stream(live_api, project)
    try:
        assert client.next(timeout=5) == {"retry": "2000"}
        assert client.next(timeout=5) == {"comment": "heartbeat"}
    finally:
        client.close()


def test_last_event_id_resumes_from_the_log_without_gaps(live_api, project):
    client = stream(live_api, project)
    first = project.send(email("first")).get_json()["id"]
    seen = client.next_data()["id"]
    assert seen == f"sent_{first}"
    client.close()
    missed = [project.send(email(f"missed {n}")).get_json()["id"] for n in range(3)]
    for message_id in missed:
        project.wait_for(message_id)
    resumed = stream(live_api, project, last_event_id=seen)
    try:
        replayed = []
        while len(replayed) < 4:
            replayed.append(resumed.next_data()["id"])
        # The replay starts a little before the last id seen, so it may come again: clients dedupe on id.
        assert set(replayed) == {seen, *(f"sent_{m}" for m in missed)}
        after = project.send(email("live again")).get_json()["id"]
        assert resumed.next_data()["id"] == f"sent_{after}"
    finally:
        resumed.close()


def test_an_unknown_last_event_id_is_422(live_api, project, client):
    answer = client.get(
        "/v1/events/stream", headers={"Authorization": f"Bearer {project.live_key}", "Last-Event-ID": "evt_0"}
    )
    assert answer.status_code == 422
    assert "Last-Event-ID" in answer.get_json()["errors"]["headers"]


def test_the_stream_needs_a_project_key(live_api):
    client = SseClient(live_api, "/v1/events/stream")
    assert client.status == 401
    client.close()


def test_fan_out_latency_publish_to_receive(live_api, project, settings):
    """Commit and publish → every client's receipt, through Redis pub/sub; printed, not asserted."""
    clients = [stream(live_api, project) for _ in range(10)]
    rounds = 30
    arrivals: list[list[float]] = [[] for _ in clients]

    def read(index: int) -> None:
        for _ in range(rounds):
            clients[index].next_data()
            arrivals[index].append(time.perf_counter())

    readers = [threading.Thread(target=read, args=(i,)) for i in range(len(clients))]
    for reader in readers:
        reader.start()
    message_id = project.send(email()).get_json()["id"]  # the first round: its `sent` entry
    project.wait_for(message_id)
    time.sleep(0.3)
    published = []
    for _ in range(rounds - 1):
        with session_scope(settings.database_url) as session:
            store.record_events(session, [store.NewEvent(message_id, project.id, EventType.DELIVERED, {})])
            published.append(time.perf_counter())  # leaving the block commits, then publishes
        time.sleep(0.02)
    for reader in readers:
        reader.join(timeout=20)
    for client in clients:
        client.close()
    latencies = [
        (arrival - sent) * 1000 for times in arrivals for sent, arrival in zip(published, times[1:], strict=False)
    ]
    print(
        f"\nSSE fan-out to {len(clients)} clients, {len(published)} events: "
        f"p50 {statistics.median(latencies):.1f} ms, p95 {statistics.quantiles(latencies, n=20)[-1]:.1f} ms, "
        f"max {max(latencies):.1f} ms"
    )
    assert all(len(times) == rounds for times in arrivals)
