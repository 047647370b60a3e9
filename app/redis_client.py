"""One Redis client per URL and process, with timeouts short enough to fail fast."""

from __future__ import annotations

from functools import cache

import redis


@cache
def redis_for(url: str) -> redis.Redis:
    """Short timeouts: a Redis that hangs must not hang a request or a task for long."""
    return redis.Redis.from_url(url, socket_timeout=0.5, socket_connect_timeout=0.5, health_check_interval=30)
