"""Single sends that waited out a pause leave together, in provider-sized batches."""

from __future__ import annotations

import math
import threading

import pytest

from app.delivery.queues import deliver_queue
from app.delivery.waiting_room import waiting_list
from providers.fake import FakeProvider
from tests.conftest import ADMIN_KEY, bearer, email
from tests.waiting import wait_until

ADMIN = bearer(ADMIN_KEY)


@pytest.fixture(autouse=True)
def _resumed_afterwards(client):
    yield
    client.post("/v1/admin/providers/fake/resume", headers=ADMIN)


@pytest.mark.usefixtures("worker")
def test_single_sends_that_waited_out_a_pause_leave_in_provider_sized_batches(client, project, fake_provider, app):
    requests_seen: list[list[str]] = []
    lock = threading.Lock()

    def record(request):
        with lock:
            requests_seen.append([m["id"] for m in request.get_json()["messages"]])
        return None  # answer as usual

    fake_provider.override = record
    assert client.post("/v1/admin/providers/fake/pause", json={"reason": "outage"}, headers=ADMIN).status_code == 200
    ids = [project.send(email(to=f"user{n}@example.com")).get_json()["id"] for n in range(150)]
    redis = app.extensions["tidings"].redis
    lane = waiting_list(deliver_queue("fake", "transactional"))
    wait_until(
        lambda: {i.decode() for i in redis.lrange(lane, 0, -1)} & set(ids),
        lambda parked: parked == set(ids),
        30,
        "every send to wait in its lane's waiting room",
        show=len,
    )
    assert requests_seen == [], "a paused provider was called"

    assert client.post("/v1/admin/providers/fake/resume", headers=ADMIN).status_code == 200
    for message_id in ids:
        project.wait_for(message_id, {"sent"})
    ours = [request for request in requests_seen if set(request) & set(ids)]
    assert sorted(message_id for request in ours for message_id in request) == sorted(ids)  # each once
    assert len(ours) == math.ceil(len(ids) / FakeProvider.max_batch)
