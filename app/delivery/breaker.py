"""Circuit breakers: one per provider, kept in Redis and shared by every worker.

A provider that keeps failing (`failures` batches in a row failed transiently, or an error
rate over a window) is *opened*: prepare routes its channel to the next provider of the
chain, and deliver hands messages already routed to it over to that next provider instead
of retrying them against a dead one. After the cool-down it is *half-open*: one probe batch
may go; if the provider took it the circuit closes and traffic comes back, otherwise it
opens for another cool-down.

Deliver reports each batch once (counts, not messages), and two Lua scripts make every
transition atomic on Redis's clock, so workers on machines with skewed clocks agree. A
Redis that cannot be reached never stops a send: the breaker then reads as closed.

Keys: `tidings:breaker:<provider>` (hash: state, open_until, failures), `…:window` (sorted
set of recent batches, "<id>:<ok>:<failed>" scored by time) and `…:probe` (who probes).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import TypedDict

import redis

from app.config import BreakerPolicy
from app.enums import CircuitState

logger = logging.getLogger(__name__)

PREFIX = "tidings:breaker:"
# A probe whose worker died frees its place after this long, at the latest.
PROBE_TTL_FLOOR_MS = 60_000

_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

# KEYS: hash, probe. ARGV: probe ttl (ms). → {verdict, wait ms}
_ADMIT = (
    _NOW
    + """
if redis.call('HGET', KEYS[1], 'state') ~= 'open' then return {'closed', 0} end
local open_until = tonumber(redis.call('HGET', KEYS[1], 'open_until'))
if now < open_until then return {'open', open_until - now} end
if redis.call('SET', KEYS[2], '1', 'NX', 'PX', ARGV[1]) then return {'probe', 0} end
return {'open', math.max(redis.call('PTTL', KEYS[2]), 1)}
"""
)

# KEYS: hash, window, probe. ARGV: ok, failed, probe (0/1), member id, failures limit,
# window (ms), min volume, error rate, cool-down (ms). → the state entered, or ''.
_RECORD = (
    _NOW
    + """
local ok, failed = tonumber(ARGV[1]), tonumber(ARGV[2])
local function open()
  redis.call('HSET', KEYS[1], 'state', 'open', 'open_until', now + tonumber(ARGV[9]), 'failures', 0)
  redis.call('DEL', KEYS[2])
  return 'open'
end
if ARGV[3] == '1' then
  redis.call('DEL', KEYS[3])
  if ok + failed == 0 then return '' end
  if failed > 0 then return open() end
  redis.call('DEL', KEYS[1], KEYS[2])
  return 'closed'
end
if ok + failed == 0 or redis.call('HGET', KEYS[1], 'state') == 'open' then return '' end
local consecutive = 0
if ok == 0 then consecutive = redis.call('HINCRBY', KEYS[1], 'failures', 1)
else redis.call('HSET', KEYS[1], 'failures', 0) end
local window = tonumber(ARGV[6])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - window)
redis.call('ZADD', KEYS[2], now, ARGV[4] .. ':' .. ok .. ':' .. failed)
redis.call('PEXPIRE', KEYS[2], window)
local total_ok, total_failed = 0, 0
for _, member in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
  local a, b = string.match(member, ':(%d+):(%d+)$')
  total_ok = total_ok + tonumber(a)
  total_failed = total_failed + tonumber(b)
end
local total = total_ok + total_failed
if consecutive >= tonumber(ARGV[5])
   or (total >= tonumber(ARGV[7]) and total_failed / total >= tonumber(ARGV[8])) then
  return open()
end
return ''
"""
)


@dataclass(frozen=True)
class Admission:
    """May a batch go through this provider now? `probe`: it is the half-open probe."""

    admitted: bool
    probe: bool = False
    wait_seconds: float = 0.0


@dataclass(frozen=True)
class Circuit:
    """A provider's breaker as an operator sees it."""

    state: CircuitState
    failures: int = 0  # batches in a row that failed (while closed)
    seconds_left: float | None = None  # until a probe may go (while open)
    # Messages of the batches in the error-rate window: answered on their merits, failed transiently.
    recent_answered: int = 0
    recent_failed: int = 0


CLOSED = Circuit(CircuitState.CLOSED)


