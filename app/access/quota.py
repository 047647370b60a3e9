"""Daily quotas: how many messages of a channel a project may have accepted in its day, and
how many bytes of words and files its sends may store, exactly, however many API processes
take from them at once. What a quota counts is its `Meter`: messages of one channel, or the
bytes of a key kind's sends; everything below is the same for each, "channel" standing for
the meter's name.

Redis counts. Each (project, channel, day) is a hash of `used` and the `generation` it
counts from, changed by Lua check-and-add, so two concurrent takes never pass the limit
between them, and a refusal (what a runaway loop gets all day) costs one Redis call.

PostgreSQL decides when Redis cannot: it is down, or holds nothing for the day (a new day,
or its data was lost). It counts the day's messages under an exclusive advisory lock per
(project, channel), and every accept that took from Redis holds that lock shared until it
commits, so the count waits for them and sees each message Redis let through. Accepts that
take the lock exclusively wait for each other: exact, and slower, which is right for a
fallback.

Generations keep the two in agreement. Each decision PostgreSQL lets through gives its
(project, channel) a new generation (from one sequence, so they only grow) in its own
transaction, and publishes its count to Redis under it once committed; Redis never holds a
generation PostgreSQL has not committed. A take from Redis is good only if the generation it
counted from is PostgreSQL's, read under the shared lock: otherwise PostgreSQL decided alone
since (while Redis was down), the take is put back, and the day is counted again.

Should Redis lose the day while an accept holds the lock shared and has to count again, that
accept cannot wait for the others holding it: it is refused with a 503 to retry, never let
through uncounted. Left out of the message quotas on purpose: test keys, which reach no
provider (their storage is bounded all the same). Approximate by a clock's skew: the day is
the API's clock's, while PostgreSQL counts by `created_at`, the database's; a send a moment
from midnight may be recounted into the other day. Bytes are measured as PostgreSQL measures
the stored text (app/access/storage.py), up to the spacing of JSON and the words a template
renders later, which only PostgreSQL's count sees.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from datetime import time as midnight_time
from functools import partial
from typing import TypedDict
from zoneinfo import ZoneInfo

import redis
from sqlalchemy import TextClause, text
from sqlalchemy.orm import Session

from app.access.refusals import LimitUnknown
from app.enums import Channel
from app.observability.quota_usage import HASH as USAGE_HASH
from app.observability.quota_usage import usage_field

logger = logging.getLogger(__name__)

# The first key of every quota advisory lock; the second is hashtext('project:channel').
LOCK_CLASS = 0x71756F74  # "quot"
# A day's counter outlives its day by this much, for a request that read the clock just before midnight.
KEEP_AFTER_DAY = timedelta(days=1)

# Every script notes the state it leaves in the usage hash (app/observability/quota_usage.py):
# KEYS[1] the day's counter, KEYS[2] that hash; ARGV[1] the usage field ('': none), ARGV[2] the limit,
# ARGV[3] when the day ends (Unix seconds). Each answers {status, used, generation}:
# status 1 taken, 0 refused (used is then the use before), -1 no state for the day.
NOTE = """
local function note(used)
  if ARGV[1] ~= '' then redis.call('HSET', KEYS[2], ARGV[1], used .. ' ' .. ARGV[2] .. ' ' .. ARGV[3]) end
end
local function take(count)
  local state = redis.call('HMGET', KEYS[1], 'used', 'generation')
  if not state[2] then return {-1, 0, 0} end
  local used = tonumber(state[1])
  if used + count > tonumber(ARGV[2]) then
    note(used)
    return {0, used, tonumber(state[2])}
  end
  used = redis.call('HINCRBY', KEYS[1], 'used', count)
  note(used)
  return {1, used, tonumber(state[2])}
end
"""
# ARGV[4] what to take (messages, bytes).
TAKE = NOTE + "return take(tonumber(ARGV[4]))"
# PostgreSQL's count as the day's state: ARGV[4] used, ARGV[5] its generation, ARGV[6] when the
# counter expires, ARGV[7] what to take then (0: none), ARGV[8] 1 if a missing state is to
# stay missing. A state of a newer generation is kept: it counts from a later decision.
SETTLE = (
    NOTE
    + """
local current = redis.call('HGET', KEYS[1], 'generation')
if not current and ARGV[8] == '1' then return {-1, 0, 0} end
if not current or tonumber(current) < tonumber(ARGV[5]) then
  redis.call('HSET', KEYS[1], 'used', ARGV[4], 'generation', ARGV[5])
  redis.call('EXPIREAT', KEYS[1], ARGV[6])
  note(ARGV[4])
end
if tonumber(ARGV[7]) == 0 then return {1, tonumber(ARGV[4]), tonumber(ARGV[5])} end
return take(tonumber(ARGV[7]))
"""
)
# Put a take back, if the state it was taken from is still the day's: ARGV[4] what was taken, ARGV[5] its generation.
GIVE_BACK = (
    NOTE
    + """
