"""The live event stream over real HTTP: delivery, resume from the log, heartbeats, fan-out."""

from __future__ import annotations

import json
import statistics
import threading
import time

import pytest

from app.db import session_scope
from app.delivery import store
from app.enums import EventType
from tests.conftest import ADMIN_KEY, bearer, create_project, email
from tests.sse import SseClient

pytestmark = pytest.mark.usefixtures("worker")


def stream(live_api: str, project, last_event_id: str | None = None, key: str | None = None) -> SseClient:
    headers = bearer(key or project.live_key)
    if last_event_id:
        headers["Last-Event-ID"] = last_event_id
    client = SseClient(live_api, "/v1/events/stream", headers)
    assert client.status == 200
    return client


def past_a_check(client: SseClient) -> None:
    """Read up to the first heartbeat: the stream's key has passed one check by then."""
    assert client.next() == {"retry": "2000"}
    assert client.next() == {"comment": "heartbeat"}


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
    """Commit and publish → every client's receipt, through Redis pub/sub; printed, not asserted.
    As many clients as one project may hold streams in one process."""
    clients = [stream(live_api, project) for _ in range(settings.streams_per_project)]
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


def test_a_revoked_key_s_stream_ends_within_a_heartbeat(live_api, project, client):
    revoked, other_key = stream(live_api, project), stream(live_api, project, key=project.test_key)
    try:
        past_a_check(revoked)
        past_a_check(other_key)
        answer = client.delete(f"/v1/admin/projects/{project.id}/keys/{project.live_key_id}", headers=bearer(ADMIN_KEY))
        assert answer.status_code == 204
        # It ends, after at most the one heartbeat that may have left before the revocation.
        assert revoked.count_until_the_end() in (0, 1)
        assert other_key.next(timeout=5) == {"comment": "heartbeat"}  # the project's other key goes on
    finally:
        revoked.close()
        other_key.close()


def test_a_changed_or_deleted_project_ends_its_streams(live_api, client):
    changed, deleted = create_project(client), create_project(client)
    streams = [stream(live_api, changed), stream(live_api, deleted)]
    try:
        for events in streams:
            past_a_check(events)
        admin = bearer(ADMIN_KEY)
        patched = client.patch(f"/v1/admin/projects/{changed.id}", json={"rate_limit_per_min": 7}, headers=admin)
        assert patched.status_code == 200
        assert client.delete(f"/v1/admin/projects/{deleted.id}", headers=admin).status_code == 204
        for events in streams:
            assert events.count_until_the_end() in (0, 1)
    finally:
        for events in streams:
            events.close()


def test_a_project_holds_at_most_its_share_of_a_process_s_streams(live_api, project, client, settings):
    held = [stream(live_api, project) for _ in range(settings.streams_per_project)]
    try:
        for key in (project.live_key, project.test_key):
            excess = SseClient(live_api, "/v1/events/stream", bearer(key))
            assert excess.status == 429
            assert excess.response.getheader("Retry-After") == "5"
            body = json.loads(excess.response.read())
            assert (body["code"], body["status"]) == (429, "Too Many Requests")
            assert "project" in body["message"]
            excess.close()
        another = stream(live_api, create_project(client))  # other projects are not held back
        another.close()
        message_id = project.send(email()).get_json()["id"]
        for events in held:  # the streams under the cap go on
            assert events.next_data()["id"] == f"sent_{message_id}"
    finally:
        for events in held:
            events.close()
