"""One Redis client per URL and process, with timeouts short enough to fail fast."""

from __future__ import annotations

from functools import cache
from typing import cast

import redis


@cache
def redis_for(url: str) -> redis.Redis:
    """Short timeouts: a Redis that hangs must not hang a request or a task for long."""
    return redis.Redis.from_url(url, socket_timeout=0.5, socket_connect_timeout=0.5, health_check_interval=30)


def hash_of(client: redis.Redis, key: str) -> dict[bytes, bytes]:
    """A hash's fields and values as stored, as our clients do not decode answers, which
    redis-py's types, one for every client, cannot tell."""
    return cast(dict[bytes, bytes], client.hgetall(key))
