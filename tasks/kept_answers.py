"""A provider's answers that could not be written yet: kept until PostgreSQL answers again.

A deliver run finalises after its provider call. Should the database (or Redis, or a lost
race) fail that batch-wide (tasks/isolation.py `batch_wide`), the messages went and the
run knows how each one ended; forgetting that leaves them `sending` until the claim
timeout turns them `unknown`. So the run keeps the answers: in its own memory, where it
tries the whole finalise again with backoff for KEEP_TRYING_SECONDS, and in Redis
(`Kept`: each message's fate and events, under the claim's worker), so that a worker
restarted or killed meanwhile does not take them along. The sweeper writes what a dead
worker kept, or what a live one gave up on, as soon as PostgreSQL answers
(tasks/maintenance.py), and never settles a kept claim as abandoned.

Bounded: at most MAX_KEPT runs in Redis (each one claim, ≤ 500 messages), for at most
KEEP_DAYS; beyond that the answers are in memory only.
"""

from __future__ import annotations

import json
import logging
import random
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime

import redis
from sqlalchemy.orm import Session

from app.delivery import store
from app.enums import MessageStatus
from app.redis_client import hash_of
from tasks import isolation

logger = logging.getLogger(__name__)

KEY = "tidings:kept_answers"
# How long a run keeps trying to write its answers before it leaves them to the sweeper.
KEEP_TRYING_SECONDS = 120.0
# Its waits between tries: doubling from the first to the last, with jitter.
FIRST_WAIT, LAST_WAIT = 0.1, 1.0
MAX_KEPT = 200
KEEP_DAYS = 7

# KEYS: the hash. ARGV: the field, the record, the most records, the hash's TTL. → 1 if kept.
_KEEP = """
if redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[3]) and redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[4])
return 1
"""


@dataclass(frozen=True)
class Kept:
    """One run's answers as the sweeper needs them to write them: each message's fate, its
    events, the worker process whose claim it is (finalise writes only over its own claim),
    and when the run stops trying itself (time.time())."""

    key: str
    worker: str
    outcomes: tuple[store.Finalised, ...]
    events: tuple[store.NewEvent, ...]
    until: float

    def dumps(self) -> str:
        return json.dumps(
            {
                "worker": self.worker,
                "until": self.until,
                "outcomes": [
                    {**asdict(o), "status": o.status.value, "next_attempt_at": _iso(o.next_attempt_at)}
                    for o in self.outcomes
                ],
                "events": [asdict(e) for e in self.events],
            }
        )

    @classmethod
    def loads(cls, key: str, raw: str | bytes) -> Kept:
        data = json.loads(raw)
        outcomes = tuple(
            store.Finalised(
                **{
                    **o,
                    "status": MessageStatus(o["status"]),
                    "next_attempt_at": o["next_attempt_at"] and datetime.fromisoformat(o["next_attempt_at"]),
                }
            )
            for o in data["outcomes"]
        )
        events = tuple(store.NewEvent(**e) for e in data["events"])
        worker, until = data["worker"], data["until"]
        if not isinstance(worker, str) or isinstance(until, bool) or not isinstance(until, int | float):
            raise ValueError(f"worker {worker!r} until {until!r}")
        return cls(key, worker, outcomes, events, until)

    def message_ids(self) -> list[str]:
        return [o.message_id for o in self.outcomes]


def _iso(at: datetime | None) -> str | None:
    return None if at is None else at.isoformat()


def write_or_keep(
    client: redis.Redis,
    write: Callable[[], None],
    keep: Callable[[str, float], Kept],
) -> bool:
    """`write` the run's answers; when that fails batch-wide, `keep` them (in Redis too) and
    write them again as soon as it works, for KEEP_TRYING_SECONDS. Whether they are written;
    if not, they are the sweeper's to write. An error of the answers' own is raised."""
    try:
        write()
        return True
    except Exception as error:
        if not isolation.batch_wide(error):
            raise
        first = error
    until = time.time() + KEEP_TRYING_SECONDS
    kept = keep(uuid.uuid4().hex, until)
    stored = remember(client, kept)
    logger.warning(
        "%d answers kept (%s) until they can be written: %s",
        len(kept.outcomes),
        "in memory and Redis" if stored else "in memory only",
        first,
    )
    wait = FIRST_WAIT
    while time.time() < until:
        time.sleep(random.uniform(wait / 2, wait))
        wait = min(wait * 2, LAST_WAIT)
        try:
            write()
        except Exception as error:
            if not isolation.batch_wide(error):
                raise
            continue
        forget(client, [kept.key])
        logger.warning("%d kept answers written", len(kept.outcomes))
        return True
    logger.error("%d kept answers left to the sweeper after %.0f s", len(kept.outcomes), KEEP_TRYING_SECONDS)
    return False


def remember(client: redis.Redis, kept: Kept) -> bool:
    """Keep `kept` in Redis; False when Redis is away or holds MAX_KEPT runs already."""
    try:
        return bool(client.eval(_KEEP, 1, KEY, kept.key, kept.dumps(), MAX_KEPT, KEEP_DAYS * 86400))
    except redis.RedisError as error:
        logger.warning("answers not kept in Redis: %s", error)
        return False


def forget(client: redis.Redis, keys: Sequence[str | bytes]) -> None:
    """Drop written runs (or entries that are no runs); Redis away only leaves them for the
    sweeper, whose write finds them done."""
    if not keys:
        return
    try:
        client.hdel(KEY, *keys)
    except redis.RedisError as error:
        logger.warning("written answers not forgotten in Redis: %s", error)


def all_kept(client: redis.Redis) -> list[Kept]:
    """Every run kept in Redis (at most MAX_KEPT). An entry that is not a run (garbled, or
    written by another version) is logged and dropped alone: failing on it would leave
    every other run unwritten at every sweep."""
    kept: list[Kept] = []
    garbled: list[bytes] = []
    for key, raw in hash_of(client, KEY).items():
        try:
            kept.append(Kept.loads(key.decode(), raw))
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            logger.error("kept answers %r dropped, not a run: %s: %s", key, type(error).__name__, error)
            garbled.append(key)
    forget(client, garbled)
    return kept


def write(session: Session, kept: Kept) -> int:
    """Write a kept run's answers over what its worker still holds; how many. Retries and
    waits it sets are released by beat (release_due, the stalled sweep) when due."""
    held = store.held_by(session, kept.message_ids(), kept.worker)
    store.finalise(session, [o for o in kept.outcomes if o.message_id in held], kept.worker)
    store.record_events(session, [e for e in kept.events if e.message_id in held])
    return len(held)