if redis.call('HGET', KEYS[1], 'generation') == ARGV[5] then
  note(redis.call('HINCRBY', KEYS[1], 'used', -tonumber(ARGV[4])))
end
return {1, 0, 0}
"""
)

# The shared lock, then the generation as committed once it is held (migration 0010).
HOLD_SHARED = text("SELECT quota_hold_shared(:lock_class, :lock_name, :project, :channel)")
LOCK_EXCLUSIVE = text("SELECT pg_advisory_xact_lock(:lock_class, hashtext(:lock_name))")
GENERATION = text(
    "SELECT coalesce(max(generation), 0) FROM quota_generations WHERE project_id = :project AND channel = :channel"
)
COUNT = text(
    """
    SELECT count(*) FROM messages
    WHERE project_id = :project AND channel = :channel AND NOT test AND created_at >= :start AND created_at < :end
    """
)
# The bytes the day's sends of one key kind stored: each message's words and data, and each file
# they name once (app/access/storage.py measures a send the same way).
COUNT_BYTES = text(
    """
    WITH day AS (
        SELECT c.subject, c.text, c.html, c.data, c.metadata, c.headers, c.attachment_ids
        FROM messages m JOIN message_contents c ON c.message_id = m.id
        WHERE m.project_id = :project AND m.test = :test AND m.created_at >= :start AND m.created_at < :end
    )
    SELECT coalesce((SELECT sum(coalesce(octet_length(subject), 0) + coalesce(octet_length(text), 0)
                                + coalesce(octet_length(html), 0) + octet_length(data::text)
                                + octet_length(metadata::text) + coalesce(octet_length(headers::text), 0))
                     FROM day), 0)
         + coalesce((SELECT sum(octet_length(content)) FROM attachments
                     WHERE id IN (SELECT unnest(attachment_ids) FROM day)), 0)
    """
)
NEW_GENERATION = text(
    """
    INSERT INTO quota_generations (project_id, channel, generation)
    VALUES (:project, :channel, nextval('quota_generation'))
    ON CONFLICT (project_id, channel) DO UPDATE SET generation = excluded.generation
    RETURNING generation
    """
)

TAKEN, REFUSED, MISSING = 1, 0, -1


@dataclass(frozen=True, eq=False)  # its SQL compares as an expression, not a value
class Meter:
    """What a daily quota counts: its name (in Redis keys, advisory locks and quota_generations'
    `channel`, 16 characters at most) and how PostgreSQL counts a day of it."""

    name: str
    count: TextClause
    params: Mapping[str, object] = field(default_factory=dict)
    # Whether its use is noted for /metrics and the digest (messages per channel are).
    noted: bool = False


def messages_of(channel: Channel) -> Meter:
    """A channel's messages accepted with live keys."""
    return Meter(channel.value, COUNT, {"channel": channel.value}, noted=True)


def storage_of(test: bool) -> Meter:
    """The bytes stored by the sends of a project's test keys, or of its live keys."""
    return Meter("test-bytes" if test else "bytes", COUNT_BYTES, {"test": test})


@dataclass(frozen=True)
class QuotaDay:
    """A project's day: its date where the project is, and when it starts and ends."""

    date: str
    start: datetime
    end: datetime


def quota_day(now: float, zone: str) -> QuotaDay:
    """The day `now` falls in at `zone`: from one local midnight to the next (23 to 25 hours
    across a change of clocks)."""
    tz = ZoneInfo(zone)
    today = datetime.fromtimestamp(now, tz).date()
    start = datetime.combine(today, midnight_time(), tz)
    end = datetime.combine(today + timedelta(days=1), midnight_time(), tz)
    return QuotaDay(today.isoformat(), start.astimezone(UTC), end.astimezone(UTC))


@dataclass(frozen=True)
class Ask:
    """A send asking a daily quota for `count` of what its meter counts."""

    project_id: str
    meter: Meter
    limit: int
    zone: str
    count: int
    # True when this transaction wrote the messages already, so its own count includes them.
    written: bool = False


@dataclass(frozen=True)
class Taken:
    """The quota's answer to an Ask, and what to do once the transaction ends."""

    allowed: bool
    limit: int
    # Counting this send when allowed; the use it did not fit when refused.
    used: int
    requested: int
    day: QuotaDay
    reset_seconds: int
    # On rollback or replay: what to put back in Redis (None: nothing was taken there).
    give_back: Callable[[], None] | None = None
    # After commit: PostgreSQL's decision, published to Redis.
    publish: Callable[[], None] | None = None

    @property
    def remaining(self) -> int:
        return max(self.limit - self.used, 0)

    def headers(self, name: str = "X-Quota") -> dict[str, str]:
        headers = {
            f"{name}-Limit": str(self.limit),
            f"{name}-Remaining": str(self.remaining),
            f"{name}-Reset": str(self.reset_seconds),
        }
        if not self.allowed:
            headers["Retry-After"] = str(self.reset_seconds)
        return headers


