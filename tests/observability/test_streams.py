"""Live news on a real Redis: the hub (one subscription per channel and process, a cap on
streams) and the publisher, which publishes only what some hub listens to."""

from __future__ import annotations

import json
import uuid

import pytest
import redis

from app.db import session_scope
from app.observability import live
from app.observability.streams import Busy, Hub, OverQuota, sse


@pytest.fixture
def hub(settings) -> Hub:
    return Hub(settings.redis_url, max_listeners=2)


def test_listeners_of_a_channel_each_get_its_messages(hub, settings):
    channel = f"test:{uuid.uuid4().hex}"
    first, second = hub.listen(channel, {}), hub.listen(channel, {})
    redis.Redis.from_url(settings.redis_url).publish(channel, json.dumps({"n": 1}))
    assert first.get(5) == second.get(5) == {"n": 1}
    first.close()
    second.close()


def test_a_process_takes_no_more_streams_than_its_cap(hub):
    held = [hub.listen(f"test:{uuid.uuid4().hex}", {}) for _ in range(2)]
    with pytest.raises(Busy):
        hub.listen("test:one-too-many", {})
    held[0].close()
    hub.listen("test:now-there-is-room", {}).close()
    held[1].close()


def test_a_channel_nobody_listens_to_is_left(hub, settings):
    channel = f"test:{uuid.uuid4().hex}"
    hub.listen(channel, {}).close()
    client = redis.Redis.from_url(settings.redis_url)
    for _ in range(50):
        if client.pubsub_numsub(channel) == [(channel.encode(), 0)]:
            break
        hub.listen(f"test:{uuid.uuid4().hex}", {}).close()  # a command round makes the hub apply the leave
    assert client.pubsub_numsub(channel) == [(channel.encode(), 0)]


def test_sse_messages_are_framed_as_the_spec_says():
    assert sse({"a": 1}, "evt_1", "item") == 'id: evt_1\nevent: item\ndata: {"a":1}\n\n'
    assert sse([1]) == "data: [1]\n\n"


def test_only_channels_someone_listens_to_are_published(client, settings):
    channel = f"test:{uuid.uuid4().hex}"
    client = redis.Redis.from_url(settings.redis_url)
    raw = client.pubsub(ignore_subscribe_messages=True)
    raw.subscribe(channel)  # a subscriber that has not marked the channel, as no hub would
    raw.get_message(timeout=1)

    def publish(n: int) -> None:
        with session_scope(settings.database_url) as session:
            live.publish_after_commit(session, channel, {"n": n})

    publish(1)
    assert raw.get_message(timeout=0.5) is None
    client.set(live.listening_key(channel), 1, ex=live.LISTENING_TTL_SECONDS)
    publish(2)
    assert json.loads(raw.get_message(timeout=5)["data"]) == {"n": 2}
    raw.close()


def test_a_hub_marks_the_channels_it_listens_to(hub, settings):
    channel = f"test:{uuid.uuid4().hex}"
    listener = hub.listen(channel, {})
    assert redis.Redis.from_url(settings.redis_url).ttl(live.listening_key(channel)) > 0
    listener.close()


def test_a_quota_caps_its_holders_streams_and_frees_them_as_they_leave(settings):
    hub = Hub(settings.redis_url, max_listeners=10)
    project, token = ("project", uuid.uuid4().hex), ("inbox token", uuid.uuid4().hex)
    held = [hub.listen(f"test:{uuid.uuid4().hex}", {project: 3, token: 2}) for _ in range(2)]
    with pytest.raises(OverQuota) as refused:
        hub.listen("test:same-token", {project: 3, token: 2})
    assert refused.value.quota == token
    third = hub.listen("test:another-token", {project: 3, ("inbox token", "other"): 2})
    with pytest.raises(OverQuota) as refused:
        hub.listen("test:same-project", {project: 3})
    assert refused.value.quota == project
    hub.listen("test:another-project", {("project", "other"): 3}).close()
    held[0].close()
    held[0].close()  # leaving twice frees one slot, once
    again = hub.listen("test:room-again", {project: 3, token: 2})
    with pytest.raises(OverQuota):
        hub.listen("test:full-again", {project: 3})
    for listener in (held[1], third, again):
        listener.close()
