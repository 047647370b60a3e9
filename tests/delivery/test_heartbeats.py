"""Heartbeats: a worker process is silent once its last beat is far behind the newest one."""

from __future__ import annotations

import pytest
import redis

from app.delivery import heartbeats


@pytest.fixture
def client(migrated) -> redis.Redis:
    """A database of its own: the session's worker processes beat in the URL's. (The URL's
    database wins over a `db` argument to from_url, so the URL itself names database 7.)"""
    client = redis.Redis.from_url(migrated.redis_url.rsplit("/", 1)[0] + "/7")
    assert client.connection_pool.connection_kwargs["db"] == 7
    client.delete(heartbeats.KEY)
    yield client
    client.delete(heartbeats.KEY)


def beat_seconds_ago(client: redis.Redis, worker: str, seconds: float) -> None:
    """A beat as Redis's clock had it `seconds` ago (what a process that died then left)."""
    now, micros = client.time()
    client.hset(heartbeats.KEY, worker, int(now * 1000 + micros // 1000 - seconds * 1000))


def test_a_worker_far_behind_the_newest_beat_is_silent(client):
    heartbeats.beat(client, "alive")
    beat_seconds_ago(client, "killed", 30)
    beat_seconds_ago(client, "late", 5)
    [silent] = heartbeats.silent(client, dead_after=10)
    assert silent.worker == "killed"
    assert 30 <= silent.seconds < 40


def test_beats_all_old_judge_nobody_until_beats_come_again(client):
    """A Redis restored from a snapshot, or back after an outage: nobody beat since, so nobody is judged."""
    beat_seconds_ago(client, "a", 60)
    beat_seconds_ago(client, "b", 55)
    assert heartbeats.silent(client, dead_after=10) == []
    heartbeats.beat(client, "a")
    assert [s.worker for s in heartbeats.silent(client, dead_after=10)] == ["b"]


def test_no_beats_at_all_is_nobody_silent(client):
    assert heartbeats.silent(client, dead_after=10) == []


def test_a_forgotten_worker_beats_itself_back(client):
    heartbeats.beat(client, "alive")
    beat_seconds_ago(client, "cut-off", 30)
    heartbeats.forget(client, ["cut-off"])
    assert heartbeats.silent(client, dead_after=10) == []
    heartbeats.beat(client, "cut-off")
    assert set(client.hkeys(heartbeats.KEY)) == {b"alive", b"cut-off"}