class CircuitBreakers:
    def __init__(self, client: redis.Redis, policy: BreakerPolicy):
        self.client = client
        self.policy = policy
        self._admit = client.register_script(_ADMIT)
        self._record = client.register_script(_RECORD)

    def admit(self, provider: str) -> Admission:
        """Closed: go. Open: wait. Half-open: the first asker is the probe, the others wait."""
        ttl = max(int(self.policy.cooldown * 1000), PROBE_TTL_FLOOR_MS)
        try:
            verdict, wait_ms = self._admit(keys=[PREFIX + provider, PREFIX + provider + ":probe"], args=[ttl])
        except redis.RedisError as error:
            logger.warning("circuit breaker of %s unreadable, treated as closed: %s", provider, error)
            return Admission(True)
        verdict = verdict.decode() if isinstance(verdict, bytes) else verdict
        if verdict == "open":
            return Admission(False, wait_seconds=int(wait_ms) / 1000)
        return Admission(True, probe=verdict == "probe")

    def record(self, provider: str, ok: int, failed: int, probe: bool) -> CircuitState | None:
        """Count one batch: `ok` messages the provider answered on their merits (sent or
        refused), `failed` the transient failures. Returns the state entered, if any.

        While open, batches that were admitted before it opened (or sent because nothing
        else was left) change nothing: only the probe decides when it closes.
        """
        key = PREFIX + provider
        policy = self.policy
        try:
            entered = self._record(
                keys=[key, key + ":window", key + ":probe"],
                args=[
                    ok,
                    failed,
                    int(probe),
                    uuid.uuid4().hex,
                    policy.failures,
                    int(policy.window * 1000),
                    policy.min_volume,
                    policy.error_rate,
                    int(policy.cooldown * 1000),
                ],
            )
        except redis.RedisError as error:
            logger.warning("could not record a batch on the circuit breaker of %s: %s", provider, error)
            return None
        entered = entered.decode() if isinstance(entered, bytes) else entered
        return CircuitState(entered) if entered else None

    def states(self, providers: Iterable[str]) -> dict[str, Circuit]:
        """Every provider's circuit in one round trip; closed for all when Redis cannot say."""
        names = sorted(set(providers))
        if not names:
            return {}
        try:
            with self.client.pipeline(transaction=False) as pipe:
                for name in names:
                    pipe.hmget(PREFIX + name, "state", "open_until", "failures")
                    pipe.zrange(PREFIX + name + ":window", 0, -1, withscores=True)
                pipe.time()
                *rows, (seconds, micros) = pipe.execute()
        except redis.RedisError as error:
            logger.warning("circuit breakers unreadable, treated as closed: %s", error)
            return {name: CLOSED for name in names}
        now_ms = seconds * 1000 + micros // 1000
        since_ms = now_ms - self.policy.window * 1000
        return {
            name: replace(_circuit(row, now_ms), **_window_counts(batches, since_ms))
            for name, row, batches in zip(names, rows[::2], rows[1::2], strict=True)
        }

    def reset(self, provider: str) -> None:
        """Close a provider's circuit by hand (an operator knows it is back)."""
        key = PREFIX + provider
        self.client.delete(key, key + ":window", key + ":probe")


class WindowCounts(TypedDict):
    """A circuit's window counts, by the names of its fields, so they can be `replace`d in."""

    recent_answered: int
    recent_failed: int


def _window_counts(batches: list[tuple[bytes, float]], since_ms: float) -> WindowCounts:
    """What the window's batches ("<id>:<ok>:<failed>", scored by time) add up to, counting
    only those still inside it: the set is trimmed when the next batch is recorded."""
    answered = failed = 0
    for member, at in batches:
        if at >= since_ms:
            _, ok, bad = member.decode().rsplit(":", 2)
            answered, failed = answered + int(ok), failed + int(bad)
    return {"recent_answered": answered, "recent_failed": failed}


def _circuit(row: list[bytes | None], now_ms: int) -> Circuit:
    state, open_until, failures = (value.decode() if value is not None else None for value in row)
    if state != "open":
        return Circuit(CircuitState.CLOSED, failures=int(failures or 0))
    left = (int(open_until or 0) - now_ms) / 1000  # the script sets it with the state
    if left > 0:
        return Circuit(CircuitState.OPEN, seconds_left=left)
    return Circuit(CircuitState.HALF_OPEN, seconds_left=0.0)
