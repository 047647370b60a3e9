"""One door for every task that carries several projects' items: a poison fails its item alone.

Prepare, deliver, finalise, workflow steps, webhook deliveries and reports each run
set-based over up to 500 items of many projects in one transaction, so one item whose data
the code cannot handle, or whose values the database refuses, would fail them all, again
at every sweep. Every such task goes through `batch`: each part runs in its own
transaction, and a failure that is not the batch's own trouble (`batch_wide`, app/outages.py:
the database, Redis or the broker unreachable, a deadlock; those retry the whole batch) runs again on
each half, down to the item that fails alone, which is failed with the error as its reason
and counted (`poison_messages`, by stage). One poison in 500 costs about
2·log2(500) ≈ 18 more transactions, once.

An item whose handling kills its worker (out of memory, a crash, a hard time limit)
leaves no exception to catch: its runs are counted instead (UnfinishedRuns). The run
after one that died goes one task per item, and an item whose own runs keep dying is
failed without another try (UnfinishedRuns.admit): a few worker deaths, whatever the size
of its batch, and its batch-mates go on after the first.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import redis

from app.config import Settings
from app.db import session_scope
from app.delivery import store
from app.enums import MessageStatus
from app.observability.counters import increment
from app.outages import unavailable as batch_wide  # a service's trouble is the whole batch's, retried whole
from app.redis_client import redis_for

logger = logging.getLogger(__name__)
T = TypeVar("T")

# An item whose own runs died this often is failed instead of run again: more than once,
# so that one deploy's hard kill never fails an item that was merely in flight.
KILLED_RUNS = 3


# Every script takes the ids as one space-separated argument: redis-py encodes each
# argument in Python, which for a batch's hundreds of ids cost more than Redis's work.

# KEYS: the stage's hash. ARGV: the hash's TTL, the ids, each counted once more.
# → the most runs any of them had before this one.
_START = """
local most = 0
for id in string.gmatch(ARGV[2], '%S+') do
  local runs = redis.call('HINCRBY', KEYS[1], id, 1)
  if runs > most then most = runs end
end
redis.call('EXPIRE', KEYS[1], ARGV[1])
return most - 1
"""

# KEYS: the stage's hash. ARGV: the ids, each counted once less; a count of none goes.
_UNDO = """
for id in string.gmatch(ARGV[1], '%S+') do
  if redis.call('HINCRBY', KEYS[1], id, -1) <= 0 then redis.call('HDEL', KEYS[1], id) end
end
"""

# KEYS: the stage's hash. ARGV: the ids, whose counts go.
_FINISH = """
for id in string.gmatch(ARGV[1], '%S+') do redis.call('HDEL', KEYS[1], id) end
"""


class UnfinishedRuns:
    """Runs of a stage that started on an item and did not finish, per item, in Redis:
    what is left of a batch whose worker was killed. One hash per stage; a finished run
    deletes its items' counts, so it holds only items whose runs died."""

    # Counts of items that never come back (cancelled, erased, ended) go with the hash after this.
    KEEP_SECONDS = 24 * 3600

    def __init__(self, client: redis.Redis, stage: str):
        self.client = client
        self.key = f"tidings:unfinished:{stage}"
        self._start = client.register_script(_START)
        self._undo = client.register_script(_UNDO)
        self._finish = client.register_script(_FINISH)

    def start(self, ids: Sequence[str]) -> int:
        """Count this run on each of `ids`, in one round trip and one command (a pipeline of a
        command per message cost deliver a third of its CPU); the most unfinished runs any
        of them had before it."""
        return int(self._start(keys=[self.key], args=[self.KEEP_SECONDS, " ".join(ids)]))

    def undo(self, ids: Sequence[str]) -> None:
        """This run will not happen after all (its items go one per task, or were not its
        to take): uncount it, forgetting the items no dead run holds."""
        if ids:
            self._undo(keys=[self.key], args=[" ".join(ids)])

    def finish(self, ids: Sequence[str]) -> None:
        if ids:
            self._finish(keys=[self.key], args=[" ".join(ids)])

    def admit(
        self, ids: Sequence[str], one_per_task: Callable[[Sequence[str]], Any], fail: Callable[[str, str], Any]
    ) -> bool:
        """Count this run on `ids`; whether it may go ahead. After a run holding some of them
        died, they go `one_per_task` instead, to find the killer; an item whose own runs
        died KILLED_RUNS times is failed with the reason instead of run again. A run that
        goes ahead ends with `finish` (or `undo`) on every id, whatever happens short of death."""
        unfinished = self.start(ids)
        if unfinished and len(ids) > 1:
            self.undo(ids)
            one_per_task(ids)
            return False
        if unfinished >= KILLED_RUNS:
            fail(ids[0], f"killed its worker {unfinished} times")
            return False
        return True


