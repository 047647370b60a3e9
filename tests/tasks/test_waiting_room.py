"""Single sends that waited out a pause leave together, in provider-sized batches: they wait
their project's turn in the lane (app/delivery/fairness.py), and the tokens that wake take
up to a provider batch each."""

from __future__ import annotations

import json
import math
import threading
import time

import pytest

from app.delivery import fairness
from app.delivery.queues import deliver_queue
from app.enums import Channel
from providers.fake import FakeProvider
from tests.conftest import ADMIN_KEY, bearer, email, rerouted
from tests.provider_server import json_response
from tests.waiting import wait_until

ADMIN = bearer(ADMIN_KEY)
# Long enough for 150 sends through the test client to be made while the 429 lasts, on a busy box.
RETRY_AFTER = 15


def parked(redis, project: str) -> set[str]:
    """The ids waiting `project`'s turn in the fake provider's transactional lane."""
    chunks = redis.lrange(fairness.lists(deliver_queue("fake", "transactional")) + project, 0, -1)
    return {message_id for chunk in chunks for message_id in json.loads(chunk)}


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
    wait_until(
        lambda: parked(redis, project.id) & set(ids),
        lambda waiting: waiting == set(ids),
        30,
        "every send to wait its project's turn in its lane",
        show=len,
    )
    assert requests_seen == [], "a paused provider was called"

    assert client.post("/v1/admin/providers/fake/resume", headers=ADMIN).status_code == 200
    for message_id in ids:
        project.wait_for(message_id, {"sent"})
    ours = [request for request in requests_seen if set(request) & set(ids)]
    assert sorted(message_id for request in ours for message_id in request) == sorted(ids)  # each once
    assert len(ours) == math.ceil(len(ids) / FakeProvider.max_batch)


@pytest.mark.usefixtures("worker")
def test_single_sends_that_waited_out_a_429_leave_in_provider_sized_batches(
    client, project, fake_provider, app, settings
):
    """The provider's own 429, not an operator, pauses it: the sends that came meanwhile
    leave, once its Retry-After has passed, as few calls as the provider's batch allows.
    Email goes to `fake` alone here: with a second provider in the chain, the 429 would
    hand the messages over to it instead, as failover should."""
    window_ends: list[float] = []
    accepted: list[list[str]] = []
    lock = threading.Lock()

    def too_many_for_a_while(request):
        with lock:
            if not window_ends:
                window_ends.append(time.monotonic() + RETRY_AFTER)
            if time.monotonic() < window_ends[0]:
                return json_response({"error": "slow down"}, status=429, headers={"Retry-After": str(RETRY_AFTER)})
            accepted.append([m["id"] for m in request.get_json()["messages"]])
        return None

    fake_provider.override = too_many_for_a_while
    with rerouted(settings, {Channel.EMAIL: ("fake",)}):
        first = project.send(email(to="first@example.com")).get_json()["id"]
        wait_until(lambda: window_ends, bool, 30, "the provider's first 429")
        waited = [project.send(email(to=f"user{n}@example.com")).get_json()["id"] for n in range(150)]
        redis = app.extensions["tidings"].redis
        wait_until(
            lambda: parked(redis, project.id) & set(waited),
            lambda waiting: waiting == set(waited),
            RETRY_AFTER,
            "every send made during the 429 to wait its project's turn in its lane",
            show=len,
        )
        for message_id in [first, *waited]:
            project.wait_for(message_id, {"sent"}, timeout=RETRY_AFTER + 30)
    ours = [request for request in accepted if set(request) & {first, *waited}]
    assert sorted(message_id for request in ours for message_id in request) == sorted([first, *waited])  # each once
    assert len([request for request in ours if set(request) & set(waited)]) == math.ceil(
        len(waited) / FakeProvider.max_batch
    )
