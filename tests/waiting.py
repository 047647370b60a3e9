"""The one way tests wait for a state: poll with a deadline that fails the test with what it saw.

A wait that just returns at its deadline lets the test go on against a state that never came:
it fails later, far from the cause, or it passes having tested nothing (a fault injected
before anything was in flight). pytest-timeout's suite-wide limit catches a loop that never
ends; this makes each wait end sooner, and say why.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    observe: Callable[[], T],
    done: Callable[[T], object],
    timeout: float,
    what: str,
    every: float = 0.05,
    show: Callable[[T], object] = repr,
) -> T:
    """`observe()` every `every` seconds until `done(value)` is truthy; that value.

    At the deadline the test fails, naming `what` it waited for and the last value seen
    (through `show`, for values too long to print whole).
    """
    deadline = time.monotonic() + timeout
    while not done(value := observe()):
        if time.monotonic() >= deadline:
            raise AssertionError(f"waited {timeout:g} s for {what}; last seen: {show(value)}")
        time.sleep(every)
    return value
