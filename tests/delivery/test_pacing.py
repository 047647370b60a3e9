"""The shared pace and the provider pauses, on a real Redis."""

from __future__ import annotations

import math
import uuid

import pytest
import redis

from app.delivery.pacing import SLICES, WINDOW_MS, ProviderPacer, window_of
from app.delivery.pauses import ProviderPauses
from tests.waiting import wait_until


@pytest.fixture
def client(migrated) -> redis.Redis:
    return redis.Redis.from_url(migrated.redis_url)


def test_a_batch_gets_what_the_slice_has_left_and_the_wait_for_the_rest(client):
    """A window of 100 is granted a quarter per quarter of it: the rest waits a slice, not a window."""
    pacer, provider = ProviderPacer(client), f"p-{uuid.uuid4().hex}"
    first = pacer.acquire(provider, 100, 15, "a")
    second = pacer.acquire(provider, 100, 15, "b")
    third = pacer.acquire(provider, 100, 15, "c")
    assert (first.granted, second.granted, third.granted) == (15, 10, 0)
    assert first.wait_seconds == 0
    assert 0 < third.wait_seconds <= WINDOW_MS / 1000 / SLICES


def test_a_full_window_waits_for_its_oldest_grant(client):
    """Below ten a second a slice is one send; the window still holds the pace."""
    pacer, provider = ProviderPacer(client), f"p-{uuid.uuid4().hex}"
    assert pacer.acquire(provider, 2, 1, "a").granted == 1
    assert pacer.acquire(provider, 2, 1, "b").granted == 0  # the slice is full
    wait_until(lambda: pacer.acquire(provider, 2, 1, "b"), lambda g: g.granted == 1, 1, "the next slice", 0.01)
    third = pacer.acquire(provider, 2, 1, "c")
    assert third.granted == 0
    assert 0.5 < third.wait_seconds <= WINDOW_MS / 1000


def test_what_a_grant_does_not_use_goes_back_to_the_window(client):
    """A token asks for a chunk before it knows how many ids wait their turn: what it could not
    use is the next asker's, not lost to the window."""
    pacer, provider = ProviderPacer(client), f"p-{uuid.uuid4().hex}"
    assert pacer.acquire(provider, 100, 25, "a").granted == 25  # a whole slice
    pacer.give_back(provider, "a", granted=25, used=4)
    assert pacer.acquire(provider, 100, 25, "b").granted == 21
    pacer.give_back(provider, "b", granted=21, used=0)
    assert pacer.acquire(provider, 100, 25, "c").granted == 21


def test_paces_are_per_provider(client):
    pacer = ProviderPacer(client)
    assert pacer.acquire(f"a-{uuid.uuid4().hex}", 50, 5, "x").granted == 5
    assert pacer.acquire(f"b-{uuid.uuid4().hex}", 50, 5, "y").granted == 5


def test_below_one_per_second_the_window_widens(client):
    pacer, provider = ProviderPacer(client), f"p-{uuid.uuid4().hex}"
    assert pacer.acquire(provider, 0.5, 3, "a").granted == 1
    assert 2.0 < pacer.acquire(provider, 0.5, 1, "b").wait_seconds <= window_of(0.5) / 1000


def test_a_timed_pause_never_shortens_a_longer_one(client):
    pauses, provider = ProviderPauses(client), f"p-{uuid.uuid4().hex}"
    pauses.pause(provider, 60, "429")
    pauses.pause(provider, 5, "429 again")
    assert 55 < pauses.seconds_left(provider) <= 60
    pauses.pause(provider, None, "operator")
    pauses.pause(provider, 5, "429")
    assert math.isinf(pauses.seconds_left(provider))
    assert pauses.resume(provider)
    assert pauses.seconds_left(provider) is None
