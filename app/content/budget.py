"""What one render or compile may spend, counted while it runs: steps, characters built, and time.

Template sources are untrusted code that runs in the prepare worker's threads and the
API's, where neither Celery's time limits nor signals can stop it. So the sandbox's hooks
(attribute access, calls, operators, filters, loop iterations, output) report to the
render's budget as they run, and the budget raises SecurityError the moment one of its
limits is passed:

- steps: loop iterations and calls of macros, blocks and `loop()` together, because those
  are the ways a short source repeats work (nested loops multiply, recursion fans out);
- characters built: every string, list or dict a hook returns counts its length, so a
  render cannot keep gigabytes alive in values that are each under the size cap;
- time: the render thread's own CPU clock (`time.thread_time`). A wall clock would also
  count the time this thread waits for the GIL while its neighbours run, and fail good
  templates on a busy worker; CPU time is what a bomb takes from the other tenants.
  Reading that clock is a system call (about 1 µs), so each tick reads the monotonic
  clock (tens of ns) first: CPU time cannot have run out before wall time has.

Compiling spends a budget of its own, in time only (app/content/compiling.py says where it
is counted); outside a budget nothing is counted.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from jinja2.sandbox import SecurityError

MAX_STEPS = 10_000
MAX_BUILT = 8 * 1024 * 1024
RENDER_SECONDS = 0.25
# A send compiles a version once per process and locale (failures included), so it may take
# longer than one render: Jinja is slow to compile campaign HTML (BENCHMARKS.md, "Compiling
# templates"). A save must compile within half of it, so what was saved still compiles on a
# busier worker.
COMPILE_SECONDS = 1.0
SAVE_COMPILE_SECONDS = COMPILE_SECONDS / 2


class Budget:
    """The allowance of one render; made by `budgeted`, spent through the functions below."""

    def __init__(self, seconds: float, *, doing: str = "render") -> None:
        self.seconds = seconds
        self.doing = doing
        self.steps_left = MAX_STEPS
        self.built_left = MAX_BUILT
        self.wall_deadline = time.monotonic() + seconds
        self.deadline = time.thread_time() + seconds

    def tick(self) -> None:
        if time.monotonic() > self.wall_deadline and time.thread_time() > self.deadline:
            raise SecurityError(f"the template takes more than {self.seconds} s to {self.doing}")

    def step(self) -> None:
        self.tick()
        self.steps_left -= 1
        if self.steps_left < 0:
            raise SecurityError(f"the template runs more than {MAX_STEPS} loop iterations and macro calls")

    def build(self, size: int) -> None:
        self.tick()
        self.built_left -= size
        if self.built_left < 0:
            raise SecurityError(f"the template builds more than {MAX_BUILT} characters in all")


_current: ContextVar[Budget | None] = ContextVar("render_budget", default=None)


@contextmanager
def budgeted(seconds: float = RENDER_SECONDS, *, doing: str = "render") -> Iterator[Budget]:
    """A fresh budget for the render (or compile: `doing`) run inside the block."""
    budget = Budget(seconds, doing=doing)
    token = _current.set(budget)
    try:
        yield budget
    finally:
        _current.reset(token)


def tick() -> None:
    """A hook ran: check the clock now and then."""
    budget = _current.get()
    if budget is not None:
        budget.tick()


def step() -> None:
    """A loop iteration or a macro, block or `loop()` call."""
    budget = _current.get()
    if budget is not None:
        budget.step()


def build(size: int) -> None:
    """A hook made a value of this length."""
    budget = _current.get()
    if budget is not None:
        budget.build(size)
