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
the window counts it from then; and a window is granted in slices, a tenth of the pace per
tenth of the window, so what the rest of the lag can still push into one second is a
slice, and a newcomer waits a slice for room, not a whole window.
"""

from __future__ import annotations

from dataclasses import dataclass

import redis

# Keys: the window's sorted set. Args: limit, window (ms), requested, a unique member id, slices.
# Members are "<id>:<count>" scored by grant time; the script sums the counts still inside
# the window and inside its last slice, grants what both have left, and says how long until
# the grant that holds the room leaves (the window's oldest, or the slice's).
_ACQUIRE = """
local now_parts = redis.call('TIME')
local now = tonumber(now_parts[1]) * 1000 + math.floor(tonumber(now_parts[2]) / 1000)
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local requested = tonumber(ARGV[3])
local slices = tonumber(ARGV[5])
local slice = window / slices
local slice_limit = math.ceil(limit / slices)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
local used, recent, slice_oldest = 0, 0, nil
local grants = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
for i = 1, #grants, 2 do
  local count, at = tonumber(string.match(grants[i], ':(%d+)$')), tonumber(grants[i + 1])
  used = used + count
  if at > now - slice then
    recent = recent + count
    if slice_oldest == nil then slice_oldest = at end
  end
end
local room = math.max(limit - used, 0)
local granted = math.min(requested, room, math.max(slice_limit - recent, 0))
if granted > 0 then
  redis.call('ZADD', KEYS[1], now, ARGV[4] .. ':' .. granted)
  redis.call('PEXPIRE', KEYS[1], window)
end
local wait = 0
if granted < requested then
  if room > granted and slice_oldest ~= nil then
    wait = math.max(math.ceil(slice_oldest + slice - now), 1)
  else
    local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
    if #oldest > 0 then wait = tonumber(oldest[2]) + window - now else wait = 1 end
  end
end
return {granted, wait}
"""

# Keys: the window's sorted set. Args: the grant's member id, what it was granted, what it keeps.
# The grant keeps its time and gives the rest back to the window.
_GIVE_BACK = """
local member = ARGV[1] .. ':' .. ARGV[2]
local score = redis.call('ZSCORE', KEYS[1], member)
if score then
  redis.call('ZREM', KEYS[1], member)
  if tonumber(ARGV[3]) > 0 then redis.call('ZADD', KEYS[1], score, ARGV[1] .. ':' .. ARGV[3]) end
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
# provider: the call's setup and the network, a few milliseconds.
WINDOW_MS = 1050
# A window is granted in this many slices, each at most its share of the pace.
SLICES = 10


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
        granted, wait_ms = self._acquire(
            keys=[f"tidings:pace:{provider}"], args=[limit, window_ms, requested, grant_id, SLICES]
        )
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
            self._give_back(keys=[f"tidings:pace:{provider}"], args=[grant_id, granted, used])


def window_of(rate_per_second: float) -> int:
    """The window (ms): below one per second it widens (0.5/s: one per two seconds)."""
    return WINDOW_MS if rate_per_second >= 1 else int(WINDOW_MS / rate_per_second)