def in_halves(ids: Sequence[str], step: Callable[[Sequence[str]], Any], alone: Callable[[str, str], Any]) -> None:
    """Run `step` on `ids`; if it fails on an item's account, on each half instead, until
    the item that fails alone is handed to `alone` with the reason."""
    if not ids:
        return
    try:
        step(ids)
    except Exception as error:
        if batch_wide(error):
            raise
        if len(ids) == 1:
            alone(ids[0], reason(error))
            return
        middle = len(ids) // 2
        in_halves(ids[:middle], step, alone)
        in_halves(ids[middle:], step, alone)


def reason(error: Exception) -> str:
    return f"could not be processed: {type(error).__name__}: {error}"


class Run:
    """One task's pass through the door (`batch`): the items it may handle, those it took,
    and what it does with one that fails alone."""

    def __init__(self, stage: str, ids: Sequence[str], fail_alone: Callable[[str, str], bool], client: redis.Redis):
        self.stage = stage
        self.ids = list(ids)
        self.taken: set[str] = set()
        self.failed: set[str] = set()
        self._fail_alone = fail_alone
        self._client = client

    def took(self, ids: Iterable[str]) -> None:
        """Mark `ids` as this run's own: a death of its worker from now on counts on them."""
        self.taken.update(ids)

    def in_halves(
        self, step: Callable[[Sequence[str]], Iterable[str] | None], *, among: Sequence[str] | None = None
    ) -> None:
        """Run `step` over the run's items (or those `among` them), each part in the
        transaction `step` opens, halving a failure down to the item that fails alone. `step`
        returns the ids it took (rows another run holds are not its own), or None for all."""

        def counted(part: Sequence[str]) -> None:
            taken = step(part)
            self.took(part if taken is None else taken)

        in_halves(self.ids if among is None else among, counted, self.fail)

    def alone(self, item: str, call: Callable[[], T]) -> T | None:
        """`call` for one item, which fails alone if it raises on its own account: for work
        that must not be done again in halves (a POST made is made). None when it failed."""
        try:
            return call()
        except Exception as error:
            if batch_wide(error):
                raise
            self.fail(item, reason(error))
            return None

    def fail(self, item: str, why: str) -> None:
        """Fail one item with the reason, and count it if it was still there to fail."""
        logger.warning("%s failed alone in %s: %s", item, self.stage, why)
        self.took([item])
        self.failed.add(item)
        if self._fail_alone(item, why):
            increment(self._client, "poison_messages", stage=self.stage)


@contextmanager
def batch(
    stage: str,
    ids: Sequence[str],
    *,
    config: Settings,
    fail_alone: Callable[[str, str], bool],
    redispatch: Callable[[Sequence[str]], Any] | None = None,
) -> Iterator[Run]:
    """The door every task that carries several projects' items goes through.

    With `redispatch`, the deaths of the stage's runs are counted per item: after a run that
    died, the items go `redispatch` (one per task) instead and the run gets none; an item
    whose runs keep dying is failed. Every item the run took is finished on the way out,
    whatever happens short of death; the others are not its to count.
    """
    client = redis_for(config.redis_url)
    run = Run(stage, ids, fail_alone, client)
    deaths = None
    if redispatch is not None and run.ids:
        deaths = UnfinishedRuns(client, stage)
        if not deaths.admit(run.ids, redispatch, run.fail):
            run.ids = []
    try:
        yield run
    finally:
        if deaths is not None:
            deaths.finish(sorted(run.taken))
            deaths.undo(sorted(set(run.ids) - run.taken))


def fail_message(config: Settings, stage: str, expected: MessageStatus) -> Callable[[str, str], bool]:
    """Fail one message still at `expected` that its batch could not handle, with the reason
    in its timeline: what a message stage's door does with its poison."""

    def fail(message_id: str, why: str) -> bool:
        with session_scope(config.database_url) as session:
            return store.fail_alone(session, message_id, expected, f"{stage} {why}")

    return fail
