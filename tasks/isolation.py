"""One message's poison fails that message, never the batch it shares with other projects.

Prepare and finalise run set-based over up to 500 messages of many projects in one
transaction, so one message whose data the code cannot handle, or whose values the
database refuses, would fail them all, again at every sweep. When such a step raises
anything that is not the batch's own trouble (the database, Redis or the broker
unreachable: those retry the whole batch, as before), the step runs again on each half,
down to the message that fails alone, which is failed with the error as its reason. One
poison in 500 costs about 2·log2(500) ≈ 18 more transactions, once.

A message whose handling kills its worker (out of memory, a crash, a hard time limit)
leaves no exception to catch: its runs are counted instead (UnfinishedRuns). The run
after one that died goes one task per message, and a message whose own runs keep dying
is failed without another try (UnfinishedRuns.admit, for prepare and deliver): a few
worker deaths, whatever the size of its batch, and its batch-mates go on after the first.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import kombu.exceptions
import redis
import sqlalchemy.exc

from app.config import Settings
from app.db import session_scope
from app.delivery import store
from app.enums import MessageStatus
from app.observability.counters import increment
from app.redis_client import redis_for

logger = logging.getLogger(__name__)

# Trouble that belongs to the batch, not to a message in it: the whole batch is retried.
BATCH_WIDE: tuple[type[BaseException], ...] = (
    sqlalchemy.exc.OperationalError,
    sqlalchemy.exc.InterfaceError,
    sqlalchemy.exc.TimeoutError,
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    kombu.exceptions.OperationalError,
)

# A message whose own runs died this often is failed instead of run again: more than once,
# so that one deploy's hard kill never fails a message that was merely in flight.
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
    """Runs of a stage that started on a message and did not finish, per message, in Redis:
    what is left of a batch whose worker was killed. One hash per stage; a finished run
    deletes its messages' counts, so it holds only messages whose runs died."""

    # Counts of messages that never come back (cancelled, erased) go with the hash after this.
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
        """This run will not happen after all (its messages go one per task, or were not its
        to take): uncount it, forgetting the messages no dead run holds."""
        if ids:
            self._undo(keys=[self.key], args=[" ".join(ids)])

    def finish(self, ids: Sequence[str]) -> None:
        if ids:
            self._finish(keys=[self.key], args=[" ".join(ids)])

    def admit(
        self, ids: Sequence[str], one_per_task: Callable[[Sequence[str]], Any], fail: Callable[[str, str], Any]
    ) -> bool:
        """Count this run on `ids`; whether it may go ahead. After a run holding some of them
        died, they go `one_per_task` instead, to find the killer; a message whose own runs
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


def in_halves(ids: Sequence[str], step: Callable[[Sequence[str]], None], alone: Callable[[str, str], None]) -> None:
    """Run `step` on `ids`; if it fails on a message's account, on each half instead, until
    the message that fails alone is handed to `alone` with the reason."""
    try:
        step(ids)
    except BATCH_WIDE:
        raise
    except Exception as error:
        if len(ids) == 1:
            alone(ids[0], reason(error))
            return
        middle = len(ids) // 2
        in_halves(ids[:middle], step, alone)
        in_halves(ids[middle:], step, alone)


def reason(error: Exception) -> str:
    return f"could not be processed: {type(error).__name__}: {error}"


def fail_poisoned(config: Settings, stage: str, expected: MessageStatus, message_id: str, why: str) -> None:
    """Fail one message that its batch step could not handle, with the reason in its timeline."""
    logger.warning("message failed alone in %s: %s", stage, why, extra={"message_id": message_id})
    with session_scope(config.database_url) as session:
        failed = store.fail_alone(session, message_id, expected, f"{stage} {why}")
    UnfinishedRuns(redis_for(config.redis_url), stage).finish([message_id])
    if failed:
        increment(redis_for(config.redis_url), "poison_messages", stage=stage)
