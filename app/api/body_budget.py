"""The bytes of large request bodies an API process holds at once, bounded.

A body over 1 MiB (a batch, an import, a send with files: up to 16 MiB) is held while it is
parsed and stored, as bytes, as parsed JSON and in the statements that write it, about three
times its size. Each of a process's threads may hold one, so 32 sends with 10 MiB files at
once would take 1.3 GB; the process instead admits large bodies while their declared sizes
fit its budget (LARGE_BODY_BUDGET_MIB) and answers the rest 503 with `Retry-After`, as it
does when its stream slots are full: the server is busy, another process may not be.
"""

from __future__ import annotations

import threading

from flask import g, request

from app.errors import abort

RETRY_AFTER = {"Retry-After": "1"}


class BodyBudget:
    """Bytes of large bodies admitted and not yet done with, up to `most`."""

    def __init__(self, most: int):
        self.most = most
        self.held = 0
        self._lock = threading.Lock()

    def take(self, size: int) -> bool:
        with self._lock:
            if self.held + size > self.most:
                return False
            self.held += size
            return True

    def give(self, size: int) -> None:
        with self._lock:
            self.held -= size


def admit(budget: BodyBudget, *, small: int, largest: int) -> None:
    """Take the request's declared size from `budget` when it is over `small` (`largest` when
    it declares none), or stop it with 503; `release` gives it back when the request ends."""
    size = request.content_length if request.content_length is not None else largest
    if size <= small:
        return
    if not budget.take(size):
        abort(503, "This server is reading as many large bodies as it may; try again shortly.", headers=RETRY_AFTER)
    g.body_budget = (budget, size)


def release(error: BaseException | None = None) -> None:
    """Give back what `admit` took for this request, however it ended."""
    taken = g.pop("body_budget", None)
    if taken is not None:
        budget, size = taken
        budget.give(size)
