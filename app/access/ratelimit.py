"""The per-project API rate limits: requests a minute, and messages a minute, each one
fixed-window counter per minute in Redis.

Every API process shares the counters, so a limit holds however many run. The message
limit counts what a send carries (a batch of 10,000 costs 10,000), so one call cannot pass
a whole campaign under a limit meant for people; it is checked and added in one Lua call,
so a send it refuses costs nothing and the next one that fits still goes. When Redis
cannot be reached the limiters let the request through and log it: a broken limiter must
not take the whole API down with it (the daily quota, app/access/quota.py, is what never
opens by accident).

`limit_request` is how a request counts: every /v1 project route and every console page of a
project's own key, one counter per project for both, so the console is no way around the limit.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import redis
from flask import Response, g

from app.errors import abort

logger = logging.getLogger(__name__)

WINDOW_SECONDS = 60


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    limit: int
    remaining: int
    reset_seconds: int

    def headers(self, name: str = "RateLimit") -> dict[str, str]:
        headers = {
            f"{name}-Limit": str(self.limit),
            f"{name}-Remaining": str(self.remaining),
            f"{name}-Reset": str(self.reset_seconds),
        }
        if not self.allowed:
            headers["Retry-After"] = str(self.reset_seconds)
        return headers


def _window(now: float | None) -> tuple[int, int]:
    """The current window's number and the seconds left in it (at least 1)."""
    now = time.time() if now is None else now
    window = int(now // WINDOW_SECONDS)
    return window, max(1, int((window + 1) * WINDOW_SECONDS - now))


class ApiRateLimiter:
    def __init__(self, client: redis.Redis):
        self.client = client

    def check(self, project_id: str, limit: int, now: float | None = None) -> Verdict | None:
        """Count one request; None when Redis could not be asked (the request goes through)."""
        window, reset = _window(now)
        key = f"tidings:ratelimit:api:{project_id}:{window}"
        try:
            pipe = self.client.pipeline()
            pipe.incr(key)
            pipe.expire(key, WINDOW_SECONDS * 2)
            count, _ = pipe.execute()
        except redis.RedisError as error:
            logger.warning("API rate limiter unavailable, letting %s through: %s", project_id, error)
            return None
        return Verdict(count <= limit, limit, max(limit - count, 0), reset)


# KEYS[1]: the window's counter. ARGV: messages, limit, seconds to keep the counter.
# → {1 if added, the count after it (or before, when refused)}
TAKE_MESSAGES = """
local used = tonumber(redis.call('GET', KEYS[1]) or '0')
local count, limit = tonumber(ARGV[1]), tonumber(ARGV[2])
if used + count > limit then return {0, used} end
used = redis.call('INCRBY', KEYS[1], count)
redis.call('EXPIRE', KEYS[1], ARGV[3])
return {1, used}
"""
# The same counter, less what a send took and did not write (once its window is gone, nothing).
GIVE_BACK_MESSAGES = """
if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('DECRBY', KEYS[1], ARGV[1]) end
"""


@dataclass(frozen=True)
class MessageVerdict(Verdict):
    """A message limit's answer, and what to put back should the send not be written after all."""

    requested: int = 0
    key: str = ""


class MessageRateLimiter:
    def __init__(self, client: redis.Redis):
        self._take = client.register_script(TAKE_MESSAGES)
        self._give_back = client.register_script(GIVE_BACK_MESSAGES)

    def take(self, project_id: str, count: int, limit: int, now: float | None = None) -> MessageVerdict | None:
        """Add `count` messages to this minute's if they fit; None when Redis could not be asked."""
        window, reset = _window(now)
        key = f"tidings:ratelimit:messages:{project_id}:{window}"
        try:
            added, used = self._take(keys=[key], args=[count, limit, WINDOW_SECONDS * 2])
        except redis.RedisError as error:
            logger.warning("message rate limiter unavailable, letting %s through: %s", project_id, error)
            return None
        return MessageVerdict(bool(added), limit, max(limit - used, 0), reset, requested=count, key=key)

    def give_back(self, verdict: MessageVerdict) -> None:
        """Return what a send took that was not written (a rollback, an idempotent replay)."""
        try:
            self._give_back(keys=[verdict.key], args=[verdict.requested])
        except redis.RedisError as error:
            logger.warning("could not give back %s messages to %s: %s", verdict.requested, verdict.key, error)


def limit_request(limiter: ApiRateLimiter, bucket: str, per_minute: int | None) -> None:
    """Count the request against `bucket`'s budget; 429 when it is spent. The limiter's
    headers wait in `g` for `add_rate_limit_headers`."""
    if not per_minute:
        return
    verdict = limiter.check(bucket, per_minute)
    if verdict is not None:
        g.rate_limit_headers = verdict.headers()
        if not verdict.allowed:
            abort(429, "Rate limit exceeded; retry after the window resets.")


def add_rate_limit_headers(response: Response) -> Response:
    """Runs for the 429 too, so the limiter's headers are set in one place."""
    response.headers.extend(getattr(g, "rate_limit_headers", {}))
    return response
