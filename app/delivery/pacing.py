"""Provider pacing shared by every worker on every machine: a sliding window in Redis.

Providers state their limits as "N per second" and answer 429 beyond it. A token bucket
lets its capacity *plus* a second's refill through in one window; a sliding window of the
grants in the last second never exceeds N in any one-second window, which is what the
provider counts. One Lua script takes the grant atomically, with Redis's clock, so
workers with skewed clocks still share one pace. A task may ask for a whole batch and be
granted part of it: it sends what it got and re-publishes the rest after `wait`.

The provider counts a request when it arrives, not when its grant was taken: between the
two a run claims its rows (a database transaction), which on a loaded machine takes from a
few milliseconds to a quarter of a second. Two whole windows granted at once, the first
late and the second early, then reached the provider in one second (1.3-1.8x the pace).
So a grant is stamped again once its rows are claimed, just before the call (`stamp`), and
the window counts it from then; and a window is granted in slices, a quarter of the pace
per quarter of the window, so what the rest of the lag can still push into one second is a
slice, and a newcomer waits a slice for room, not a whole window. Tenths cost more than they
gave: ten grants, claims and provider calls a window for one, and in the noisy-neighbour
soak's flood the deliver runs' overhead held another project's sends in prepare for 14 s.
"""

from __future__ import annotations

from dataclasses import dataclass

import redis

# Keys: the window's sorted set, the slices' sorted set. Args: limit, window (ms), requested,
# a unique member id, slices. Members of both are "<id>:<count>": in the window scored by
# the grant's time until it is stamped, then by its stamp's; in the slices by the grant's
# time, so a stamp paces the provider's window without holding up the next slice. The
# script grants what both have left, and says how long until the grant that holds the room
# leaves (the slice's oldest, or the window's).
_ACQUIRE = """
local now_parts = redis.call('TIME')
local now = tonumber(now_parts[1]) * 1000 + math.floor(tonumber(now_parts[2]) / 1000)
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local requested = tonumber(ARGV[3])
local slice = window / tonumber(ARGV[5])
local function held(key, since)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', since)
  local total, grants = 0, redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')
  for i = 1, #grants, 2 do total = total + tonumber(string.match(grants[i], ':(%d+)$')) end
  return total, tonumber(grants[2])
end
local used, oldest = held(KEYS[1], now - window)
local recent, slice_oldest = held(KEYS[2], now - slice)
local room = math.max(limit - used, 0)
local granted = math.min(requested, room, math.max(math.ceil(limit / tonumber(ARGV[5])) - recent, 0))
if granted > 0 then
  for _, key in ipairs(KEYS) do
    redis.call('ZADD', key, now, ARGV[4] .. ':' .. granted)
    redis.call('PEXPIRE', key, window)
  end
end
local wait = 0
if granted < requested then
  if room > granted and slice_oldest then
    wait = math.max(math.ceil(slice_oldest + slice - now), 1)
  elseif oldest then
    wait = math.max(math.ceil(oldest + window - now), 1)
  else
    wait = 1
  end
end
return {granted, wait}
"""

# Keys: the window's sorted set, the slices'. Args: the grant's member id, what it was
# granted, what it keeps. The grant keeps its time and gives the rest back to both.
_GIVE_BACK = """
for _, key in ipairs(KEYS) do
  local member = ARGV[1] .. ':' .. ARGV[2]
  local score = redis.call('ZSCORE', key, member)
  if score then
    redis.call('ZREM', key, member)
    if tonumber(ARGV[3]) > 0 then redis.call('ZADD', key, score, ARGV[1] .. ':' .. ARGV[3]) end
  end
end
"""

# Keys: the window's sorted set. Args: the grant's member id as it stands ("<id>:<count>"), window (ms).
# The grant's time becomes now, if it is still in the window (a claim slower than the window
# leaves it as granted: its room is no one else's to count again).
_STAMP = """
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  local now_parts = redis.call('TIME')
  local now = tonumber(now_parts[1]) * 1000 + math.floor(tonumber(now_parts[2]) / 1000)
  redis.call('ZADD', KEYS[1], 'XX', now, ARGV[1])
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
"""

# A second, plus a margin for the time between a grant's stamp and its request reaching the
# provider (the call's setup, the network): 0.02 s typically, up to 0.1-0.19 s with the cores
# of a two-core machine kept busy (tests/faults/test_pace_at_provider.py prints it).
WINDOW_MS = 1100
# A window is granted in this many slices, each at most its share of the pace.
SLICES = 4


@dataclass(frozen=True)
class Grant:
    granted: int
    wait_seconds: float


@dataclass(frozen=True)
class Held:
    """A grant of `count` sends (after any give-back), taken before its rows were claimed
    and to be stamped once they are."""

    provider: str
    rate_per_second: float
    grant_id: str
    count: int


class ProviderPacer:
    def __init__(self, client: redis.Redis):
        self.client = client
        self._acquire = client.register_script(_ACQUIRE)
        self._give_back = client.register_script(_GIVE_BACK)
        self._stamp = client.register_script(_STAMP)

    def acquire(self, provider: str, rate_per_second: float, requested: int, grant_id: str) -> Grant:
        """Take up to `requested` sends from `provider`'s window, at most a slice of it;
        `grant_id` must be unique. Below one per second the window widens (`window_of`), so
        every rate is a whole number of sends per window."""
        window_ms = window_of(rate_per_second)
        limit = max(int(rate_per_second * window_ms / WINDOW_MS), 1)
        granted, wait_ms = self._acquire(keys=keys(provider), args=[limit, window_ms, requested, grant_id, SLICES])
        return Grant(int(granted), int(wait_ms) / 1000)

    def stamp(self, held: Held) -> None:
        """Count `held` from now, its rows claimed and its call about to go."""
        self._stamp(
            keys=[f"tidings:pace:{held.provider}"],
            args=[f"{held.grant_id}:{held.count}", window_of(held.rate_per_second)],
        )

    def give_back(self, provider: str, grant_id: str, *, granted: int, used: int) -> None:
        """Return what a grant took and will not send (rows a repeat found sent, a lane that
        had fewer waiting), so the window's room goes to whoever asks next."""
        if used < granted:
            self._give_back(keys=keys(provider), args=[grant_id, granted, used])


def window_of(rate_per_second: float) -> int:
    """The window (ms): below one per second it widens (0.5/s: one per two seconds)."""
    return WINDOW_MS if rate_per_second >= 1 else int(WINDOW_MS / rate_per_second)


def keys(provider: str) -> list[str]:
    """The window's sorted set and the slices'."""
    return [f"tidings:pace:{provider}", f"tidings:pace:{provider}:slices"]
