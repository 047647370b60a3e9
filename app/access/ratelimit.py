"""The per-project API rate limit: one fixed-window counter per minute in Redis.

Every API process shares the counter, so the limit holds however many run. When Redis
cannot be reached the limiter lets the request through and logs it: a broken limiter
must not take the whole API down with it.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import redis

logger = logging.getLogger(__name__)

WINDOW_SECONDS = 60


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    limit: int
    remaining: int
    reset_seconds: int

    def headers(self) -> dict[str, str]:
        headers = {
            "RateLimit-Limit": str(self.limit),
            "RateLimit-Remaining": str(self.remaining),
            "RateLimit-Reset": str(self.reset_seconds),
        }
        if not self.allowed:
            headers["Retry-After"] = str(self.reset_seconds)
        return headers


class ApiRateLimiter:
    def __init__(self, client: redis.Redis):
        self.client = client

    def check(self, project_id: str, limit: int, now: float | None = None) -> Verdict | None:
        """Count one request; None when Redis could not be asked (the request goes through)."""
        now = time.time() if now is None else now
        window = int(now // WINDOW_SECONDS)
        key = f"tidings:ratelimit:api:{project_id}:{window}"
        try:
            pipe = self.client.pipeline()
            pipe.incr(key)
            pipe.expire(key, WINDOW_SECONDS * 2)
            count, _ = pipe.execute()
        except redis.RedisError as error:
            logger.warning("API rate limiter unavailable, letting %s through: %s", project_id, error)
            return None
        reset = max(1, int((window + 1) * WINDOW_SECONDS - now))
        return Verdict(count <= limit, limit, max(limit - count, 0), reset)
