"""Single sends reach the workers in micro-batches: one prepare task per flush, not per send.

A Celery worker's main process handles about 1,300 tasks a second whatever a task carries,
so a single send that cost a prepare task of its own (and then a deliver task) capped the
pipeline near 600 sends a second. Instead, once its row is committed, a send's id is handed
to this process's coalescer, and a background thread publishes everything gathered per
priority as each project's chunk, to wait its project's turn in the lane
(app/delivery/fairness.py), and one prepare token per `dispatch.CHUNK` ids: a token takes
the ids of many projects in turn, so a flush still costs one task however many projects
sent, and a project flooding a lane does not hold another's sends behind it.

When it publishes: at once if nothing was published during the last linger
(`PREPARE_LINGER_MS`), so a lone send on a quiet system waits for nothing; otherwise when
the linger since the last publish is up, or as soon as `dispatch.CHUNK` ids are waiting.
Under load that is at most one publish per linger and process, and no id waits longer.

Why nothing is lost:
- ids are handed over only after their rows committed, as with app.db's outbox;
- a process that stops gracefully publishes what is waiting as it exits (`atexit`: a
  gunicorn worker, the SMTP server and the CLI all end through it);
- a crash between commit and publish, or a broker that refuses the publish (app.db.publish
  retries once, then logs), leaves the messages `accepted` with no task; the sweeper
  (tasks.maintenance.sweep) re-dispatches them after STALLED_AFTER_SECONDS.

A forked child starts with no coalescer and no thread (gunicorn forks its workers from a
master that never sends): the ids waiting in the parent are the parent's to publish.

Each task carries the request ids of the sends it holds (app.observability.logs): one id as before when
they came from one request, as on a quiet system; a list when they came from several, so a
grep for any of them still finds the prepare and deliver lines of its message.
"""

from __future__ import annotations

import atexit
import logging
import math
import os
import threading
import time
from collections.abc import Sequence

from app.config import current_settings
from app.db import publish
from app.delivery import dispatch
from app.delivery.fairness import FairChunks
from app.observability import logs
from app.observability.counters import Tally
from app.redis_client import redis_for

logger = logging.getLogger(__name__)


class Coalescer:
    """Message ids waiting for a prepare task, by priority and project, and the thread that publishes them."""

    def __init__(self, linger: float, limit: int = dispatch.CHUNK):
        self.linger = linger
        self.limit = limit
        # priority → project → message id → the request that sent it
        self._waiting: dict[str, dict[str, dict[str, str | None]]] = {}
        self._count = 0
        self._published_at = -math.inf
        self._changed = threading.Condition()
        # Held for a whole publish, so a flush at exit waits for the thread's publish to end.
        self._publishing = threading.Lock()
        self._thread: threading.Thread | None = None

    def add(self, ids: Sequence[str], priority: str, request_id: str | None = None, *, project: str) -> None:
        """Queue committed `accepted` messages of `project` for a prepare task; returns at once."""
        if not ids:
            return
        with self._changed:
            woke_empty = self._count == 0
            mine = self._waiting.setdefault(str(priority), {}).setdefault(project, {})
            mine.update(dict.fromkeys(map(str, ids), request_id))
            self._count += len(ids)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="tidings-coalescer", daemon=True)
                self._thread.start()
            if woke_empty or self._count >= self.limit:
                self._changed.notify()

    def flush(self) -> None:
        """Publish everything waiting now, after any publish already under way."""
        with self._publishing:
            with self._changed:
                waiting, self._waiting, self._count = self._waiting, {}, 0
                if waiting:
                    self._published_at = time.monotonic()
            if waiting:
                publish_prepares(waiting)

    def _run(self) -> None:
        while True:
            with self._changed:
                while self._count == 0:
                    self._changed.wait()
                while self._count < self.limit and (left := self._published_at + self.linger - time.monotonic()) > 0:
                    self._changed.wait(left)
            self.flush()


def publish_prepares(waiting: dict[str, dict[str, dict[str, str | None]]]) -> None:
    """Each priority's chunks and tokens, the tokens with their sends' request ids; counted,
    so /metrics shows sends per task.

    After the first publish the broker or Redis refuses, the rest are not tried: each try
    may take a connect timeout, and ids arriving meanwhile would pile up behind them.
    """
    published = [
        (priority, with_request_ids(fair, by_project))
        for priority, by_project in waiting.items()
        for fair in dispatch.prepare_in_turn({project: list(sent) for project, sent in by_project.items()}, priority)
    ]
    tally = Tally()
    for done, (priority, fair) in enumerate(published):
        if not publish(fair):
            left = sum(later.messages for _, later in published[done:])
            logger.warning("no prepare task for %d accepted messages; the sweeper will dispatch them", left)
            break
        tally.count("coalesced_tasks", fair.tokens, priority=priority)
        tally.count("coalesced_messages", fair.messages, priority=priority)
    tally.flush(redis_for(current_settings().redis_url))


def with_request_ids(fair: FairChunks, by_project: dict[str, dict[str, str | None]]) -> FairChunks:
    """The flush's request ids on its tokens: a token takes ids of several sends, so a grep
    for any of them finds the prepare and deliver lines of its message."""
    requests = sorted({request for sent in by_project.values() for request in sent.values() if request is not None})
    if requests:
        # celery-types takes only str headers; Celery sends any JSON.
        fair.token.set(headers={logs.TASK_HEADER: requests[0] if len(requests) == 1 else requests})  # type: ignore[dict-item]
    return fair


_lock = threading.Lock()
_coalescer: Coalescer | None = None


def prepare_soon(ids: Sequence[str], priority: str, *, project: str) -> None:
    """Hand committed `accepted` messages of `project` to this process's coalescer (after the
    commit, never in it)."""
    global _coalescer
    with _lock:
        if _coalescer is None:
            _coalescer = Coalescer(current_settings().prepare_linger)
        coalescer = _coalescer
    coalescer.add(ids, priority, logs.current().get("request_id"), project=project)


def flush() -> None:
    """Publish what this process has waiting: on the way out, so a graceful stop loses nothing."""
    if _coalescer is not None:
        _coalescer.flush()


def _start_empty_after_fork() -> None:
    global _coalescer, _lock
    _coalescer, _lock = None, threading.Lock()


os.register_at_fork(after_in_child=_start_empty_after_fork)
atexit.register(flush)