class DailyQuota:
    """The daily quotas of every project, in one Redis; `clock` is settable, so tests can
    cross a midnight without waiting for one."""

    def __init__(self, client: redis.Redis, clock: Callable[[], float] = time.time):
        self.clock = clock
        self._take = client.register_script(TAKE)
        self._settle = client.register_script(SETTLE)
        self._give_back = client.register_script(GIVE_BACK)

    def take(self, session: Session, ask: Ask) -> Taken:
        """Take `ask.count` from the day's quota in `session`'s transaction, or refuse them all."""
        now = self.clock()
        day = quota_day(now, ask.zone)
        counter = _Counter(ask, day, now)
        try:
            status, used, generation = self._take(**counter.script(ask.count))
        except redis.RedisError as error:
            logger.warning("daily quota of %s falls back to PostgreSQL: %s", ask.project_id, error)
            return self._decide(session, counter, redis_up=False)
        if status == REFUSED:
            return counter.answer(False, used)
        if status == MISSING:
            return self._decide(session, counter, redis_up=True)
        current = session.scalar(HOLD_SHARED, {**counter.lock, **counter.names})
        if current == generation:
            return counter.answer(True, used, give_back=partial(self._put_back, counter, generation))
        # PostgreSQL decided alone since that state was published: put the take back and count again.
        try:
            self._give_back(**counter.script(ask.count, generation))
            committed = self._committed(session, counter)
            status, used, _ = self._settle(**counter.script(committed, current, counter.expires, ask.count, 1))
        except redis.RedisError:
            status = MISSING
        if status == MISSING:
            # Gone while this accept held the lock shared, so it cannot wait for the others that do.
            raise LimitUnknown("The daily quota could not be counted just now; try again.")
        give_back = partial(self._put_back, counter, current) if status == TAKEN else None
        return counter.answer(status == TAKEN, used, give_back=give_back)

    def _decide(self, session: Session, counter: _Counter, redis_up: bool) -> Taken:
        """PostgreSQL's count, once every accept that took from Redis has committed or gone."""
        session.execute(LOCK_EXCLUSIVE, counter.lock)
        committed = self._committed(session, counter)
        count = counter.ask.count
        if committed + count > counter.ask.limit:
            if redis_up:  # so the next refusals are Redis's, not another count
                self._publish(counter, committed, session.scalar(GENERATION, counter.names))
            return counter.answer(False, committed)
        used = committed + count
        generation = session.scalar(NEW_GENERATION, counter.names)
        return counter.answer(True, used, publish=partial(self._publish, counter, used, generation))

    def _committed(self, session: Session, counter: _Counter) -> int:
        """The day's count committed so far (this transaction sees its own as well)."""
        meter = counter.ask.meter
        day = {"project": counter.ask.project_id, "start": counter.day.start, "end": counter.day.end}
        seen = session.scalar(meter.count, {**meter.params, **day})
        return max(seen - (counter.ask.count if counter.ask.written else 0), 0)

    def _publish(self, counter: _Counter, used: int, generation: int) -> None:
        try:
            self._settle(**counter.script(used, generation, counter.expires, 0, 0))
        except redis.RedisError as error:
            logger.warning("could not publish the daily quota of %s: %s", counter.ask.project_id, error)

    def _put_back(self, counter: _Counter, generation: int) -> None:
        try:
            self._give_back(**counter.script(counter.ask.count, generation))
        except redis.RedisError as error:  # counted once too often: never over the quota
            logger.warning("could not give back to the daily quota of %s: %s", counter.ask.project_id, error)


class ScriptCall(TypedDict):
    """A Lua script's keys and arguments, as `redis.commands.core.Script` is called with them."""

    keys: list[str]
    args: list[str | int]


class _Counter:
    """One Ask's day counter: its Redis keys and arguments, its lock, its answers."""

    def __init__(self, ask: Ask, day: QuotaDay, now: float):
        self.ask = ask
        self.day = day
        self.reset_seconds = max(1, math.ceil(day.end.timestamp() - now))
        self.expires = int((day.end + KEEP_AFTER_DAY).timestamp())
        meter = ask.meter.name
        self.names = {"project": ask.project_id, "channel": meter}
        self.lock = {"lock_class": LOCK_CLASS, "lock_name": f"{ask.project_id}:{meter}"}
        # The zone is in the key: a project that moves its midnight starts a day of another span.
        self._keys = [f"tidings:quota:{ask.project_id}:{meter}:{day.date}:{ask.zone}", USAGE_HASH]
        noted = usage_field(ask.project_id, meter) if ask.meter.noted else ""
        self._note: list[str | int] = [noted, ask.limit, int(day.end.timestamp())]

    def script(self, *args: int) -> ScriptCall:
        return {"keys": self._keys, "args": [*self._note, *args]}

    def answer(self, allowed: bool, used: int, **after: Callable[[], None] | None) -> Taken:
        ask = self.ask
        return Taken(allowed, ask.limit, used, ask.count, self.day, self.reset_seconds, **after)
