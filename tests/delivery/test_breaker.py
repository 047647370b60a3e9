"""Circuit breakers on a real Redis: when they open, who probes, and what closes them."""

from __future__ import annotations

import time
import uuid

import pytest
import redis

from app.config import BreakerPolicy
from app.delivery.breaker import CircuitBreakers
from app.enums import CircuitState
from app.runtime.embedded import free_port

POLICY = BreakerPolicy(failures=3, error_rate=0.5, min_volume=10, window=60.0, cooldown=0.2)


@pytest.fixture
def breakers(migrated) -> CircuitBreakers:
    return CircuitBreakers(redis.Redis.from_url(migrated.redis_url), POLICY)


@pytest.fixture
def name() -> str:
    return f"p-{uuid.uuid4().hex[:8]}"


def state(breakers: CircuitBreakers, name: str) -> CircuitState:
    return breakers.states([name])[name].state


def until_half_open(breakers: CircuitBreakers, name: str) -> None:
    deadline = time.monotonic() + 5
    while state(breakers, name) is not CircuitState.HALF_OPEN:
        assert time.monotonic() < deadline, "the cool-down never ended"
        time.sleep(0.02)


def trip(breakers: CircuitBreakers, name: str) -> None:
    for _ in range(POLICY.failures):
        breakers.record(name, ok=0, failed=1, probe=False)
    assert state(breakers, name) is CircuitState.OPEN


def test_consecutive_failed_batches_open_the_circuit(breakers, name):
    # Fewer messages than the error rate needs: it is the run of failed batches that counts.
    assert breakers.record(name, ok=0, failed=2, probe=False) is None
    assert breakers.record(name, ok=0, failed=2, probe=False) is None
    assert breakers.states([name])[name].failures == 2
    assert breakers.record(name, ok=0, failed=1, probe=False) is CircuitState.OPEN
    circuit = breakers.states([name])[name]
    assert circuit.state is CircuitState.OPEN
    assert 0 < circuit.seconds_left <= POLICY.cooldown


def test_a_batch_with_answers_resets_the_run_of_failures(breakers, name):
    for _ in range(POLICY.failures - 1):
        breakers.record(name, ok=0, failed=1, probe=False)
    breakers.record(name, ok=1, failed=0, probe=False)
    for _ in range(POLICY.failures - 1):
        breakers.record(name, ok=0, failed=1, probe=False)
    assert state(breakers, name) is CircuitState.CLOSED


def test_an_error_rate_over_the_window_opens_it_once_there_is_enough_volume(breakers, name):
    # Half of every batch fails: never a run of failed batches, but half the messages.
    for _ in range(4):
        assert breakers.record(name, ok=1, failed=1, probe=False) is None  # 8 messages: below the volume
    assert breakers.record(name, ok=1, failed=1, probe=False) is CircuitState.OPEN


def test_a_low_error_rate_keeps_it_closed(breakers, name):
    for _ in range(10):
        breakers.record(name, ok=3, failed=1, probe=False)
    assert state(breakers, name) is CircuitState.CLOSED


def test_an_open_circuit_refuses_and_ignores_late_batches(breakers, name):
    trip(breakers, name)
    admission = breakers.admit(name)
    assert not admission.admitted
    assert 0 < admission.wait_seconds <= POLICY.cooldown
    # A batch admitted before it opened reports success: only a probe may close it.
    assert breakers.record(name, ok=50, failed=0, probe=False) is None
    assert state(breakers, name) is CircuitState.OPEN


def test_after_the_cool_down_one_probe_goes_and_its_success_closes_the_circuit(breakers, name):
    trip(breakers, name)
    until_half_open(breakers, name)
    first, second = breakers.admit(name), breakers.admit(name)
    assert (first.admitted, first.probe) == (True, True)
    assert not second.admitted
    assert breakers.record(name, ok=1, failed=0, probe=True) is CircuitState.CLOSED
    assert breakers.admit(name).admitted
    assert breakers.states([name])[name].failures == 0


def test_a_failed_probe_opens_it_for_another_cool_down(breakers, name):
    trip(breakers, name)
    until_half_open(breakers, name)
    assert breakers.admit(name).probe
    assert breakers.record(name, ok=3, failed=1, probe=True) is CircuitState.OPEN
    assert state(breakers, name) is CircuitState.OPEN
    until_half_open(breakers, name)
    assert breakers.admit(name).probe  # the failed probe gave its place back


def test_a_probe_that_sent_nothing_leaves_the_circuit_half_open(breakers, name):
    trip(breakers, name)
    until_half_open(breakers, name)
    assert breakers.admit(name).probe
    assert breakers.record(name, ok=0, failed=0, probe=True) is None
    assert state(breakers, name) is CircuitState.HALF_OPEN
    assert breakers.admit(name).probe


def test_reset_closes_it_by_hand(breakers, name):
    trip(breakers, name)
    breakers.reset(name)
    assert state(breakers, name) is CircuitState.CLOSED
    assert breakers.admit(name).admitted


def test_an_unreachable_redis_never_stops_a_send():
    gone = redis.Redis(host="127.0.0.1", port=free_port(), socket_timeout=0.2, socket_connect_timeout=0.2)
    breakers = CircuitBreakers(gone, POLICY)
    assert breakers.admit("fake").admitted
    assert breakers.record("fake", ok=0, failed=1, probe=False) is None
    assert breakers.states(["fake"])["fake"].state is CircuitState.CLOSED


def test_states_count_the_messages_of_the_error_rate_window(breakers, name):
    breakers.record(name, ok=7, failed=1, probe=False)
    breakers.record(name, ok=0, failed=2, probe=False)
    circuit = breakers.states([name])[name]
    assert (circuit.recent_answered, circuit.recent_failed) == (7, 3)
    assert circuit.state is CircuitState.CLOSED and circuit.failures == 1
    breakers.reset(name)
    assert breakers.states([name])[name].recent_answered == 0
