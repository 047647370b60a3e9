"""Provider pacing shared by every worker on every machine: a sliding window in Redis.

Providers state their limits as "N per second" and answer 429 beyond it. A token bucket
lets its capacity *plus* a second's refill through in one window; a sliding window of the
grants in the last second never exceeds N in any one-second window, which is what the
provider counts. One Lua script takes the grant atomically, with Redis's clock, so
workers with skewed clocks still share one pace. A task may ask for a whole batch and be
granted part of it: it sends what it got and re-publishes the rest after `wait`.
"""

from __future__ import annotations

from dataclasses import dataclass

import redis

# Keys: the window's sorted set. Args: limit, window (ms), requested, a unique member id.
# Members are "<id>:<count>" scored by grant time; the script sums the counts still inside
# the window, grants what is left, and says how long until the oldest grant leaves it.
_ACQUIRE = """
local now_parts = redis.call('TIME')
local now = tonumber(now_parts[1]) * 1000 + math.floor(tonumber(now_parts[2]) / 1000)
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local requested = tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
local used = 0
local grants = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
for i = 1, #grants, 2 do
  used = used + tonumber(string.match(grants[i], ':(%d+)$'))
end
local granted = math.min(requested, math.max(limit - used, 0))
if granted > 0 then
  redis.call('ZADD', KEYS[1], now, ARGV[4] .. ':' .. granted)
  redis.call('PEXPIRE', KEYS[1], window)
end
local wait = 0
if granted < requested then
  local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  if #oldest > 0 then wait = tonumber(oldest[2]) + window - now else wait = 1 end
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

# A second, plus a margin for the time between a grant and its request reaching the
# provider, which varies by a few milliseconds from one batch to the next.
WINDOW_MS = 1050


@dataclass(frozen=True)
class Grant:
    granted: int
    wait_seconds: float


class ProviderPacer:
    def __init__(self, client: redis.Redis):
        self.client = client
        self._acquire = client.register_script(_ACQUIRE)
        self._give_back = client.register_script(_GIVE_BACK)

    def acquire(self, provider: str, rate_per_second: float, requested: int, grant_id: str) -> Grant:
        """Take up to `requested` sends from `provider`'s window; `grant_id` must be unique.

        Below one per second the window widens (0.5/s: one per two seconds), so every rate
        is a whole number of sends per window.
        """
        window_ms = WINDOW_MS if rate_per_second >= 1 else int(WINDOW_MS / rate_per_second)
        limit = max(int(rate_per_second * window_ms / WINDOW_MS), 1)
        granted, wait_ms = self._acquire(
            keys=[f"tidings:pace:{provider}"], args=[limit, window_ms, requested, grant_id]
        )
        return Grant(int(granted), int(wait_ms) / 1000)

    def give_back(self, provider: str, grant_id: str, *, granted: int, used: int) -> None:
        """Return what a grant took and will not send (rows a repeat found sent, a lane that
        had fewer waiting), so the window's room goes to whoever asks next."""
        if used < granted:
            self._give_back(keys=[f"tidings:pace:{provider}"], args=[grant_id, granted, used])
