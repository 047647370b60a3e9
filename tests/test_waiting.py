"""The shared wait: it returns the state once reached, and fails with the state it saw at its deadline."""

from __future__ import annotations

import itertools

import pytest

from tests.waiting import wait_until


def test_the_value_that_satisfied_the_wait_is_returned():
    counter = itertools.count()
    assert wait_until(lambda: next(counter), lambda n: n >= 3, 5, "three", every=0) == 3


def test_a_wait_that_never_ends_fails_naming_what_it_waited_for_and_what_it_saw():
    with pytest.raises(AssertionError, match=r"waited 0\.1 s for all sent; last seen: \{'sent': 2, 'ready': 1\}$"):
        wait_until(lambda: {"sent": 2, "ready": 1}, lambda seen: seen == {"sent": 3}, 0.1, "all sent", every=0.01)
